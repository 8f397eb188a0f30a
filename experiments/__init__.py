"""Thin command-line entry points: `python -m experiments.X`. Nothing imports this package.

Python imports this package first, while it looks for the command (sys.argv[0] is then "-m"): from here on Ctrl-C
ends the command with one line and exit status 130 instead of a traceback from whatever was being imported.
experiments.cli.run takes Ctrl-C over before the command's main runs.
"""

import os
import signal
import sys

STOPPED = "stopped by Ctrl-C (SIGINT)"
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: what a shell reports for a process ended by Ctrl-C


def _stopped_while_loading(signum, frame):
  """Ctrl-C while the command's modules load or its flags are parsed: nothing was done yet, so the process ends here.
  Not by raising: this handler may run inside a callback Python calls from no frame (jax's garbage-collection
  callback, which imports trigger), where an exception is dropped and the command would go on."""
  del signum, frame
  print(STOPPED, file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(EXIT_INTERRUPTED)


if sys.argv[:1] == ["-m"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
  signal.signal(signal.SIGINT, _stopped_while_loading)


def _quiet_backend_probe():
  """jax logs "Unable to initialize backend 'tpu': ..." at INFO wherever no TPU library is installed, and absl shows
  INFO, so every command that starts jax printed it. Its warnings (a GPU without a CUDA jaxlib) stay."""
  import logging
  logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)


_quiet_backend_probe()
