"""The scoring flags, declared once and generated from lira.Scoring's fields: their defaults are Scoring's defaults.

A command calls `define(...)` with the fields it exposes, then `scoring()` builds the Scoring its flags describe;
`define_rmia()` adds RMIA's gamma and a.
The flags are registered as the calling command's own, so its `--help` lists them.
"""

import dataclasses
import functools
import sys

from absl import flags

from lira.errors import InputError
from lira.scoring import Scoring

FLAGS = flags.FLAGS
# The fields a run-folder evaluation exposes; covariance and shared come from --variants (or a command's own axis).
EVALUATION = ("reduction", "statistic", "offline", "offline_shift", "fix_variance", "balance_counts", "backend",
              "precision")
_FIELDS = {f.name: f for f in dataclasses.fields(Scoring)}
_DEFINED = {}  # command module -> the Scoring fields it has as flags


def _caller():
  """The module calling define() or scoring(), named as absl names a flag's module (the script path for __main__)."""
  name = sys._getframe(2).f_globals["__name__"]
  return sys.argv[0] if name == "__main__" else name


def define(names=EVALUATION, flag_values=FLAGS):
  """Define a flag per Scoring field in `names` (enum for fields with choices, bool, or string for reduction), as
  flags of the calling module."""
  module = _caller()
  for name in names:
    field = _FIELDS[name]
    help_text, choices = field.metadata["help"], field.metadata["choices"]
    common = dict(flag_values=flag_values, module_name=module)
    if choices is not None:
      flags.DEFINE_enum(name, field.default, list(choices), help_text, **common)
    elif isinstance(field.default, bool):
      flags.DEFINE_bool(name, field.default, help_text, **common)
    elif name == "reduction":
      flags.DEFINE_string(name, field.default, help_text, **common)
    else:
      flags.DEFINE_float(name, field.default, help_text, **common)
    if name == "reduction" or isinstance(field.default, float):  # a value Scoring refuses, refused with the flags
      flags.register_validator(name, functools.partial(_check_field, name), flag_values=flag_values)
  _DEFINED[module] = tuple(names)


def _check_field(name, value):
  """Scoring's own check of one field's value, as a flag validator: `--reduction=min:0: reduction must be ...`."""
  try:
    Scoring.of(None, **{name: value})
  except InputError as e:
    raise flags.ValidationError(f"--{name}={value}: {e}") from e
  return True


def scoring(flag_values=FLAGS, **fields):
  """The Scoring the calling command's scoring flags describe, with `fields` set on top."""
  names = _DEFINED[_caller()]
  return Scoring.of(None, **{name: flag_values[name].value for name in names}, **fields)


def define_rmia(flag_values=FLAGS):
  """--rmia_gamma and --rmia_a (lira.rmia.RMIA's gamma and a, its defaults and help), as flags of the calling module."""
  from experiments import cli
  from lira import rmia
  module = _caller()
  fields = rmia.RMIA.__dataclass_fields__
  for name, low, high, low_open in (("gamma", 0, None, True), ("a", 0, 1, False)):
    flags.DEFINE_float(f"rmia_{name}", fields[name].default, fields[name].metadata["help"], flag_values=flag_values,
                       module_name=module)
    cli.check_range(f"rmia_{name}", low, high, low_open=low_open, flag_values=flag_values)


# The jax backend compiles its OAS and balanced scorers once per distinct IN count (docs/statistics.md, "Backends").
MANY_IN_COUNTS = 4


def jax_compile_note(scoring, in_counts, where):
  """A one-line note when the jax backend would compile many times: `in_counts` distinct IN counts (None: model
  subsets, whose counts always vary) under an OAS or balanced scorer; None otherwise."""
  if scoring.backend != "jax" or (in_counts is not None and in_counts <= MANY_IN_COUNTS):
    return None
  many = "many" if in_counts is None else str(in_counts)
  return (f"note: {where} {many} distinct IN counts; --backend=jax compiles its OAS and balanced scorers once per "
          "count, so --backend=numpy is likely faster here (docs/statistics.md, \"Backends\")")
