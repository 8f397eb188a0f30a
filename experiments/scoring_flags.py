"""The scoring flags, declared once and generated from lira.Scoring's fields: their defaults are Scoring's defaults.

A command calls `define(...)` with the fields it exposes, then `scoring()` builds the Scoring its flags describe.
"""

import dataclasses

from absl import flags

from lira.scoring import Scoring

FLAGS = flags.FLAGS
# The fields a run-folder evaluation exposes; covariance and shared come from --variants (or a command's own axis).
EVALUATION = ("reduction", "statistic", "offline", "offline_shift", "fix_variance", "balance_counts", "backend",
              "precision")
_FIELDS = {f.name: f for f in dataclasses.fields(Scoring)}
_defined = []


def define(names=EVALUATION, flag_values=FLAGS):
  """Define a flag per Scoring field in `names`: enum for fields with choices, bool, or string (reduction)."""
  for name in names:
    field = _FIELDS[name]
    help_text, choices = field.metadata["help"], field.metadata["choices"]
    if choices is not None:
      flags.DEFINE_enum(name, field.default, list(choices), help_text, flag_values=flag_values)
    elif field.type is bool or isinstance(field.default, bool):
      flags.DEFINE_bool(name, field.default, help_text, flag_values=flag_values)
    elif name == "reduction":
      flags.DEFINE_string(name, field.default, help_text, flag_values=flag_values)
    else:
      flags.DEFINE_float(name, field.default, help_text, flag_values=flag_values)
    _defined.append(name)


def scoring(flag_values=FLAGS, **fields):
  """The Scoring the defined flags describe, with `fields` set on top (a command's own axis, e.g. shared)."""
  return Scoring.of(None, **{name: flag_values[name].value for name in _defined}, **fields)
