"""The attack flags, generated from the attack registry (attacks/catalogue.py): --attacks and one flag per setting of
the attacks a command can run, with the setting's default, help and range, declared as the calling command's own.

`chosen()` returns (names, settings, given): the --attacks names, every setting's value, and the settings the user
set on the command line, which attacks.shadow.shadow_rows refuses when no chosen attack reads them.
"""

import sys

from absl import flags

from attacks.catalogue import ATTACKS
from experiments import cli

FLAGS = flags.FLAGS
_DEFINED = {}  # command module -> (where, the settings it has as flags)


def _caller():
  name = sys._getframe(2).f_globals["__name__"]
  return sys.argv[0] if name == "__main__" else name


def define(where, help_prefix="Attacks to add as rows", default_help="default none", flag_values=FLAGS):
  """--attacks (the registry's attacks that can score `where`) and a flag per setting they read."""
  module = _caller()
  common = dict(flag_values=flag_values, module_name=module)
  flags.DEFINE_list("attacks", None, f"{help_prefix}: {','.join(ATTACKS.names(where))} ({default_help}).", **common)
  settings = ATTACKS.settings_for(where)
  for s in settings:
    if s.kind == "ints":
      flags.DEFINE_list(s.name, None if s.default is None else [str(v) for v in s.default], s.help, **common)
    elif s.kind == "int":
      flags.DEFINE_integer(s.name, s.default, s.help, **common)
    else:
      flags.DEFINE_float(s.name, s.default, s.help, **common)
    cli.check_range(s.name, s.low, s.high, low_open=s.low_open, high_open=s.high_open, flag_values=flag_values)
  _DEFINED[module] = (where, tuple(s.name for s in settings))


def chosen(flag_values=FLAGS):
  """(attack names, {setting: value}, names of the settings given on the command line) of the calling command."""
  _, names = _DEFINED[_caller()]
  values = {}
  for name in names:
    value = flag_values[name].value
    values[name] = tuple(int(v) for v in value) if isinstance(value, list) else value
  given = tuple(name for name in names if flag_values[name].present)
  return list(dict.fromkeys(flag_values.attacks or [])), values, given
