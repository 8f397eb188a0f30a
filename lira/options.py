"""One base under every options class (lira.Scoring, lira.rmia.RMIA, lira.dp_audit.AuditOptions): a field is
declared once with its default, help, choices and range, and the base validates it, builds an object from another
with fields replaced (`of`), and lists the defaults and the fields that differ from them.

The commands' flags are generated from the same fields (experiments/option_flags.py), ranges included, so a range is
written once. A class adds the checks that tie fields together in `check_fields`.
"""

import dataclasses
import math

from lira.errors import InputError


def option(default, help, *, choices=None, low=None, high=None, low_open=False, high_open=False, integer=False,
           finite=True, normal=None):
  """A field of an options class: its default, its help (the flag's help too), its choices or its numeric range
  (None: unbounded on that side); integer: a whole number; finite=False lets inf through (a clip norm's "none");
  normal: a function that checks a value and returns its normal form (raising InputError when it is bad).
  A field whose default is None may be None (not set)."""
  return dataclasses.field(default=default, metadata={
      "help": help, "choices": choices, "low": low, "high": high, "low_open": low_open, "high_open": high_open,
      "integer": integer, "finite": finite, "normal": normal})


def shared(cls, name, help=None):
  """Field `name` of options class `cls` for another options class that shares the setting: the same default,
  choices, range and normal form, defined once on `cls`; `help` where the other class's flag says it its own way."""
  field = {f.name: f for f in dataclasses.fields(cls)}[name]
  return dataclasses.field(default=field.default, metadata={**field.metadata, "help": help or field.metadata["help"]})


def _number(x):
  return f"{x:g}" if isinstance(x, float) else str(x)


def range_words(low=None, high=None, low_open=False, high_open=False):
  """A numeric range in words: 'in (0, 1]', '> 0', '>= 0' (None when unbounded); the flags' help and every options
  message say it this way."""
  if low is not None and high is not None:
    return f"in {'(' if low_open else '['}{_number(low)}, {_number(high)}{')' if high_open else ']'}"
  if low is not None:
    return f"{'>' if low_open else '>='} {_number(low)}"
  if high is not None:
    return f"{'<' if high_open else '<='} {_number(high)}"
  return None


def rule(field):
  """The range of a numeric field in words: 'in (0, 1]', '> 0', '>= 0'."""
  m = field.metadata
  return range_words(m.get("low"), m.get("high"), m.get("low_open", False), m.get("high_open", False))


def check_number(name, value, low=None, high=None, low_open=False, high_open=False, integer=False, finite=True):
  """`value` as a number in the range (an int with `integer`): InputError '<name> must be ...' otherwise."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
    raise InputError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
  x = float(value)
  if math.isnan(x) or (finite and math.isinf(x)):
    raise InputError(f"{name} must be a finite number, got {value!r}")
  if integer and x != int(x):
    raise InputError(f"{name} must be an integer, got {value!r}")
  if ((low is not None and (x <= low if low_open else x < low)) or
      (high is not None and (x >= high if high_open else x > high))):
    raise InputError(f"{name} must be {range_words(low, high, low_open, high_open)}, got {value!r}")
  return int(x) if integer else value


def check_value(owner, field, value):
  """The field's value checked against its choices and range: InputError naming `owner` and the field."""
  m = field.metadata
  if m.get("normal") is not None:
    value = m["normal"](value)
  if value is None and field.default is None:
    return None
  if m.get("choices") is not None:
    if value not in m["choices"]:
      raise InputError(f"{owner}{field.name} must be one of {', '.join(map(str, m['choices']))}, got {value!r}")
    return value
  if isinstance(field.default, bool):
    return bool(value)
  if m.get("low") is None and m.get("high") is None and not m.get("integer"):
    return value
  return check_number(f"{owner}{field.name}", value, m.get("low"), m.get("high"), m["low_open"], m["high_open"],
                      m.get("integer", False), m.get("finite", True))


class Options:
  """Base of the frozen options dataclasses: every field checked when the object is made (InputError naming it)."""

  # How messages name the class's fields ("RMIA " gives "RMIA gamma must be > 0") and the class itself.
  OWNER = ""
  PUBLIC_NAME = None  # "lira.Scoring": default module.Class

  def __post_init__(self):
    for field in dataclasses.fields(self):
      object.__setattr__(self, field.name, check_value(self.OWNER, field, getattr(self, field.name)))
    self.check_fields()

  def check_fields(self):
    """Checks that tie fields together (a subclass's); the fields one by one are checked already."""

  @classmethod
  def of(cls, options=None, **fields):
    """`options` (default cls()) with `fields` replaced: what every function taking these options does with its
    arguments. An unknown field is refused with the fields the class has."""
    base = cls() if options is None else options
    if not isinstance(base, cls):
      raise InputError(f"options must be a {cls.PUBLIC_NAME or cls.__module__ + '.' + cls.__name__}, got "
                       f"{type(base).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(fields) - set(names))
    if unknown:
      raise InputError(f"unknown {cls.__name__} option(s) {', '.join(unknown)}; {cls.__name__} has "
                       f"{', '.join(names)}")
    return dataclasses.replace(base, **fields) if fields else base

  @classmethod
  def defaults(cls):
    """{field: default}, in field order."""
    return {f.name: f.default for f in dataclasses.fields(cls)}

  def changed(self, names=None):
    """{field: value} of the fields (of `names`, default all) that differ from the defaults: what report names
    carry."""
    default = self.defaults()
    names = list(default) if names is None else names
    return {n: getattr(self, n) for n in names if getattr(self, n) != default[n]}
