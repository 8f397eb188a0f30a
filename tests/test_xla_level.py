"""The suite's XLA compile settings (tests/xla_level.py): what this session's processes run with, the flags a
default-level subprocess gets back, and the probe that keeps flags an installed jaxlib does not know out."""

import os

import pytest

import xla_level


def test_this_session_compiles_with_the_fast_settings():
  flags = os.environ["XLA_FLAGS"].split()
  assert xla_level.LEVEL_0 in flags
  assert os.environ[xla_level._PROBED] in ("0", "1")
  assert all((f in flags) == (os.environ[xla_level._PROBED] == "1") for f in xla_level.EMITTERS)


def test_at_default_level_removes_the_suites_flags_and_keeps_the_others():
  env = {"XLA_FLAGS": " ".join(xla_level.FAST_COMPILE + ("--xla_force_host_platform_device_count=4",)), "A": "b"}
  assert xla_level.at_default_level(env) == {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "A": "b"}
  assert xla_level.at_default_level({})["XLA_FLAGS"] == ""


@pytest.mark.parametrize("answer", ["0", "1"])
def test_set_fast_compile_adds_the_emitters_only_where_the_probe_accepted_them(monkeypatch, answer):
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
  monkeypatch.setenv(xla_level._PROBED, answer)  # a probe already made (by the session's first process)
  xla_level.set_fast_compile()
  xla_level.set_fast_compile()  # twice: nothing added twice
  want = ["--xla_force_host_platform_device_count=2", xla_level.LEVEL_0] + list(xla_level.EMITTERS) * (answer == "1")
  assert os.environ["XLA_FLAGS"].split() == want


@pytest.mark.slow
def test_the_probe_refuses_a_flag_xla_does_not_know_and_accepts_the_emitters():
  assert not xla_level._accepts(["--xla_no_such_flag_of_any_version=1"])  # XLA aborts on an unknown flag
  if os.environ[xla_level._PROBED] == "1":
    assert xla_level._accepts(xla_level.EMITTERS)
