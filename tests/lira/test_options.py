"""The options base (lira/options.py) under Scoring, RMIA, AuditOptions and train.dp, and the flags generated from
its fields (experiments/option_flags.py): one declaration of a field's default, choices and range serves the object,
its messages and its flag."""

import dataclasses
import math

import pytest
from absl import flags

from attacks.catalogue import ATTACKS
from experiments import option_flags
from lira import dp_audit
from lira import rmia
from lira.errors import InputError
from lira.options import Options, option
from lira.scoring import Scoring
from training import dp


@dataclasses.dataclass(frozen=True)
class Toy(Options):
  OWNER = "toy."
  rate: float = option(0.5, "A rate.", low=0, high=1, low_open=True)
  count: int = option(3, "A count.", low=1, integer=True)
  kind: str = option("a", "A kind.", choices=("a", "b"))
  flag: bool = option(False, "A switch.")
  limit: float | None = option(None, "Unset by default.", low=0)
  norm: float = option(1.0, "inf allowed.", low=0, low_open=True, finite=False)


@pytest.mark.parametrize("fields, words", [
    (dict(rate=0.0), "toy.rate must be in (0, 1], got 0.0"),
    (dict(rate=1.5), "toy.rate must be in (0, 1], got 1.5"),
    (dict(rate=math.nan), "toy.rate must be a finite number, got nan"),
    (dict(rate=math.inf), "toy.rate must be a finite number, got inf"),
    (dict(rate="x"), "toy.rate must be a number, got 'x'"),
    (dict(count=2.5), "toy.count must be an integer, got 2.5"),
    (dict(count=0), "toy.count must be >= 1, got 0"),
    (dict(kind="c"), "toy.kind must be one of a, b, got 'c'"),
    (dict(limit=-1.0), "toy.limit must be >= 0, got -1.0"),
    (dict(norm=0.0), "toy.norm must be > 0, got 0.0"),
])
def test_each_field_is_checked_by_its_declaration(fields, words):
  with pytest.raises(InputError) as e:
    Toy(**fields)
  assert str(e.value) == words


def test_values_in_range_pass_and_are_normalised():
  toy = Toy(rate=1, count=4.0, flag=1, limit=None, norm=math.inf)
  assert (toy.count, type(toy.count), toy.flag, toy.limit, toy.norm) == (4, int, True, None, math.inf)
  assert Toy.defaults() == {"rate": 0.5, "count": 3, "kind": "a", "flag": False, "limit": None, "norm": 1.0}
  assert Toy(kind="b").changed() == {"kind": "b"} and Toy().changed() == {}


@pytest.mark.parametrize("cls, name", [(Scoring, "Scoring"), (rmia.RMIA, "RMIA"), (dp_audit.AuditOptions,
                                                                                  "AuditOptions")])
def test_of_replaces_fields_and_refuses_unknown_ones_with_an_input_error(cls, name):
  first = next(iter(cls.defaults()))
  assert cls.of(None) == cls() and cls.of(cls()) == cls()
  with pytest.raises(InputError, match=f"unknown {name} option\\(s\\) {first}x; {name} has {first}, "):
    cls.of(None, **{first + "x": 1})
  with pytest.raises(InputError, match="options must be a lira"):
    cls.of({first: 1})


def test_the_classes_messages_name_the_field_as_before():
  with pytest.raises(InputError, match=r"^RMIA gamma must be a finite number, got inf$"):
    rmia.RMIA(gamma=math.inf)
  with pytest.raises(InputError, match=r"^RMIA a must be in \[0, 1\], got 2$"):
    rmia.RMIA(a=2)
  with pytest.raises(InputError, match=r"^var_floor must be > 0"):
    Scoring(var_floor=0.0)
  with pytest.raises(InputError, match=r"^seed must be >= 0, got -1$"):
    dp_audit.AuditOptions(seed=-1)
  with pytest.raises(InputError, match=r"confidence must be in \(0.5, 1\) for method gdp"):  # a check_fields rule
    dp_audit.AuditOptions(method="gdp", confidence=0.4)
  cfg = dp.config_defaults()
  cfg.clip_norm = math.inf  # with DP-SGD off it would act on nothing: refused, not ignored
  with pytest.raises(InputError, match="train.dp.clip_norm=inf acts only with DP-SGD on"):
    dp.validate(cfg, 8)
  cfg.noise_multiplier = 0.0  # DP-SGD's step without noise: no clipping allowed
  assert dp.validate(cfg, 8).clip_norm == math.inf
  cfg.noise_multiplier = 1.0
  with pytest.raises(InputError, match="clip_norm is inf"):
    dp.validate(cfg, 8)


def test_train_dp_block_is_the_dataclass_fields():
  cfg = dp.config_defaults()
  assert dict(cfg) == dp.DPSettings.defaults()
  cfg.unknown = 1.0
  with pytest.raises(InputError, match="train.dp has no field 'unknown'"):
    dp.validate(cfg, 8)


def test_flags_are_generated_from_the_fields_with_their_ranges():
  fv = flags.FlagValues()
  option_flags.define(Toy, ("rate", "count", "kind", "flag", "limit"), "toy_module", fv)
  fv(["prog"])
  assert option_flags.values(Toy, ("rate", "count", "kind", "flag", "limit"), fv) == {
      "rate": 0.5, "count": 3, "kind": "a", "flag": False, "limit": None}
  assert fv["rate"].help == "A rate. Must be in (0, 1]." and fv["count"].help == "A count. Must be >= 1."
  for bad in ("--rate=0", "--count=0", "--kind=c", "--rate=inf"):
    fv = flags.FlagValues()
    option_flags.define(Toy, ("rate", "count", "kind"), "toy_module", fv)
    with pytest.raises(flags.IllegalFlagValueError):
      fv(["prog", bad])


def test_attack_settings_take_rmia_s_ranges_from_its_fields():
  for setting, field in (("rmia_gamma", "gamma"), ("rmia_a", "a")):
    s, f = ATTACKS.settings[setting], rmia.RMIA.__dataclass_fields__[field]
    assert (s.default, s.help, s.low, s.high, s.low_open, s.high_open) == (
        f.default, f.metadata["help"], f.metadata["low"], f.metadata["high"], f.metadata["low_open"],
        f.metadata["high_open"])
