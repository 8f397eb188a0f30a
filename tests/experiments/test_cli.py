"""experiments.cli tells user errors (bad files, flags, paths), which a command reports as one `error: ...` line with
exit status 2, from bugs, which keep their tracebacks (the commands as a user runs them:
tests/e2e/test_user_errors_command.py)."""

import os
import sys

from absl import app
import pytest

from experiments import cli
from lira.errors import InputError, MissingFileError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_user_errors_and_bugs_are_told_apart():
  assert cli.is_user_error(InputError("x")) and cli.is_user_error(MissingFileError("x"))
  assert cli.is_user_error(app.UsageError("x"))
  assert cli.is_user_error(PermissionError(13, "Permission denied", "/some/file"))
  assert cli.message(PermissionError(13, "Permission denied", "/some/file")) == "/some/file: Permission denied"
  for bug in (ValueError("x"), KeyError("x"), FileNotFoundError("no filename: raised by code, not a path"),
              RuntimeError("x")):
    assert not cli.is_user_error(bug)


def _flag_values():
  from absl import flags
  fv = flags.FlagValues()
  flags.DEFINE_integer("n", 0, "Count.", flag_values=fv)
  flags.DEFINE_integer("m", 6, "Models.", flag_values=fv)
  flags.DEFINE_float("p", 0.5, "Rate.", flag_values=fv)
  flags.DEFINE_float("shift", 1.0, "Shift.", flag_values=fv)
  flags.DEFINE_list("counts", None, "Counts.", flag_values=fv)
  flags.DEFINE_integer("optional", None, "Optional.", flag_values=fv)
  flags.DEFINE_enum("kind", "a", ["a", "b"], "Kind.", flag_values=fv)
  flags.DEFINE_string("run_dir", None, "Run.", flag_values=fv)
  flags.mark_flag_as_required("run_dir", flag_values=fv)
  cli.check_range("n", 0, flag_values=fv)
  cli.check_range("m", 6, even=True, flag_values=fv)
  cli.check_range("p", 0, 1, low_open=True, high_open=True, flag_values=fv)
  cli.check_range("shift", flag_values=fv)
  cli.check_range("counts", 2, flag_values=fv)
  cli.check_range("optional", 1, flag_values=fv)
  return fv


def test_check_range_refuses_a_value_outside_its_range_naming_flag_value_and_range():
  from absl import flags
  for arg, says in (("--n=-1", "--n=-1: must be >= 0"), ("--m=7", "--m=7: must be an even number >= 6"),
                    ("--m=4", "--m=4: must be an even number >= 6"), ("--p=1", "--p=1: must be in (0, 1)"),
                    ("--p=0", "--p=0: must be in (0, 1)"), ("--p=nan", "--p=nan: must be a finite number in (0, 1)"),
                    ("--shift=inf", "--shift=inf: must be a finite number"),
                    ("--p=inf", "--p=inf: must be a finite number in (0, 1)"),
                    ("--counts=4,1", "--counts=4,1: must be comma-separated integers, each >= 2"),
                    ("--counts=4,x", "--counts=4,x: must be comma-separated integers, each >= 2"),
                    ("--optional=0", "--optional=0: must be >= 1")):
    with pytest.raises(flags.IllegalFlagValueError) as e:
      _flag_values()(["prog", "--run_dir=r", arg])
    assert cli.flag_error_message(e.value) == says, arg
  fv = _flag_values()
  fv(["prog", "--run_dir=r", "--n=0", "--m=8", "--p=0.01", "--shift=-2", "--counts=2,16"])  # in range; None passes
  assert fv.counts == ["2", "16"] and fv.optional is None
  assert fv["p"].help == "Rate. Must be in (0, 1)." and fv["counts"].help.endswith("integers, each >= 2.")


def test_absl_parsing_errors_become_one_line_naming_the_flag():
  from absl import flags
  for args, says in ((["--run_dir=r", "--kind=c"], "--kind=c: must be one of a, b"),
                     (["--run_dir=r", "--n=abc"], "--n=abc: must be an integer"),
                     (["--run_dir=r", "--p=x"], "--p=x: must be a number"), (["--run_dir"], "--run_dir needs a value"),
                     (["--nosuch"], "unknown flag --nosuch"), (["--kinds=a"], "unknown flag --kinds; did you mean"),
                     ([], "--run_dir is required")):
    with pytest.raises(flags.Error) as e:
      _flag_values()(["prog", *args])
    assert cli.flag_error_message(e.value).startswith(says), (args, cli.flag_error_message(e.value))


