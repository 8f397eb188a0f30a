"""Test setup: every folder of tests/ is on sys.path, so test helpers (resume_check.py, lira/bruteforce.py) and
test modules that share fixtures import by their names (test module names are unique across the folders)."""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
for _folder, _dirs, _files in sorted(os.walk(_HERE)):
  _dirs[:] = [d for d in _dirs if not d.startswith((".", "__"))]
  sys.path.insert(0, _folder)

import signal  # noqa: E402

import xla_level  # noqa: E402

# A background job of a non-interactive shell (`nohup bash -c 'python -m pytest -q' &`, some CI runners) starts with
# SIGINT ignored, and an ignored signal stays ignored across exec: the commands the Ctrl-C tests start would keep
# ignoring it, as a background job should, and exit 0 instead of 130. The suite is not a background job of the user's
# terminal: it takes SIGINT back (a handler is reset to the default at exec, so every process it starts gets the default
# a terminal gives). The commands themselves keep the convention (experiments/cli.py, training/preemption.py).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
  signal.signal(signal.SIGINT, signal.default_int_handler)

# backend="jax" on CPUs scores with the numpy backend (lira.loo_jax.scores_on_host); the tests, and the commands they
# start, run the device pipeline there instead: it is the code a GPU or TPU runs. test_loo_jax.py unsets it to test
# the dispatch itself.
os.environ["SEQLIRA_JAX_PIPELINE_ON_CPU"] = "1"

# The data step's cache (training/token_cache.py) of one session, not the user's: every test process and command
# shares it (the controller sets it before xdist starts the workers, who inherit it).
if "SEQLIRA_CACHE" not in os.environ:
  import atexit
  import shutil
  import tempfile
  os.environ["SEQLIRA_CACHE"] = tempfile.mkdtemp(prefix="seqlira-test-cache-")
  atexit.register(shutil.rmtree, os.environ["SEQLIRA_CACHE"], True)  # by the process that made it, at its exit

# XLA compiles at LLVM optimisation level 0, with XLA CPU's elemental emitters where the installed jaxlib knows the
# flags, here and in the commands the tests start (they inherit the environment): set before any test module imports
# jax; the commands users run keep XLA's defaults.
xla_level.set_fast_compile()
# One persistent compilation cache for the whole session (xla_level.share_compilation_cache): the workers and the
# commands the tests start load what another process already compiled.
xla_level.share_compilation_cache()


import pytest  # noqa: E402

import file_order  # noqa: E402


def pytest_addoption(parser):
  parser.addoption("--record-file-durations", action="store_true",
                   help="write each test file's summed time to tests/file_durations.json (the workers' file order)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
  """Longest test files first (tests/file_order.py); with --no-loadscope-reorder in addopts xdist keeps this order."""
  durations_s = file_order.load_durations()
  items[:] = [items[i] for i in file_order.longest_first([item.nodeid for item in items], durations_s)]


_file_seconds = {}


def pytest_runtest_logreport(report):
  name = file_order.test_file(report.nodeid)
  _file_seconds[name] = _file_seconds.get(name, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
  """With --record-file-durations, the controller (not an xdist worker) writes the run's per-file times. The
  controller removes the session's compilation cache."""
  config = session.config
  if hasattr(config, "workerinput"):
    return
  xla_level.remove_compilation_cache()
  if config.getoption("--record-file-durations") and _file_seconds:
    file_order.write_durations(_file_seconds)


@pytest.fixture(autouse=True)
def _no_hub_requests(monkeypatch):
  """No test reaches the network: hub access is off (HF_HUB_OFFLINE=1, which models.hub.prepare honours without
  probing), in this process and in the commands the tests start. Tests of the probe unset it themselves."""
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def small_corpus():
  """The first 400 Chit-Chat conversations: the corpus of the tests' tiny training runs."""
  from training import data
  return data.load_chitchat()[:400]
