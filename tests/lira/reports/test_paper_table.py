"""lira.paper_table (the paper_table command): the run's column equals its results.json, each test's A and B equal the pooled TPRs."""

import json
import os

import numpy as np
import pytest

from lira import metrics
from lira.reports import paper_table_report
from lira.reports import loo_report
from lira.errors import InputError
import run_folder
from lira.reports import synthetic_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("run"))
  synthetic_run.write_synthetic_run(path, num_models=8, num_canaries=300, seq_len=5, seed=2, shift=1.5)
  loo_report.evaluate_run(path, progress=False)  # default settings: results.json
  return path


def test_table_rows_and_paired_tests_agree_with_the_report_and_scores(run_dir):
  table = paper_table_report.build(run_dir, setting="lstm_worst", n_boot=50)
  with open(f"{run_dir}/results.json") as f:
    results = json.load(f)
  keep = np.load(f"{run_dir}/keep.npy")
  for row, variant, paper in zip(table["rows"], results["variants"], paper_table_report.PAPER_TABLE_II["lstm_worst"]):
    assert row["name"] == variant["name"] and row["paper"] == list(paper)
    assert row["tpr"] == [variant["summary"]["tpr"][metrics.fpr_key(f)]["tpr"] for f in paper_table_report.FPRS]
  assert [(t["a"], t["b"]) for t in table["tests"]] == [(a, b) for a, b, _ in paper_table_report.COMPARISONS]
  for t in table["tests"]:
    sa, sb = (np.load(f"{run_dir}/scores_{k}.npy") for k in (t["a"], t["b"]))
    for e, fpr in zip(t["fprs"], paper_table_report.FPRS):
      assert e["a"] == pytest.approx(metrics.tpr_at_fpr(sa, keep, fpr), abs=1e-12)
      assert e["b"] == pytest.approx(metrics.tpr_at_fpr(sb, keep, fpr), abs=1e-12)
      # 1,200 non-members resolve 0.1% but not 0.01%: the latter can never be called.
      assert e["resolved"] == (fpr == 0.001)
      assert e["verdict"] in ("holds", "opposite", "not resolved") and (e["resolved"] or e["verdict"] == "not resolved")
  assert "| Univariate Class-Wise | 92.51 |" in paper_table_report.markdown(table)
  # The paper's LSTM worst column has OAS class-wise 69.32 points below univariate class-wise at 0.1%: expected < 0.
  last = table["tests"][-1]["fprs"][0]
  assert last["paper_diff"] == -69.32 and last["expected_sign"] == -1


def test_verdict_reads_the_interval():
  assert paper_table_report.verdict(np.array([0.01, 0.2]), True) == "holds"
  assert paper_table_report.verdict(np.array([-0.2, -0.01]), True) == "opposite"
  assert paper_table_report.verdict(np.array([-0.2, -0.01]), True, expected_sign=-1) == "holds"
  assert paper_table_report.verdict(np.array([0.01, 0.2]), True, expected_sign=-1) == "opposite"
  assert paper_table_report.verdict(np.array([-0.01, 0.2]), True, expected_sign=-1) == "not resolved"
  assert paper_table_report.verdict(np.array([-0.1, 0.2]), True) == "not resolved"
  assert paper_table_report.verdict(np.array([0.01, 0.2]), False) == "not resolved"


def test_a_run_without_a_report_is_a_one_line_error(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path), num_models=4, num_canaries=10, seq_len=3)
  with pytest.raises(InputError, match="results.json: not found"):
    paper_table_report.build(str(tmp_path))


def test_report_names_carry_the_results_file_settings_and_their_own():
  def names(*args, **kwargs):
    paths = paper_table_report.report_paths("out", *args, **kwargs)
    assert sorted(paths) == ["json", "md"] and paths["md"][:-3] == paths["json"][:-5]
    return paths["md"]
  assert names("results.json") == "out/paper_table_none.md"  # the defaults: the name it always had
  assert names("results.json", "lstm_worst") == "out/paper_table_lstm_worst.md"
  assert names("results_nboot-50.json") == "out/paper_table_none_nboot-50.md"
  assert names("results_statistic-loss_nboot-50.json") == "out/paper_table_none_statistic-loss_nboot-50.md"
  # Its own bootstrap settings, named apart from the results file's (evaluate's --n_boot=50 is not this --n_boot=50).
  assert names("results.json", n_boot=50, seed=3) == "out/paper_table_none_pairednboot-50_pairedseed-3.md"
  assert names("results_nboot-50.json", "image", 50) == "out/paper_table_image_nboot-50_pairednboot-50.md"
  assert names("results.json", n_boot=50, defaults={"n_boot": 50, "seed": 0}) == "out/paper_table_none.md"
  # A report under another name keeps that name whole, made filename-safe.
  assert names("old/my results.json") == "out/paper_table_none_old-my-results.md"
  every = [("results.json",), ("results_nboot-50.json",), ("results_statistic-loss_nboot-50.json",),
           ("results_nboot-50.json", "none", 50), ("results.json", "none", 50), ("results.json", "none", 1000, 1)]
  assert len({names(*a) for a in every}) == len(every)  # different inputs or settings never share a file


def test_two_reports_give_two_tables(run_dir, tmp_path):
  loo_report.evaluate_run(run_dir, n_boot=50, progress=False)  # results_nboot-50.json beside results.json
  for name in ("results.json", "results_nboot-50.json"):
    table = paper_table_report.build(run_dir, name, n_boot=20)
    paths = paper_table_report.report_paths(str(tmp_path), name, n_boot=20)
    run_folder.save_json(paths["json"], table)
    run_folder.save_text(paths["md"], paper_table_report.markdown(table))
  assert sorted(os.listdir(tmp_path)) == ["paper_table_none_nboot-50_pairednboot-20.json",
                                          "paper_table_none_nboot-50_pairednboot-20.md",
                                          "paper_table_none_pairednboot-20.json", "paper_table_none_pairednboot-20.md"]
  with open(tmp_path / "paper_table_none_nboot-50_pairednboot-20.json") as f:
    assert json.load(f)["results"] == "results_nboot-50.json"
