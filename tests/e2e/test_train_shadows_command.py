"""train_shadows as a user runs it: the tiny LSTM config end to end in a subprocess, then the same command resuming."""

import os
import subprocess
import sys

import numpy as np
import pytest

from lira.reports import run_folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_train_shadows_cli_runs_end_to_end_and_prints_the_table(tmp_path):
  run_dir = str(tmp_path / "cli")
  cmd = [sys.executable, "-m", "experiments.train_shadows", "--config=experiments/configs/lstm.py:tiny",
         f"--run_dir={run_dir}", "--noprogress", "--config.canaries.num_canaries=32"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for variant in ("Univariate", "Independent", "OAS"):
    assert variant in proc.stdout
  assert "TPR@0.1%" in proc.stdout or "0.1%" in proc.stdout
  for name in ("losses.npy", "keep.npy", "canaries.npy", "tokenizer.json", "config.json", "results.json",
               "roc.png"):
    assert os.path.exists(os.path.join(run_dir, name)), name
  assert run_folder.load_run(run_dir).loss_MxNxT.shape == (6, 32, 12)
  # re-running the same command resumes: nothing left to train, same arrays
  before = np.load(os.path.join(run_dir, "losses.npy"))
  proc = subprocess.run(cmd + ["--noevaluate"], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  np.testing.assert_array_equal(np.load(os.path.join(run_dir, "losses.npy")), before)
