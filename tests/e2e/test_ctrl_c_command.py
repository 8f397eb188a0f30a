"""Ctrl-C as a user presses it (SIGINT sent to a subprocess while it works): one `stopped by Ctrl-C (SIGINT)` line, no
traceback, exit status 130, no file left half-written; train_shadows keeps its finished groups and the rerun resumes.

The signal is sent once the run folder shows the command is at work (a folder or group file it writes), not after a
fixed delay."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from experiments import cli
import xla_level

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# XLA's default level: the training under Ctrl-C is long, so run time, not compile time, is its
ENV = {**xla_level.at_default_level(os.environ), "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}


def _start(*args):
  return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def _interrupt_when(proc, path, timeout=300):
  """Send SIGINT to proc once `path` exists (proc must still be running then); returns (stdout, stderr)."""
  t0 = time.monotonic()
  while not os.path.exists(path):
    assert proc.poll() is None, f"ended before {path} appeared: {proc.communicate()[1][-2000:]}"
    assert time.monotonic() - t0 < timeout, f"{path} not written in {timeout} s"
    time.sleep(0.02)
  assert proc.poll() is None, "finished before the signal"
  os.kill(proc.pid, signal.SIGINT)
  return proc.communicate(timeout=300)


def _assert_stopped(proc, err, line):
  assert proc.returncode == cli.EXIT_INTERRUPTED == 130, (proc.returncode, err[-3000:])
  assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
  assert [l for l in err.splitlines() if l.strip()] == [line], err[-3000:]


def _temporary_files(folder):
  return [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith(".tmp")]


@pytest.mark.slow
def test_ctrl_c_during_evaluate_is_one_line_and_exit_130(tmp_path):
  run, out = str(tmp_path / "run"), str(tmp_path / "reports")
  made = subprocess.run([sys.executable, "-m", "experiments.make_synthetic", f"--run_dir={run}", "--num_models=16",
                         "--num_canaries=3000", "--noprogress"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                        timeout=300)
  assert made.returncode == 0, made.stderr[-2000:]
  proc = _start("experiments.evaluate", f"--run_dir={run}", f"--out_dir={out}", "--n_boot=0", "--noprogress")
  _, err = _interrupt_when(proc, out)  # the report folder is made (checked writable) before the leave-one-out
  _assert_stopped(proc, err, cli.STOPPED)
  assert os.listdir(out) == [], os.listdir(out)  # no report, no temporary file


@pytest.mark.slow
def test_ctrl_c_during_training_keeps_finished_groups_exits_130_and_the_rerun_resumes(tmp_path, corpus_flags):
  run = str(tmp_path / "run")
  # lstm.py:tiny: 6 models in 2 groups; 300 epochs make a group last seconds, so the signal sent when group 0 is
  # written lands while group 1 is far from its end, and that it was abandoned is read from the run folder
  command = ["experiments.train_shadows", "--config=experiments/configs/lstm.py:tiny", "--config.train.epochs=300",
             *corpus_flags, f"--run_dir={run}", "--noprogress", "--noevaluate"]
  proc = _start(*command)
  _, err = _interrupt_when(proc, os.path.join(run, "losses", "group_0000.npy"))
  _assert_stopped(proc, err, f"stopped by Ctrl-C (SIGINT): the group in flight was abandoned; 1 finished group kept "
                  f"in {run}/losses. Re-run the same command to resume (exit status 130).")
  done = sorted(f for f in os.listdir(os.path.join(run, "losses")) if f.endswith(".npy"))
  assert "group_0000.npy" in done and "group_0001.npy" not in done, done
  assert not os.path.exists(os.path.join(run, "losses.npy")) and not _temporary_files(run)
  kept = os.stat(os.path.join(run, "losses", "group_0000.npy")).st_mtime_ns

  rerun = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert os.stat(os.path.join(run, "losses", "group_0000.npy")).st_mtime_ns == kept  # resumed, not redone
  assert np.load(os.path.join(run, "losses.npy")).shape == (6, 16, 12)


@pytest.mark.slow
def test_ctrl_c_during_data_preparation_stops_at_once_and_says_nothing_was_trained(tmp_path):
  """The CPU default's data preparation (the whole Chit-Chat corpus: seconds of loading, BPE training and encoding)
  once config.json is written: the stop comes within a few seconds, not after the encoding, and says what was kept."""
  run = str(tmp_path / "run")
  command = ["experiments.train_shadows", "--config=experiments/configs/lstm.py:tiny", f"--run_dir={run}",
             "--noprogress", "--noevaluate"]
  proc = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env={**ENV, "SEQLIRA_CACHE": "off"},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # the whole data step, uncached
  t0 = time.monotonic()
  while not os.path.exists(os.path.join(run, "config.json")):  # written just before the data is prepared
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert time.monotonic() - t0 < 300
    time.sleep(0.02)
  time.sleep(0.5)
  assert proc.poll() is None, "the data preparation finished before the signal"
  sent = time.monotonic()
  os.kill(proc.pid, signal.SIGINT)
  _, err = proc.communicate(timeout=300)
  stopped_s = time.monotonic() - sent
  _assert_stopped(proc, err, "stopped by Ctrl-C (SIGINT) while the data was prepared: no model was trained yet. "
                  "Re-run the same command to start (exit status 130).")
  # the longest call that holds the interpreter is BPE training, ~3 s on a 2-core CPU alone (the encoding is in
  # chunks, a stop checked between them; the whole corpus's encoding takes 7-50 s)
  assert stopped_s < 20, stopped_s
  assert not os.path.exists(os.path.join(run, "losses")) and not _temporary_files(run)


# SIGTERM sent to the process itself the moment the last group is finished and losses.npy assembled, as a scheduler's
# signal that lands while the last group is scored: the real train_shadows command otherwise
_STOP_AFTER_LAST_GROUP = """
import os, signal, sys
from training import pipeline
real_run = pipeline.run
def run(*args, **kwargs):
  complete = real_run(*args, **kwargs)
  os.kill(os.getpid(), signal.SIGTERM)
  return complete
