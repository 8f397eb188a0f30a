"""The one entry point of every command: user errors become `error: ...` on stderr and exit status 2.

A user error (lira.errors.UserError: a bad file, flag, config field or array, named in the message; or an
operating-system error on a path the user gave: missing, unreadable, read-only, disk full) is reported as its
message alone. Anything else is a bug and keeps its traceback.
"""

import sys

from absl import app
from absl import flags

from lira.errors import UserError

EXIT_USER_ERROR = 2


def message(error):
  """What a user error says: its text, or for an OSError on a path, `path: reason`."""
  if isinstance(error, OSError) and error.filename is not None and error.strerror:
    return f"{error.filename}: {error.strerror}"
  return str(error)


def is_user_error(error):
  return isinstance(error, (UserError, app.UsageError)) or (isinstance(error, OSError) and error.filename is not None)


def report(error):
  """Print a user error as one `error: ...` line on stderr; returns the exit status to use."""
  hint = " (see --help)" if isinstance(error, app.UsageError) else ""
  print(f"error: {message(error)}{hint}", file=sys.stderr)
  return EXIT_USER_ERROR


def flag_defaults(names):
  """{name: default} of the named absl flags: what a report's file name leaves out (the flags are the one source)."""
  return {name: flags.FLAGS[name].default for name in names}


def run(main):
  """absl's app.run(main), printing user errors as `error: ...` (exit status 2) instead of a traceback."""

  def guarded(argv):
    try:
      return main(argv)
    except Exception as e:  # noqa: BLE001 - re-raised unless it is the user's to fix
      if not is_user_error(e):
        raise
      sys.exit(report(e))

  app.run(guarded)
