"""train_shadows as a user runs it: the tiny LSTM config end to end in a subprocess, then the same command resuming."""

import os
import subprocess
import sys

import numpy as np
import pytest

import run_folder

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
  # without progress bars, still one line per finished group
  assert "group 0 (1 of 2): models 0-2 finished in" in proc.stdout and "group 1 (2 of 2): models 3-5" in proc.stdout
  # re-running the same command resumes: a group whose losses file is gone is re-scored from its checkpoint, the
  # resume is said, and the arrays are the same
  before = np.load(os.path.join(run_dir, "losses.npy"))
  for name in ("group_0001.npy", "group_0001_mu.npy", "group_0001_sigma.npy"):
    os.remove(os.path.join(run_dir, "losses", name))
  proc = subprocess.run(cmd + ["--noevaluate"], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert f"resuming {run_dir}: 1 of 2 group(s) already finished, 1 to train" in proc.stdout
  assert "group 1 (2 of 2): models 3-5 finished in" in proc.stdout and "group 0 " not in proc.stdout
  np.testing.assert_array_equal(np.load(os.path.join(run_dir, "losses.npy")), before)


def test_help_lists_the_config_variants_and_the_override_syntax():
  proc = subprocess.run([sys.executable, "-m", "experiments.train_shadows", "--help"], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  for text in ("lstm.py      cpu (default), paper, tiny, reproduce_worst, reproduce_average",
               "pythia.py    pythia_tiny (default), pythia, tiny", "pixelcnn.py  cpu (default), paper, tiny",
               "--config.SECTION.FIELD=VALUE", "--config.shadow.num_models=64", "--noprogress"):
    assert text in proc.stdout, text
