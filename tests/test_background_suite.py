"""The suite started as a background job (SIGINT ignored, as `nohup bash -c 'python -m pytest -q' &` starts it) still
gives the commands its tests start the SIGINT a terminal gives, so the Ctrl-C tests see the exit 130 they test
(tests/conftest.py)."""

import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_command_started_by_the_suite_takes_ctrl_c():
  child = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
                         capture_output=True, text=True, timeout=60)
  assert child.stdout.strip() == "default_int_handler", child.stdout + child.stderr


def test_so_it_does_when_the_suite_starts_with_sigint_ignored():
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
       f"{os.path.abspath(__file__)}::test_a_command_started_by_the_suite_takes_ctrl_c"],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # what a background job inherits
  assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
