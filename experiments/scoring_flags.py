"""The scoring flags, declared once and generated from lira.Scoring's fields: their defaults are Scoring's defaults.

A command calls `define(...)` with the fields it exposes, then `scoring()` builds the Scoring its flags describe.
The attacks' flags are generated from the attack registry by experiments/attack_flags.py.
The flags are registered as the calling command's own, so its `--help` lists them.
"""

import functools
import sys

from absl import flags

from experiments import option_flags
from lira.errors import InputError
from lira.scoring import Scoring

FLAGS = flags.FLAGS
# The fields a run-folder evaluation exposes; covariance and shared come from --variants (or a command's own axis).
EVALUATION = ("reduction", "statistic", "offline", "offline_shift", "fix_variance", "balance_counts", "backend",
              "precision")
_DEFINED = {}  # command module -> the Scoring fields it has as flags


def _caller():
  """The module calling define() or scoring(), named as absl names a flag's module (the script path for __main__)."""
  name = sys._getframe(2).f_globals["__name__"]
  return sys.argv[0] if name == "__main__" else name


def define(names=EVALUATION, flag_values=FLAGS):
  """Define a flag per Scoring field in `names` (experiments/option_flags.py: its default, help, choices and range),
  as flags of the calling module; reduction's syntax is checked by Scoring's own check when the flags are parsed."""
  module = _caller()
  option_flags.define(Scoring, names, module, flag_values)
  if "reduction" in names:  # a value Scoring refuses, refused with the flags
    flags.register_validator("reduction", functools.partial(_check_field, "reduction"), flag_values=flag_values)
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


# The jax backend compiles its sorted scorers (OAS, balanced) once for a run's IN counts, with the count traced
# (docs/statistics.md, "Backends").
MANY_IN_COUNTS = 4


def jax_compile_note(scoring, in_counts, where):
  """A one-line note when the jax backend meets many IN counts: `in_counts` distinct IN counts (None: model
  subsets, whose counts always vary) under an OAS or balanced scorer; None otherwise."""
  if scoring.backend != "jax" or (in_counts is not None and in_counts <= MANY_IN_COUNTS):
    return None
  from lira import loo_jax
  if loo_jax.scores_on_host(scoring):  # jax on CPUs scores with the numpy backend: nothing is compiled
    return None
  many = "many" if in_counts is None else str(in_counts)
  return (f"note: {where} {many} distinct IN counts; --backend=jax scores them with one program whose count is "
          "traced, slower per canary than one count's, so --backend=numpy may be faster here (docs/statistics.md, "
          "\"Backends\")")
