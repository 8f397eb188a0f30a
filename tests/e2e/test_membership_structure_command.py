"""experiments.membership_structure and its report: the real cell equals the six variants' leave-one-out evaluation of
the run, a stopped analysis resumes from its finished cells, and bad input is one line before any work."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lira import evaluation
from lira.errors import InputError
from lira.reports import membership_structure_report as report
import run_folder
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_report_cells_resume_and_equal_the_evaluation(tmp_path, monkeypatch):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=60, seq_len=5, ragged=True, seed=1)
  paths, lines = report.write_membership_structure(run, gaps=[1, 2], n_boot=0)
  assert [os.path.basename(p) for p in paths] == [
      "membership_structure_gaps-1+2_nboot-0." + e for e in ("json", "csv", "md", "png")]
  with open(paths[0]) as f:
    out = json.loads(f.read(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON
  assert set(out["cells"]) == set(report.cell_names([1.0, 2.0]))
  run_data = run_folder.load_run(run)
  rows, _ = evaluation.evaluate_variants(run_data.loss_MxNxT, run_data.keep_MxN, mask_NxT=run_data.mask_NxT,
                                         fprs=report.FPRS, n_boot=0, progress=False)
  for row in rows:
    assert out["cells"]["real"][row["name"]]["auc"] == row["summary"]["auc"]
    assert out["cells"]["real"][row["name"]]["tpr"]["0.001"] == row["summary"]["tpr"]["0.001"]["tpr"]
  real = out["cells"]["real"]
  for name in out["differences"]["real"]:  # paired differences: at the full sample, the difference of the two TPRs
    a, b = name.split(" - ")
    for fpr in ("0.001", "0.0001"):
      assert out["differences"]["real"][name][fpr]["diff"] == pytest.approx(
          real[a]["tpr"][fpr] - real[b]["tpr"][fpr], abs=1e-12)
  cell_dir = os.path.join(run, "membership_structure", "membership_structure_cells_nboot-0")
  draws = [run_folder.load_json(os.path.join(cell_dir, f"gaussian_x2_draw-{d}.json")) for d in range(3)]
  for v in ("Univariate Shared", "OAS Class-Wise"):  # a simulated cell is the mean of its three draws
    assert out["cells"]["gaussian_x2"][v]["tpr"]["0.001"] == pytest.approx(
        np.mean([d["variants"][v]["tpr"]["0.001"] for d in draws]), abs=1e-12)
  assert set(out["oracle"]) == {"gaussian", "gaussian_diagonal"} and out["structure"]["kappa"]["n"] == 60
  assert "median L x co-movement" in lines[0]
  # Finished cells are read back: a second call scores nothing and writes the same tables.
  with open(paths[2]) as f:
    table = f.read()
  monkeypatch.setattr(report.evaluation, "evaluate_variants", lambda *a, **k: pytest.fail("a finished cell rescored"))
  report.write_membership_structure(run, gaps=[1, 2], n_boot=0)
  with open(paths[2]) as f:
    assert f.read() == table
  with pytest.raises(InputError, match="--gaps must be positive"):
    report.write_membership_structure(run, gaps=[0])


def test_command_errors_are_one_line_before_any_work(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=6, num_canaries=20, seq_len=4, seed=0)
  keep = np.load(f"{run}/keep.npy")
  keep[:, 3] = [True, True, True, True, True, False]
  np.save(f"{run}/keep.npy", keep)
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run([sys.executable, "-m", "experiments.membership_structure", "--noprogress",
                         f"--run_dir={run}"], capture_output=True, text=True, cwd=tmp_path, env=env)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      "error: canary 3 has 5 IN and 1 OUT models; every canary needs 3 of each (the variants' balanced "
      "leave-one-out fits)"]
  assert not os.path.exists(f"{run}/membership_structure")
