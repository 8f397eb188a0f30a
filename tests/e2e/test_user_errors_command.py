"""The commands as a user runs them (subprocesses): a user error (a missing run, bad losses, a run already there, an
unwritable report folder, a bad config) is one `error: ...` line with exit status 2, found before any work."""

import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import cli
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(module, *args, cwd=ROOT):
  """Run `python -m experiments.<module> args` as a user would; returns the CompletedProcess."""
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, "-m", f"experiments.{module}", *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300)


def assert_user_error(proc, *needles):
  assert proc.returncode == cli.EXIT_USER_ERROR, proc.stderr
  assert "Traceback" not in proc.stderr, proc.stderr
  lines = [line for line in proc.stderr.splitlines() if line.strip()]  # progress bars may come first
  errors = [line for line in lines if line.startswith("error: ")]
  assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr
  for needle in needles:
    assert needle in errors[0], errors[0]


@pytest.mark.slow
def test_every_command_reports_a_missing_run_folder_in_one_line(tmp_path):
  missing = str(tmp_path / "nope")
  for module in ("evaluate", "length_grid", "shadow_sweep", "covariance_error"):
    assert_user_error(command(module, f"--run_dir={missing}"), missing)


@pytest.mark.slow
def test_bad_losses_are_named_through_the_command_line(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=30, seq_len=5)
  loss = np.load(f"{run}/losses.npy")
  loss[3, 7, 2] = np.nan
  np.save(f"{run}/losses.npy", loss)
  for module in ("evaluate", "covariance_error", "shadow_sweep"):
    assert_user_error(command(module, f"--run_dir={run}"), "model 3", "canary 7", "position 2")
  with open(f"{run}/losses.npy", "r+b") as f:
    f.truncate(100)
  assert_user_error(command("evaluate", f"--run_dir={run}"), "losses.npy: has a damaged .npy header")
  # numpy calls any file without the .npy header "pickled": the line says what the file is
  with open(f"{run}/losses.npy", "wb") as f:
    f.write(np.random.default_rng(0).bytes(3000))
  assert_user_error(command("evaluate", f"--run_dir={run}"), "losses.npy: is not an .npy file")
  np.save(f"{run}/keep.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
  np.save(f"{run}/losses.npy", loss)
  assert_user_error(command("evaluate", f"--run_dir={run}"), "keep.npy: holds Python objects (dtype object)")


@pytest.mark.slow
def test_make_synthetic_keeps_an_existing_run(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=30, seq_len=5)
  before = np.load(f"{run}/losses.npy")
  assert_user_error(command("make_synthetic", f"--run_dir={run}", "--num_models=6"), run, "--overwrite")
  np.testing.assert_array_equal(np.load(f"{run}/losses.npy"), before)
  proc = command("make_synthetic", f"--run_dir={run}", "--num_models=6", "--num_canaries=30", "--overwrite")
  assert proc.returncode == 0, proc.stderr
  assert np.load(f"{run}/losses.npy").shape == (6, 30, 32)


@pytest.mark.slow
def test_unwritable_report_folder_is_refused_before_the_work(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=30, seq_len=5)
  (tmp_path / "file").write_text("not a folder")
  out = str(tmp_path / "file" / "reports")
  assert_user_error(command("evaluate", f"--run_dir={run}", f"--out_dir={out}"), "--out_dir")


@pytest.mark.slow
def test_train_shadows_config_from_any_folder_and_checks_before_training(tmp_path):
  # Run from a folder that is not the repository: the config path still resolves, and too few models for the
  # leave-one-out evaluation are refused before any data is prepared.
  run = tmp_path / "run"
  proc = command("train_shadows", "--config=experiments/configs/lstm.py:tiny", "--config.shadow.num_models=4",
                 f"--run_dir={run}", cwd=str(tmp_path))
  assert_user_error(proc, "shadow.num_models=4", "--noevaluate")
  assert not run.exists()
  assert_user_error(command("train_shadows", "--config=lstm.py:nope", cwd=str(tmp_path)), "unknown LSTM config")
  # a DP-SGD setting without DP-SGD would be accepted and ignored: refused before any data, nothing written
  proc = command("train_shadows", "--config=experiments/configs/lstm.py:tiny", "--config.train.dp.clip_norm=0.5",
                 "--config.train.dp.sampling=shuffle", f"--run_dir={run}", cwd=str(tmp_path))
  assert_user_error(proc, "train.dp.clip_norm=0.5 acts only with DP-SGD on",
                    "leave train.dp.clip_norm and train.dp.sampling at the default")
  assert_user_error(command("train_shadows", "--config=experiments/configs/lstm.py:tiny", "--config.train.dp.delta=2",
                            f"--run_dir={run}", cwd=str(tmp_path)), "train.dp.delta must be in (0, 1), got 2")
  assert not run.exists()
  assert_user_error(command("train_shadows", "--config=nofile.py", cwd=str(tmp_path)), "nofile.py")
