"""Stopping a training run promptly on SIGTERM, as cluster schedulers send it before they kill a job, or on Ctrl-C.

`install()` replaces the default action of SIGTERM and SIGINT (and JAX's preemption notifier) with a flag that
training checks between steps (`check()`): the step in flight finishes, the group in flight is abandoned, every
finished group stays in the run folder, and the command exits with `exit_status()`, 128 + the signal (143 for
SIGTERM, 130 for SIGINT, as a shell reports them), after saying `stopped by <name()>`. A second Ctrl-C raises
KeyboardInterrupt at once (experiments.cli reports it in one line). In a jax.distributed run the flag (the signal's
number) is published in the coordination service's key-value store, so a signal sent to any one process stops every
process within about a second (and a step), and they leave jax.distributed together.

Why not jax.experimental.multihost_utils.reached_preemption_sync_point: its sync point is the largest step counter
of all processes plus one, reached only by processes that call it at every step with counters that advance in
step. The processes of a shadow run train disjoint groups and never meet in a collective: one may be re-scoring a
checkpointed group, waiting for the others' groups, or have fewer groups, and would never reach the point.
"""

import contextlib
import signal
import threading
import time

EXIT_STATUS = 128 + signal.SIGTERM  # 143: what a shell reports for a process ended by SIGTERM
NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C (SIGINT)"}
_KEY = "seqlira/sigterm"
_POLL_S = 1.0  # how often a jax.distributed process asks the coordination service whether another one was stopped

_flag = threading.Event()
_state = {"published": False, "polled": 0.0, "signum": signal.SIGTERM, "sigint": signal.default_int_handler}


class Preempted(Exception):
  """SIGTERM or SIGINT reached this process, or another process of the same jax.distributed run. `stage`: where it
  stopped the run ("training", or "data" while the data was prepared)."""

  def __init__(self, stage="training"):
    super().__init__(stage)
    self.stage = stage


def _handler(signum, frame):
  del frame
  if signum == signal.SIGINT and _flag.is_set():
    raise KeyboardInterrupt  # a second Ctrl-C: stop now, not after the step in flight
  if not _flag.is_set():
    _state["signum"] = signum
  _flag.set()


def install():
  """Handle SIGTERM and SIGINT by setting the flag that `check` reads (call after jax.distributed.initialize, whose
  preemption notifier would otherwise take the signal and let the run go on)."""
  _flag.clear()
  _state.update(published=False, polled=0.0, signum=signal.SIGTERM, sigint=signal.getsignal(signal.SIGINT))
  signal.signal(signal.SIGTERM, _handler)
  if _state["sigint"] is not signal.SIG_IGN:  # a background job started with SIGINT ignored keeps ignoring it
    signal.signal(signal.SIGINT, _handler)


def uninstall():
  """SIGTERM ends the process at once again, and Ctrl-C does what it did before `install` (under experiments.cli: a
  KeyboardInterrupt, reported in one line), e.g. during the evaluation, whose files are written atomically."""
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  signal.signal(signal.SIGINT, _state["sigint"] if _state["sigint"] is not None else signal.default_int_handler)


@contextlib.contextmanager
def interruptible():
  """Ctrl-C and SIGTERM act at once inside the block (work that checks no flag, such as the accountant's
  calibration, which writes nothing), as before `install`; the handlers are back after it."""
  installed = signal.getsignal(signal.SIGINT) is _handler
  if installed:
    uninstall()
  try:
    yield
  finally:
    if installed:
      signal.signal(signal.SIGTERM, _handler)
      if _state["sigint"] is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _handler)


@contextlib.contextmanager
def stage(name):
  """Inside the block a stop is reported as Preempted(name) (check: "data" while the data is prepared)."""
  before = _state.get("stage", "training")
  _state["stage"] = name
  try:
    yield
  finally:
    _state["stage"] = before


def name():
  """The stop's signal as a user knows it: "SIGTERM" or "Ctrl-C (SIGINT)"."""
  return NAMES.get(_state["signum"], signal.Signals(_state["signum"]).name)


def exit_status():
  """128 + the stop's signal: 143 for SIGTERM, 130 for SIGINT (what a shell reports for a process it ended)."""
  return 128 + int(_state["signum"])


def _client():
  """The jax.distributed client, or None in a single-process run (orbax reads it the same way)."""
  from jax._src import distributed
  return distributed.global_state.client


def requested():
  """True once SIGTERM or SIGINT reached this process or, in a jax.distributed run, any process of it."""
  client = _client()
  if _flag.is_set():
    if client is not None and not _state["published"]:
      _state["published"] = True
      client.key_value_set(_KEY, str(int(_state["signum"])))
    return True
  if client is not None and time.monotonic() - _state["polled"] >= _POLL_S:
    _state["polled"] = time.monotonic()
    try:
      value = client.key_value_try_get(_KEY)
    except Exception:  # noqa: BLE001 - NotFound: no process was stopped
      return False
    _state["signum"] = int(value) if str(value).isdigit() else signal.SIGTERM
    _flag.set()
    _state["published"] = True
    return True
  return False


def check():
  """Raise Preempted when a stop was requested (called between training steps and between groups)."""
  if requested():
    raise Preempted(_state.get("stage", "training"))
