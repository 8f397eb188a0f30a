"""training.preemption: SIGTERM and SIGINT (Ctrl-C) set the stop flag that training checks between steps, and name
the exit status (143, 130); a second Ctrl-C stops at once. The commands as a user stops them:
tests/e2e/test_multiprocess.py (SIGTERM) and tests/e2e/test_ctrl_c_command.py (Ctrl-C)."""

import os
import signal

import pytest

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


def test_ctrl_c_inside_ctrl_c_after_raises_when_the_block_ends():
  before = signal.getsignal(signal.SIGINT)
  signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises KeyboardInterrupt, as under experiments.cli
  try:
    finished = []
    with pytest.raises(KeyboardInterrupt):
      with preemption.ctrl_c_after():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # Python runs a signal's handler between bytecodes: here, many times over
          sum(range(100))
        finished.append(True)
    assert finished == [True]  # the block ran to its end first
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with preemption.ctrl_c_after():  # no Ctrl-C: nothing raised
      pass
  finally:
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_after_leaves_other_handlers_alone(installed):
  with preemption.ctrl_c_after():  # training's flag handler: the block changes nothing
    assert signal.getsignal(signal.SIGINT) is preemption._handler
