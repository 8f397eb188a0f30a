"""lira/reports/token_map_report.py: the per-canary IN / OUT means of a token-level score against a loop over the
models, the top canaries' order, the report and its figure; experiments/token_map.py as a user runs it on a synthetic
run."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from lira.reports import synthetic_run
from lira.reports import token_map_report as token_map

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _case(seed=0, M=7, N=5, U=6):
  rng = np.random.default_rng(seed)
  score = rng.normal(size=(M, N, U))
  keep = rng.random((M, N)) < 0.5
  keep[:, 4] = True  # canary 4: no OUT model, so no gap
  valid = rng.random((N, U)) < 0.8
  valid[:, 0] = True
  score[:, ~valid] = np.nan  # what the attack leaves at invalid units
  return score, keep, valid


def test_per_canary_means_equal_a_loop_over_the_models():
  score, keep, valid = _case()
  in_NxU, out_NxU, gap_N = token_map.per_canary(score, keep, valid)
  M, N, U = score.shape
  for n in range(N):
    gaps = []
    for u in range(U):
      ins = [score[m, n, u] for m in range(M) if keep[m, n]]
      outs = [score[m, n, u] for m in range(M) if not keep[m, n]]
      want_in = sum(ins) / len(ins) if ins and valid[n, u] else math.nan
      want_out = sum(outs) / len(outs) if outs and valid[n, u] else math.nan
      # one sum of at most 7 values of size ~1, in another order: a few ulps
      np.testing.assert_allclose(in_NxU[n, u], want_in, rtol=1e-13, atol=1e-15, equal_nan=True)
      np.testing.assert_allclose(out_NxU[n, u], want_out, rtol=1e-13, atol=1e-15, equal_nan=True)
      if valid[n, u]:
        gaps.append(want_in - want_out)
    np.testing.assert_allclose(gap_N[n], sum(gaps) / len(gaps), rtol=1e-12, equal_nan=True)
  assert np.isnan(gap_N[4])


def test_the_top_canaries_are_the_largest_finite_gaps_in_order():
  gap_N = np.array([0.5, np.nan, 2.0, 0.5, -1.0, 2.0])
  assert token_map.top_canaries(gap_N, 3) == [2, 5, 0]  # ties: the lower index first
  assert token_map.top_canaries(gap_N, 10) == [2, 5, 0, 3, 4]  # NaN never shown


def test_the_report_names_each_top_canarys_tokens_and_the_figure_is_drawn(tmp_path):
  import run_folder
  score, keep, valid = _case(seed=1)
  tokens = [[f"t{n}.{u}" for u in range(6)] for n in range(5)]
  report = token_map.build(score, keep, valid, tokens, 2, "informia_tokens", "run (synthetic losses)", {"top": 2})
  in_NxU, out_NxU, gap_N = token_map.per_canary(score, keep, valid)
  assert [r["canary"] for r in report["top"]] == token_map.top_canaries(gap_N, 2)
  for row in report["top"]:
    n = row["canary"]
    assert row["units"] == np.flatnonzero(valid[n]).tolist()
    assert row["tokens"] == [tokens[n][u] for u in row["units"]]
    assert row["in_bits"] == in_NxU[n, valid[n]].tolist() and row["out_bits"] == out_NxU[n, valid[n]].tolist()
    assert row["n_in"] + row["n_out"] == 7
  json.dumps(report, allow_nan=False)  # plain JSON: the NaN canaries are never among the rows
  assert f"| {report['top'][0]['canary']} |" in token_map.markdown(report)
  run_folder.save_figure(str(tmp_path / "map.png"), token_map.figure(report, "run: a title"))
  assert (tmp_path / "map.png").stat().st_size > 1000


@pytest.mark.slow
def test_the_command_writes_the_per_token_array_and_the_map(tmp_path):
  from attacks import informia
  from lira import rmia
  synthetic_run.write_synthetic_run(str(tmp_path), num_models=8, num_canaries=24, seq_len=6, seed=3,
                                    population_size=10)
  proc = subprocess.run([sys.executable, "-m", "experiments.token_map", f"--run_dir={tmp_path}", "--top=4"],
                        cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for name in ("token_map_informia.json", "token_map_informia.md", "token_map_informia.png",
               "token_scores_informia.npy"):
    assert name in proc.stdout and (tmp_path / name).exists(), name
  loss = np.load(tmp_path / "losses.npy")
  keep = np.load(tmp_path / "keep.npy")
  mask = np.load(tmp_path / "mask.npy") if (tmp_path / "mask.npy").exists() else None
  pop = np.load(tmp_path / "population_losses.npy")
  want, _ = informia.token_scores(loss, keep, pop, rmia.RMIA(tokens=True), mask_NxT=mask, on_undefined="nan")
  np.testing.assert_array_equal(np.load(tmp_path / "token_scores_informia.npy"), want)
  report = json.loads((tmp_path / "token_map_informia.json").read_text())
  assert len(report["top"]) == 4 and report["schema"] == token_map.SCHEMA
  assert report["top"][0]["gap_bits"] >= report["top"][-1]["gap_bits"]
