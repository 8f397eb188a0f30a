"""Errors a user can fix (a bad file, flag, array or setting): the commands print their message alone.

Everything else that escapes a command is a bug and keeps its traceback (experiments/cli.py). The classes live here,
at the bottom of the house, so that every layer raises the same ones; lira.errors re-exports them.
"""


class UserError(Exception):
  """Base of the errors whose message tells the user what to change; no traceback is shown for them."""


class InputError(UserError, ValueError):
  """Bad input: a file, flag, config field or array that cannot be used, named in the message."""


class MissingPackageError(UserError, ImportError):
  """An optional package a feature needs is not installed (the message says what to install)."""


class MissingFileError(UserError, FileNotFoundError):
  """A file or folder the user named (or a run folder should hold) does not exist."""
