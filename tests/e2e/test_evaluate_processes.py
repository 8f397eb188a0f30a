"""experiments.evaluate as two jax.distributed processes on localhost writes what one process writes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_FIELDS = ("argv", "seconds", "run_dir", "files")  # the command line, the clock and the paths differ by design


def _env():
  return {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}


def _evaluate(run_dir, out_dir, *extra):
  return [sys.executable, "-m", "experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={out_dir}",
          "--backend=jax", "--n_boot=20", "--noprogress", "--variants=univariate-classwise,oas-shared,oas-classwise",
          *extra]


def _free_port():
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _comparable(out_dir):
  (path,) = out_dir.glob("results*.json")  # the name carries the non-default settings
  result = json.loads(path.read_text())
  return {k: v for k, v in result.items() if k not in RUN_FIELDS}


@pytest.mark.slow
@pytest.mark.parametrize("balance_counts", [True, False])  # True is the command's default (host refits, split)
def test_two_processes_write_what_one_writes(tmp_path, balance_counts):
  run = tmp_path / "run"
  subprocess.run([sys.executable, "-m", "experiments.make_synthetic", f"--run_dir={run}", "--num_models=8",
                  "--num_canaries=30", "--seq_len=6", "--ragged"], env=_env(), cwd=ROOT, check=True,
                 capture_output=True)
  flag = "--balance_counts" if balance_counts else "--nobalance_counts"
  one = subprocess.run(_evaluate(run, tmp_path / "one", flag), env=_env(), cwd=ROOT, capture_output=True, text=True)
  assert one.returncode == 0, one.stderr[-3000:]
  port = _free_port()
  procs = [subprocess.Popen(_evaluate(run, tmp_path / "two", flag, "--num_processes=2", f"--process_id={p}",
                                      f"--coordinator_address=127.0.0.1:{port}"),
                            env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for p in (0, 1)]
  for p in procs:
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
  # The same scores reach the same bootstrap (same seed), so the reports are equal, not merely close: each process
  # scores its canaries with the same jitted blocks and process 0 receives them bit for bit (an all-gather copies).
  assert _comparable(tmp_path / "two") == _comparable(tmp_path / "one")
  scores = sorted(p.name for p in (tmp_path / "one").glob("scores_*.npy"))
  assert len(scores) == 3
  for name in scores:
    np.testing.assert_array_equal(np.load(tmp_path / "two" / name), np.load(tmp_path / "one" / name))
  assert sorted(os.listdir(tmp_path / "two")) == sorted(os.listdir(tmp_path / "one"))
