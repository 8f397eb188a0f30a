"""experiments.cov_structure and its report (lira.reports.cov_structure_report): the per-canary results written
equal lira.cov_permutation's, and the command as a user runs it (a subprocess) gives one-line errors."""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lira import cov_permutation
from lira.reports import cov_structure_report
from lira import transforms
from lira.reports import synthetic_run


@pytest.mark.slow
def test_the_command_writes_per_canary_results_that_match_the_library(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=10, num_canaries=40, seq_len=9, ragged=True, seed=2)
  loss, keep = np.load(f"{run}/losses.npy"), np.load(f"{run}/keep.npy")
  mask = np.load(f"{run}/mask.npy")
  paths, line = cov_structure_report.write_cov_structure(run, max_canaries=30, max_positions=8, permutations=19,
                                                         seed=3)
  assert [os.path.basename(x) for x in paths] == [
      "cov_structure_maxcanaries-30_maxpositions-8_permutations-19_seed-3." + e for e in ("json", "csv", "png")]
  with open(paths[0]) as f:
    report = json.loads(f.read(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON
  want_obs, want_p = cov_permutation.canaries_test(transforms.to_statistic(loss[:, :30, :8]), keep[:, :30],
                                                 num_permutations=19, seed=3, mask_NxT=mask[:30, :8])
  got_p = np.array([np.nan if r["p_value"] is None else r["p_value"] for r in report["per_canary"]])
  np.testing.assert_array_equal(got_p, want_p)
  assert report["summary"]["share_p_le_0.05"] == round(float((want_p <= 0.05).mean()), 4)
  assert report["summary"]["models_per_canary"] == [5, 5] and report["shape"] == {"M": 10, "N": 40, "T": 9}
  for level in report["levels"]:  # the plotted curve: a brute-force count at every attainable alpha
    assert level["share"] == pytest.approx((want_p <= level["alpha"] + 1e-12).mean(), abs=1e-12)
  with open(paths[1]) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 30 and float(rows[7]["statistic"]) == pytest.approx(want_obs[7], rel=1e-12)
  assert "30 of 30 canaries tested on 8 positions (OUT models)" in line
  # 19 permutations cannot give p <= 0.01: said so, never "p <= 0.01 for 0.0%"
  assert report["summary"]["share_p_le_0.01"] is None and report["summary"]["smallest_p"] == 0.05
  assert "p <= 0.01 is not attainable with 19 permutations (the smallest p is 1 / 20 = 0.05;" in line
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  proc = subprocess.run([sys.executable, "-m", "experiments.cov_structure", "--noprogress", f"--run_dir={run}x"],
                        capture_output=True, text=True, cwd=repo)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"error: run folder '{run}x' does not exist"]
  proc = subprocess.run([sys.executable, "-m", "experiments.cov_structure", "--noprogress", f"--run_dir={run}",
                         "--permutations=0"], capture_output=True, text=True, cwd=repo)
  assert proc.returncode == 2 and proc.stderr.strip().splitlines() == ["error: --permutations=0: must be >= 1 (see --help)"]
