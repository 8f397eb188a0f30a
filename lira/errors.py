"""Errors a user can fix (a bad file, flag, array or setting): the commands print their message alone.

The classes live at the bottom of the house (run_folder/errors.py), so that every layer raises the same ones and
isinstance checks agree; lira's modules import them from here. Everything else that escapes a command is a bug and
keeps its traceback (experiments/cli.py).
"""

from run_folder.errors import InputError, MissingFileError, MissingPackageError, UserError

__all__ = ["UserError", "InputError", "MissingPackageError", "MissingFileError"]
