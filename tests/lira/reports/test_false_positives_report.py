"""lira.reports.false_positives_report: the report's counts are lira.nonmember_pairs' on the scores file evaluate
wrote, --fpr picks floor(FPR x pairs), and a partial run without some canaries names each canary's source index."""

import os

import numpy as np

from lira import nonmember_pairs
from lira.reports import false_positives_report
from lira.reports import loo_report
import run_folder
from lira.reports import synthetic_run


def test_report_counts_and_source_indices(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=20, seq_len=3, seed=1, shift=1.0)
  loo_report.evaluate_run(run, variants=["univariate-shared"], progress=False)
  config = run_folder.load_config(run)
  config["partial_of"] = {"num_canaries": 22, "dropped_canaries": [3, 10]}  # as partial_run --drop_canaries=3,10
  run_folder.save_config(run, config)
  (results,) = [f for f in os.listdir(run) if f.startswith("results") and f.endswith(".json")]
  report = false_positives_report.build(run, fpr=0.05, show=20, results_name=results)
  (v,) = report["variants"]
  score = np.load(f"{run}/scores_univariate-shared.npy")
  keep = np.load(f"{run}/keep.npy")
  n_neg = int((~keep & np.isfinite(score)).sum())
  assert v["top"] == int(0.05 * n_neg) and v["n_nonmember"] == n_neg
  expected = nonmember_pairs.top_nonmember_pairs(score, keep, v["top"])
  assert [c["canary"] for c in v["canaries"]] == expected["canaries"][:20].tolist()
  assert [c["pairs"] for c in v["canaries"]] == expected["pairs"][:20].tolist()
  source = {n: n + (n >= 3) + (n >= 9) for n in range(20)}  # the kept canaries of 22 without 3 and 10
  assert all(c["source_canary"] == source[c["canary"]] for c in v["canaries"])
  first = v["canaries"][0]
  assert f"| {first['canary']} (source {source[first['canary']]}) | {first['pairs']} |" in \
      false_positives_report.markdown(report)


def test_texts_with_control_characters_stay_printable_in_the_table(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=20, seq_len=3, seed=1, shift=1.0)
  loo_report.evaluate_run(run, variants=["univariate-shared"], progress=False)
  (results,) = [f for f in os.listdir(run) if f.startswith("results") and f.endswith(".json")]
  report = false_positives_report.build(run, top=5, show=1, results_name=results)
  (row,) = report["variants"][0]["canaries"]
  row["text"] = "a\x00b\x1b|c\td\n"  # random tokens decode to control bytes
  md = false_positives_report.markdown(report)
  assert all(c.isprintable() for c in md.replace("\n", ""))
  assert f"| {row['canary']} | {row['pairs']} | {row['out_pairs']} | a\\x00b\\x1b\\|c d |" in md
