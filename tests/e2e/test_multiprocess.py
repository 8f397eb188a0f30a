"""train_shadows as a user runs it: two jax.distributed processes on localhost, and SIGTERM (subprocesses)."""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import xla_level

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# lstm.py:tiny with 8 models in groups of 2: four groups, so each of two processes trains two; the corpus:
# tests/e2e/conftest.py (corpus_flags)
CONFIG = ["--config=experiments/configs/lstm.py:tiny", "--config.shadow.num_models=8", "--config.shadow.group_size=2",
          "--noprogress", "--noevaluate"]
ARRAYS = ("losses", "mu", "sigma", "keep", "canaries")


def _env():
  # XLA's default level: these runs are long (300 epochs), so run time, not compile time, is theirs
  return dict(xla_level.at_default_level(os.environ), PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
              JAX_PLATFORMS="cpu")


def _command(run_dir, corpus, *extra):
  return [sys.executable, "-m", "experiments.train_shadows", *CONFIG, *corpus, f"--run_dir={run_dir}", *extra]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start_two(run_dir, corpus, *extra):
  port = _free_port()
  return [subprocess.Popen(_command(run_dir, corpus, "--num_processes=2", f"--process_id={p}",
                                    f"--coordinator_address=127.0.0.1:{port}", *extra),
                           cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for p in (0, 1)]


def _assert_same_arrays(run_dir, reference):
  for name in ARRAYS:
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(reference, f"{name}.npy")), err_msg=name)


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory, corpus_flags):
  run_dir = str(tmp_path_factory.mktemp("one") / "run")
  proc = subprocess.run(_command(run_dir, corpus_flags), cwd=ROOT, env=_env(), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return run_dir


# Groups of 1,500 steps (300 epochs of 5 batches) for the SIGTERM tests: a step takes about a millisecond, so a group
# lasts seconds, and a stop checked between steps lands while the group in flight is far from its end. Whether the
# group in flight was abandoned is then read from the run folder, not from a wall-clock bound that a loaded machine
# can exceed.
LONG_GROUPS = ("--config.train.epochs=300",)


@pytest.fixture(scope="module")
def long_groups_run(tmp_path_factory, corpus_flags):
  run_dir = str(tmp_path_factory.mktemp("long") / "run")
  proc = subprocess.run(_command(run_dir, corpus_flags, *LONG_GROUPS), cwd=ROOT, env=_env(), capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return run_dir


@pytest.mark.slow
def test_two_jax_distributed_processes_equal_one_process(tmp_path, one_process_run, corpus_flags):
  run_dir = str(tmp_path / "run")
  procs = _start_two(run_dir, corpus_flags)
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  assert "process 0 assembles losses.npy" in outs[1][0]
  assert "per-position losses" in outs[0][0]  # process 0 assembled, once, after both processes' groups
  for g in range(4):
    assert os.path.exists(os.path.join(run_dir, "losses", f"group_000{g}.npy")), g
  # same float32 computations on the same machine, one model per vmapped slot either way: bit-identical
  _assert_same_arrays(run_dir, one_process_run)

  # process 1's checkpoint (written without orbax, which saves only global arrays across processes) restores in a
  # later single-process run to the same losses
  os.remove(os.path.join(run_dir, "losses", "group_0001.npy"))
  os.remove(os.path.join(run_dir, "losses.npy"))
  proc = subprocess.run(_command(run_dir, corpus_flags), cwd=ROOT, env=_env(), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  _assert_same_arrays(run_dir, one_process_run)


def _wait_for(path, procs, timeout=300):
  t0 = time.monotonic()
  while not os.path.exists(path):
    assert all(p.poll() is None for p in procs), [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
    assert time.monotonic() - t0 < timeout, f"{path} not written in {timeout} s"
    time.sleep(0.05)


@pytest.mark.slow
def test_sigterm_keeps_finished_groups_exits_143_and_the_rerun_resumes(tmp_path, long_groups_run, corpus_flags):
  run_dir = str(tmp_path / "run")
  proc = subprocess.Popen(_command(run_dir, corpus_flags, *LONG_GROUPS), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  _wait_for(os.path.join(run_dir, "losses", "group_0000.npy"), [proc])
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 143, err[-3000:]
  assert "stopped by SIGTERM" in err
  done = sorted(f for f in os.listdir(os.path.join(run_dir, "losses")) if f.endswith(".npy"))
  # group 1 was in flight when the signal came: abandoned between two of its 1,500 steps, not finished
  assert "group_0000.npy" in done and "group_0001.npy" not in done, done
  assert not os.path.exists(os.path.join(run_dir, "losses.npy"))
  kept = os.stat(os.path.join(run_dir, "losses", "group_0000.npy")).st_mtime_ns

  rerun = subprocess.run(_command(run_dir, corpus_flags, *LONG_GROUPS), cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert os.stat(os.path.join(run_dir, "losses", "group_0000.npy")).st_mtime_ns == kept  # skipped, not redone
  _assert_same_arrays(run_dir, long_groups_run)


@pytest.mark.slow
def test_sigterm_to_one_distributed_process_stops_both(tmp_path, corpus_flags):
  run_dir = str(tmp_path / "run")
  # 16 models in groups of 1,500 steps: after process 1's first group each process still has three groups of seconds
  # each, so the signal always lands mid-run (with 8 models and 2 epochs a loaded machine let both processes finish
  # before it arrived)
  procs = _start_two(run_dir, corpus_flags, "--config.shadow.num_models=16", *LONG_GROUPS)
  _wait_for(os.path.join(run_dir, "losses", "group_0001.npy"), procs)
  procs[1].send_signal(signal.SIGTERM)
  errs = [p.communicate(timeout=180)[1] for p in procs]
  assert [p.returncode for p in procs] == [143, 143], [e[-2000:] for e in errs]
  # the stop reaches process 0 through the coordination service within its 1 s poll, long before its three remaining
  # groups of seconds each are done: its last group (6) is never written
  assert not os.path.exists(os.path.join(run_dir, "losses", "group_0006.npy"))
  assert not os.path.exists(os.path.join(run_dir, "losses.npy"))
