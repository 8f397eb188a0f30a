"""experiments.population_losses as a user runs it on a finished tiny run trained without a population: stopped by
Ctrl-C once it has drawn the population, it says so in one line and resumes; a second run says the population is
there; other settings without --overwrite are one error line. --overwrite stopped by Ctrl-C at a series of moments
exits 130 every time and leaves the old population and config.json as they were; run again it resumes and swaps the
new one in, after which the reports made from the old population are named (population_losses, evaluate) and refused
(false_positives); overwriting back gives the first population's files byte for byte. (That the files equal a run
trained with the population: tests/training/test_population.py.)"""

import os
import shutil
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
STAGING = "population_overwrite"


def _command(*args):
  return [sys.executable, "-m", "experiments.population_losses", *args, "--noprogress"]


def _start(*args):
  # Ctrl-C handled as in a terminal, also where the tests run as a background job (which ignores SIGINT)
  return subprocess.Popen(_command(*args), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _run(module, *args):
  return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                        timeout=600)


def _temporary_files(folder):
  return [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f.endswith(".tmp")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, corpus_flags):
  """A finished tiny run (lstm.py:tiny: 6 models, T = 12) without a population, one model per group (a Ctrl-C once
  group 0 is scored lands with five groups to go); each test copies it."""
  run = str(tmp_path_factory.mktemp("population") / "run")
  done = _run("experiments.train_shadows", "--config=experiments/configs/lstm.py:tiny", *corpus_flags,
              "--config.shadow.group_size=1", f"--run_dir={run}", "--config.population.size=0", "--noevaluate",
              "--noprogress")
  assert done.returncode == 0, done.stderr[-3000:]
  assert not os.path.exists(os.path.join(run, "population.npy"))
  return run


@pytest.mark.slow
def test_population_losses_command_adds_resumes_and_refuses_other_settings(trained, tmp_path):
  run = str(tmp_path / "run")
  shutil.copytree(trained, run)
  proc = _start(f"--run_dir={run}", "--size=8")
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
  assert not _temporary_files(run)

  # both read the run and write nothing: run side by side
  again, other = (_start(f"--run_dir={run}", *args) for args in ((), ("--source=heldout",)))
  again_out, again_err = again.communicate(timeout=600)
  _, other_err = other.communicate(timeout=600)
  assert again.returncode == 0, again_err[-3000:]
  assert f"{run} already has a population of 8 (source auto)" in again_out
  assert other.returncode == cli.EXIT_USER_ERROR and "Traceback" not in other_err, other_err[-3000:]
  assert [line for line in other_err.splitlines() if line.strip()] == [
      f"error: {run} already has a population of 8 (source auto) in config.json; pass --overwrite to replace it by "
      "one of 8 (source heldout)"]
  np.testing.assert_array_equal(run_folder.load_population(run)[0], pop_MxZxT)


def _population(run):
  """The bytes of every file that holds the run's population (each group's losses of it too) and of config.json."""
  groups = sorted(os.path.join("losses", f) for f in os.listdir(os.path.join(run, "losses"))
                  if f.endswith("_population.npy"))
  out = {}
  for name in ["population.npy", "population_losses.npy", "config.json", *groups]:
    with open(os.path.join(run, name), "rb") as f:
      out[name] = f.read()
  return out


def _written_since(path, since):
  """Whether `path` was written at or after the time `since` (file times are a clock tick coarser than time.time)."""
  try:
    return os.stat(path).st_mtime >= since - 0.01
  except FileNotFoundError:
    return False


def _interrupt(run, size, when):
  """Start `--overwrite --size=size` and send it SIGINT `when` (seconds after the start, or once it has written that
  path of the run folder: one an earlier try left there does not count); returns its (exit status, stderr)."""
  time.sleep(0.05)  # what earlier tries wrote is older than `since`
  since = time.time()
  proc = _start(f"--run_dir={run}", f"--size={size}", "--overwrite")
  if isinstance(when, float):
    time.sleep(when)
  else:
    while not _written_since(os.path.join(run, when), since):
      assert proc.poll() is None, f"ended before {when} appeared: {proc.communicate()[1][-2000:]}"
      assert time.time() - since < 300, f"{when} not written in 300 s"
      time.sleep(0.01)
  assert proc.poll() is None, f"finished before the signal at {when}"
  os.kill(proc.pid, signal.SIGINT)
  _, err = proc.communicate(timeout=300)
  return proc.returncode, err


