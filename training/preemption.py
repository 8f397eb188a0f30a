"""Stopping a training run promptly on SIGTERM, as cluster schedulers send it before they kill a job.

`install()` replaces the default action of SIGTERM (and JAX's preemption notifier) with a flag that training checks
between steps (`check()`): the step in flight finishes, the group in flight is abandoned, every finished group stays
in the run folder, and the command exits with EXIT_STATUS. In a jax.distributed run the flag is published in the
coordination service's key-value store, so SIGTERM sent to any one process stops every process within about a
second (and a step), and they leave jax.distributed together.

Why not jax.experimental.multihost_utils.reached_preemption_sync_point: its sync point is the largest step counter
of all processes plus one, reached only by processes that call it at every step with counters that advance in
step. The processes of a shadow run train disjoint groups and never meet in a collective: one may be re-scoring a
checkpointed group, waiting for the others' groups, or have fewer groups, and would never reach the point.
"""

import signal
import threading
import time

EXIT_STATUS = 128 + signal.SIGTERM  # 143: what a shell reports for a process ended by SIGTERM
_KEY = "seqlira/sigterm"
_POLL_S = 1.0  # how often a jax.distributed process asks the coordination service whether another one was stopped

_flag = threading.Event()
_state = {"published": False, "polled": 0.0}


class Preempted(Exception):
  """SIGTERM reached this process, or another process of the same jax.distributed run."""


def _handler(signum, frame):
  del signum, frame
  _flag.set()


def install():
  """Handle SIGTERM by setting the flag that `check` reads (call after jax.distributed.initialize, whose preemption
  notifier would otherwise take the signal and let the run go on)."""
  _flag.clear()
  _state.update(published=False, polled=0.0)
  signal.signal(signal.SIGTERM, _handler)


def uninstall():
  """SIGTERM ends the process at once again (e.g. during the evaluation, whose files are written atomically)."""
  signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _client():
  """The jax.distributed client, or None in a single-process run (orbax reads it the same way)."""
  from jax._src import distributed
  return distributed.global_state.client


def requested():
  """True once SIGTERM reached this process or, in a jax.distributed run, any process of it."""
  client = _client()
  if _flag.is_set():
    if client is not None and not _state["published"]:
      _state["published"] = True
      client.key_value_set(_KEY, "1")
    return True
  if client is not None and time.monotonic() - _state["polled"] >= _POLL_S:
    _state["polled"] = time.monotonic()
    try:
      client.key_value_try_get(_KEY)
    except Exception:  # noqa: BLE001 - NotFound: no process was stopped
      return False
    _flag.set()
    _state["published"] = True
    return True
  return False


def check():
  """Raise Preempted when a stop was requested (called between training steps and between groups)."""
  if requested():
    raise Preempted()