pipeline.run = run
from experiments import cli, train_shadows
sys.argv = train_shadows.resolved_argv(["train_shadows", *sys.argv[1:]])
cli.run(train_shadows.main, resumes=True)
"""


@pytest.mark.slow
def test_sigterm_after_the_last_group_says_nothing_was_abandoned_and_the_rerun_evaluates(tmp_path, corpus_flags):
  run = str(tmp_path / "run")
  flags = ["--config=experiments/configs/lstm.py:tiny", *corpus_flags, f"--run_dir={run}", "--noprogress"]
  stopped = subprocess.run([sys.executable, "-c", _STOP_AFTER_LAST_GROUP, *flags], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=600)
  assert stopped.returncode == 143, stopped.stderr[-3000:]
  assert [l for l in stopped.stderr.splitlines() if l.strip()] == [
    f"stopped by SIGTERM after the last group: every group is finished and {run}/losses.npy assembled; the "
    "evaluation was not run: re-run the same command to run it (exit status 143)."], stopped.stderr[-3000:]
  assert os.path.exists(os.path.join(run, "losses.npy")) and not os.path.exists(os.path.join(run, "results.json"))
  assembled = os.stat(os.path.join(run, "losses.npy")).st_mtime_ns

  rerun = subprocess.run([sys.executable, "-m", "experiments.train_shadows", *flags], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert "finished in" not in rerun.stdout  # nothing trained again
  assert os.stat(os.path.join(run, "losses.npy")).st_mtime_ns == assembled
  assert os.path.exists(os.path.join(run, "results.json"))


@pytest.mark.slow
def test_ctrl_c_during_the_dp_calibration_stops_at_once(tmp_path, corpus_flags):
  run = str(tmp_path / "run")
  # 300 epochs: the accountant's calibration to epsilon 100 over that many steps takes minutes, so the signal sent
  # when the calibration's line is printed lands inside it
  proc = _start("experiments.train_shadows", "--config=experiments/configs/lstm.py:tiny", "--config.train.epochs=300",
                "--config.train.dp.epsilon=100", *corpus_flags, f"--run_dir={run}", "--noprogress", "--noevaluate")
  t0 = time.monotonic()
  for line in proc.stdout:
    if line.startswith("DP-SGD: calibrating"):
      break
    assert time.monotonic() - t0 < 300, "no calibration line"
  time.sleep(1.0)
  assert proc.poll() is None, "finished before the signal"
  sent = time.monotonic()
  os.kill(proc.pid, signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert time.monotonic() - sent < 60  # at once, not after the calibration (minutes) and the first step
  _assert_stopped(proc, err, f"{cli.STOPPED}; {cli.RESUMES}")
  assert "accountant" not in cli_config(run)


def cli_config(run):
  import json
  with open(os.path.join(run, "config.json")) as f:
    return json.load(f)
