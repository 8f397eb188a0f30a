"""experiments.population_losses as a user runs it on a finished tiny run trained without a population: stopped by
Ctrl-C once it has drawn the population, it says so in one line and resumes; a second run says the population is
there; other settings without --overwrite are one error line. (That its files equal a run trained with the population:
tests/training/test_population.py.)"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from experiments import cli
import run_folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}


def _command(*args):
  return [sys.executable, "-m", "experiments.population_losses", *args, "--noprogress"]


@pytest.mark.slow
def test_population_losses_command_adds_resumes_and_refuses_other_settings(tmp_path):
  run = str(tmp_path / "run")
  trained = subprocess.run([sys.executable, "-m", "experiments.train_shadows", "--config=experiments/configs/lstm.py:tiny",
                            f"--run_dir={run}", "--config.population.size=0", "--noevaluate", "--noprogress"],
                           cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert trained.returncode == 0, trained.stderr[-3000:]
  assert not os.path.exists(os.path.join(run, "population.npy"))

  proc = subprocess.Popen(_command(f"--run_dir={run}", "--size=8"), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  t0 = time.monotonic()
  while not os.path.exists(os.path.join(run, "population.npy")):  # drawn before any group is scored
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert time.monotonic() - t0 < 300
    time.sleep(0.02)
  os.kill(proc.pid, signal.SIGINT)
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == cli.EXIT_INTERRUPTED, (proc.returncode, err[-3000:])
  assert [line for line in err.splitlines() if line.strip()] == [f"{cli.STOPPED}; {cli.RESUMES}"], err[-3000:]

  done = subprocess.run(_command(f"--run_dir={run}", "--size=8"), cwd=ROOT, env=ENV, capture_output=True, text=True,
                        timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert f"a population of 8 (source auto) scored on every model of {run}" in done.stdout
  assert os.path.join(run, "population_losses.npy") in done.stdout
  pop_MxZxT, mask = run_folder.load_population(run)
  assert pop_MxZxT.shape == (6, 8, 12) and mask is None
  assert run_folder.load_config(run)["population"] == {"size": 8, "source": "auto"}
  assert not [f for d, _, files in os.walk(run) for f in files if f.endswith(".tmp")]

  # both read the run and write nothing: run side by side
  again, other = (subprocess.Popen(_command(f"--run_dir={run}", *args), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for args in ((), ("--source=heldout",)))
  again_out, again_err = again.communicate(timeout=600)
  _, other_err = other.communicate(timeout=600)
  assert again.returncode == 0, again_err[-3000:]
  assert f"{run} already has a population of 8 (source auto)" in again_out
  assert other.returncode == cli.EXIT_USER_ERROR and "Traceback" not in other_err, other_err[-3000:]
  assert [line for line in other_err.splitlines() if line.strip()] == [
      f"error: {run} already has a population of 8 (source auto) in config.json; pass --overwrite to replace it by "
      "one of 8 (source heldout)"]
  np.testing.assert_array_equal(run_folder.load_population(run)[0], pop_MxZxT)
