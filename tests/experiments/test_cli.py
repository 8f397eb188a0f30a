"""experiments.cli tells user errors (bad files, flags, paths), which a command reports as one `error: ...` line with
exit status 2, from bugs, which keep their tracebacks (the commands as a user runs them:
tests/e2e/test_user_errors_command.py)."""

from absl import app

from experiments import cli
from lira.errors import InputError, MissingFileError


def test_user_errors_and_bugs_are_told_apart():
  assert cli.is_user_error(InputError("x")) and cli.is_user_error(MissingFileError("x"))
  assert cli.is_user_error(app.UsageError("x"))
  assert cli.is_user_error(PermissionError(13, "Permission denied", "/some/file"))
  assert cli.message(PermissionError(13, "Permission denied", "/some/file")) == "/some/file: Permission denied"
  for bug in (ValueError("x"), KeyError("x"), FileNotFoundError("no filename: raised by code, not a path"),
              RuntimeError("x")):
    assert not cli.is_user_error(bug)