_CALLBACK_INTERRUPT = """
import gc, sys, time
from experiments import cli
fired = []
def callback(phase, info):  # a Ctrl-C that lands inside a garbage-collection callback, as in jax's _xla_gc_callback
  if not fired:
    fired.append(1)
    raise KeyboardInterrupt
def main(argv):
  gc.callbacks.append(callback)
  t0 = time.monotonic()
  while time.monotonic() - t0 < 20:
    [object() for _ in range(1000)]
    gc.collect()
  print("finished the whole job")
sys.argv = ["prog"]
cli.run(main)
"""


def test_a_ctrl_c_swallowed_by_a_callback_still_stops_the_command():
  import subprocess
  proc = subprocess.run([sys.executable, "-c", _CALLBACK_INTERRUPT], capture_output=True, text=True, timeout=60,
                        cwd=ROOT)
  assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
  assert "finished the whole job" not in proc.stdout and "Exception ignored" not in proc.stderr
  assert [l for l in proc.stderr.splitlines() if l.strip()] == [cli.STOPPED]


_EXEC_INTERRUPT = """
import sys
from experiments import cli
def main(argv):
  exec("raise KeyboardInterrupt")  # a Ctrl-C that lands in source run by exec(), as in code dataclasses generate
sys.argv = ["prog"]
cli.run(main)
"""


def test_a_ctrl_c_inside_exec_source_still_exits_130(tmp_path):
  import subprocess
  (tmp_path / "stopped_in_exec.py").write_text(_EXEC_INTERRUPT)
  env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
  proc = subprocess.run([sys.executable, "-m", "stopped_in_exec"], capture_output=True, text=True, timeout=60,
                        cwd=ROOT, env=env)  # -m, as the commands run: CPython's exit by SIGINT applies there
  assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
  assert [l for l in proc.stderr.splitlines() if l.strip()] == [cli.STOPPED]


_SET_NAME_INTERRUPT = """
import sys
from experiments import cli
class Interrupted:
  def __set_name__(self, owner, name):
    raise KeyboardInterrupt  # a Ctrl-C while Python builds a class (a module imported lazily defining a dataclass)
def main(argv):
  class Config:
    field = Interrupted()
sys.argv = ["prog"]
cli.run(main, resumes=True)
"""


def test_a_ctrl_c_that_python_wraps_while_building_a_class_still_exits_130(tmp_path):
  import subprocess
  (tmp_path / "stopped_in_set_name.py").write_text(_SET_NAME_INTERRUPT)
  env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
  proc = subprocess.run([sys.executable, "-m", "stopped_in_set_name"], capture_output=True, text=True, timeout=60,
                        cwd=ROOT, env=env)
  assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
  assert [l for l in proc.stderr.splitlines() if l.strip()] == [f"{cli.STOPPED}; {cli.RESUMES}"]


_SWALLOWED_INTERRUPT = """
import sys
from experiments import cli
def main(argv):
  try:
    exec("raise KeyboardInterrupt")  # a Ctrl-C a library swallowed, inside source run by exec(): CPython remembers it
  except BaseException:
    pass
  print("done")
sys.argv = ["prog"]
cli.run(main)
"""


def test_a_command_that_finished_is_not_killed_at_exit_by_a_swallowed_ctrl_c(tmp_path):
  """A Ctrl-C that a library swallowed while the command went on to finish is remembered by CPython, which would end
  the process by SIGINT at exit (status -2, no line): the finished command exits 0."""
  import subprocess
  (tmp_path / "swallowed_ctrl_c.py").write_text(_SWALLOWED_INTERRUPT)
  env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
  proc = subprocess.run([sys.executable, "-m", "swallowed_ctrl_c"], capture_output=True, text=True, timeout=60,
                        cwd=ROOT, env=env)
  assert proc.returncode == 0 and proc.stdout == "done\n" and proc.stderr == "", (proc.returncode, proc.stderr)


def test_a_closed_event_loops_callback_is_dropped_and_other_unraisables_are_not():
  # I/O a Ctrl-C abandoned (orbax's tensorstore reads) completes later and calls its closed loop's
  # call_soon_threadsafe from native code; a weakref callback is such a call, from no Python frame
  import asyncio
  import gc
  import weakref
  seen = []
  before = sys.unraisablehook
  sys.unraisablehook = cli._unraisable(lambda info: seen.append(info.exc_type))
  try:
    loop = asyncio.new_event_loop()
    loop.close()

    class Thing:
      pass

    thing = Thing()
    ref = weakref.ref(thing, loop.call_soon_threadsafe)  # noqa: F841 - its callback runs when `thing` goes
    del thing
    gc.collect()
    assert seen == []  # "Event loop is closed", dropped

    def fails(_):
      raise ValueError("a callback's own bug")

    other = Thing()
    ref = weakref.ref(other, fails)  # noqa: F841
    del other
    gc.collect()
    assert seen == [ValueError]  # everything else still reported
  finally:
    sys.unraisablehook = before
