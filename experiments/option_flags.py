"""Flags generated from an options class's fields (lira/options.py): one flag per field, with the field's default,
help and choices (an enum flag) or range (checked when the flags are parsed, shown by --help), so a default, a
choice or a range is written once, on the field."""

import dataclasses
import sys

from absl import flags

from experiments import cli


def define(cls, names, module_name=None, flag_values=flags.FLAGS, prefix=""):
  """Define --<prefix><name> for each field `name` of the options class `cls` (enum for fields with choices, bool,
  integer or float with the field's range, string otherwise) as flags of `module_name` (default: the caller's)."""
  if module_name is None:
    caller = sys._getframe(1).f_globals["__name__"]
    module_name = sys.argv[0] if caller == "__main__" else caller
  fields = {f.name: f for f in dataclasses.fields(cls)}
  for name in names:
    field, flag = fields[name], prefix + name
    m = field.metadata
    common = dict(flag_values=flag_values, module_name=module_name)
    if m["choices"] is not None:
      flags.DEFINE_enum(flag, field.default, [str(c) for c in m["choices"]], m["help"], **common)
    elif isinstance(field.default, bool):
      flags.DEFINE_bool(flag, field.default, m["help"], **common)
    elif m.get("integer"):
      flags.DEFINE_integer(flag, field.default, m["help"], **common)
    elif isinstance(field.default, float):
      flags.DEFINE_float(flag, field.default, m["help"], **common)
    else:
      flags.DEFINE_string(flag, field.default, m["help"], **common)
    if m.get("low") is not None or m.get("high") is not None:
      cli.check_range(flag, m["low"], m["high"], low_open=m["low_open"], high_open=m["high_open"],
                      flag_values=flag_values)


def values(cls, names, flag_values=flags.FLAGS, prefix=""):
  """{field: the flag's value} of the named fields."""
  return {name: flag_values[prefix + name].value for name in names}
