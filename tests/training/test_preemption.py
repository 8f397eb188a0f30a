"""training.preemption: SIGTERM and SIGINT (Ctrl-C) set the stop flag that training checks between steps, and name
the exit status (143, 130); a second Ctrl-C stops at once. The commands as a user stops them:
tests/e2e/test_multiprocess.py (SIGTERM) and tests/e2e/test_ctrl_c_command.py (Ctrl-C)."""

import os
import signal

import pytest

import run_folder
from training import preemption


@pytest.fixture
def installed():
  before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
  preemption.install()
  try:
    yield
  finally:
    preemption.uninstall()
    signal.signal(signal.SIGTERM, before[1])
  assert signal.getsignal(signal.SIGINT) is before[0]  # uninstall gives Ctrl-C back to what handled it before


def test_nothing_requested_until_a_signal(installed):
  assert not preemption.requested()
  preemption.check()


def test_ctrl_c_stops_between_steps_with_status_130_and_a_second_one_at_once(installed):
  os.kill(os.getpid(), signal.SIGINT)
  assert preemption.requested()
  assert (preemption.name(), preemption.exit_status()) == ("Ctrl-C (SIGINT)", 130)
  with pytest.raises(preemption.Preempted):
    preemption.check()
  with pytest.raises(KeyboardInterrupt):
    os.kill(os.getpid(), signal.SIGINT)


def test_sigterm_stops_with_status_143_and_the_first_signal_names_the_stop(installed):
  os.kill(os.getpid(), signal.SIGTERM)
  os.kill(os.getpid(), signal.SIGTERM)
  assert preemption.requested() and (preemption.name(), preemption.exit_status()) == ("SIGTERM", 143)
  assert preemption.exit_status() == preemption.EXIT_STATUS


def test_install_starts_afresh(installed):
  os.kill(os.getpid(), signal.SIGINT)
  preemption.uninstall()
  preemption.install()
  assert not preemption.requested() and preemption.exit_status() == 143


def test_a_ctrl_c_held_by_a_checkpoint_read_reaches_the_training_flag_when_the_read_ends(installed):
  with run_folder.ctrl_c_held():  # as around orbax's restores
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
      sum(range(10))
    assert not preemption.requested()
  assert preemption.requested() and preemption.name() == "Ctrl-C (SIGINT)"
  assert signal.getsignal(signal.SIGINT) is preemption._handler