@pytest.mark.slow
def test_ctrl_c_during_overwrite_keeps_the_old_population_then_it_resumes_and_names_stale_reports(trained, tmp_path):
  run = str(tmp_path / "run")
  shutil.copytree(trained, run)
  start = time.perf_counter()
  added = _run("experiments.population_losses", f"--run_dir={run}", "--size=8", "--noprogress")
  whole_s = time.perf_counter() - start
  assert added.returncode == 0, added.stderr[-3000:]
  start = time.perf_counter()
  assert _run("experiments.population_losses", "--help").returncode == 0
  loading_s = time.perf_counter() - start  # the command's modules load, then it exits
  old = _population(run)
  report = "results_variants-oas-shared_nboot-0_attacks-rmia.json"
  evaluated = _run("experiments.evaluate", f"--run_dir={run}", "--variants=oas-shared", "--n_boot=0", "--attacks=rmia",
                   "--noprogress")
  assert evaluated.returncode == 0 and os.path.exists(os.path.join(run, report)), evaluated.stderr[-3000:]

  # while modules load, as it starts, once it has drawn the population (config.json written next), between groups;
  # the first two in this machine's times (halfway through loading; a quarter of the work past it): a fixed time can
  # land after the work, in the interpreter's exit, where Python no longer handles SIGINT (status -2)
  started = loading_s + max(whole_s - loading_s, 0.0) / 4
  moments = [(9, loading_s / 2), (10, started), (11, STAGING), (12, os.path.join(STAGING, "population.npy")),
             (13, os.path.join(STAGING, "losses", "group_0000_population.npy"))]
  before = str(tmp_path / "before")
  shutil.copytree(run, before)
  for size, when in moments:
    status, err = _interrupt(run, size, when)
    while isinstance(when, float) and status == 0 and when > 0.05:
      # a timed signal that lands once the work is done (a loaded machine) is not a stop (experiments.cli): the run
      # got its new population; put the old one back and send it earlier
      shutil.rmtree(run)
      shutil.copytree(before, run)
      when /= 2
      status, err = _interrupt(run, size, when)
    assert status == cli.EXIT_INTERRUPTED == 130, (when, status, err[-3000:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines in ([cli.STOPPED], [f"{cli.STOPPED}; {cli.RESUMES}"]), (when, err[-3000:])
    assert not _temporary_files(run), (when, _temporary_files(run))
    assert _population(run) == old, when
  scored = os.stat(os.path.join(run, STAGING, "losses", "group_0000_population.npy")).st_mtime_ns

  done = _run("experiments.population_losses", f"--run_dir={run}", "--size=13", "--overwrite", "--noprogress")
  assert done.returncode == 0, done.stderr[-3000:]
  assert (f"a population of 13 (source auto) scored on every model of {run}, in place of its population of 8 "
          "(source auto)") in done.stdout
  assert os.stat(os.path.join(run, "losses", "group_0000_population.npy")).st_mtime_ns == scored  # resumed
  assert not os.path.exists(os.path.join(run, STAGING)) and not _temporary_files(run)
  assert run_folder.load_population(run)[0].shape == (6, 13, 12)
  assert run_folder.load_config(run)["population"] == {"size": 13, "source": "auto"}
  stale = (f"note: reports made from a population that {run} no longer has (their RMIA rows are stale): "
           f"{os.path.join(run, report)}; re-run the commands that wrote them (each report's argv) or remove them")
  assert stale in done.stdout.splitlines(), done.stdout

  refused = _run("experiments.false_positives", f"--run_dir={run}", f"--results={report}")
  assert refused.returncode == cli.EXIT_USER_ERROR, refused.stderr[-3000:]
  assert [line for line in refused.stderr.splitlines() if line.strip()] == [
      f"error: {os.path.join(run, report)}: its RMIA rows were computed from a population that {run} no longer has "
      f"(population_losses.npy has changed since, or is gone); re-run python -m experiments.evaluate --run_dir={run} "
      "--variants=oas-shared --n_boot=0 --attacks=rmia --noprogress"]
  assert not [f for f in os.listdir(run) if f.startswith("false_positives")]
  noted = _run("experiments.evaluate", f"--run_dir={run}", "--variants=oas-shared", "--n_boot=0", "--noprogress")
  assert noted.returncode == 0 and stale in noted.stdout.splitlines(), (noted.stdout[-3000:], noted.stderr[-3000:])

  back = _run("experiments.population_losses", f"--run_dir={run}", "--size=8", "--overwrite", "--noprogress")
  assert back.returncode == 0, back.stderr[-3000:]
  assert _population(run) == old  # the same draw and losses as the first population, byte for byte
  assert "note:" not in back.stdout  # the report's population is the run's again
