"""lira.Scoring: the one options object; its checks, variants and the fields a report name carries."""

import dataclasses

import pytest

import lira
from lira import scoring
from lira.errors import InputError


def test_defaults_are_the_commands_defaults():
  s = lira.Scoring()
  assert (s.covariance, s.shared, s.reduction, s.statistic) == ("oas", True, None, "logit")
  assert (s.offline, s.offline_shift, s.fix_variance, s.balance_counts) == (False, "std", False, True)
  assert (s.backend, s.precision, s.var_floor) == ("numpy", "float64", lira.VAR_FLOOR)
  assert scoring.defaults() == {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
  with pytest.raises(dataclasses.FrozenInstanceError):
    s.covariance = "independent"


@pytest.mark.parametrize("field, value, match", [
    ("covariance", "full", "covariance must be one of"), ("statistic", "prob", "statistic must be one of"),
    ("offline_shift", "left", "offline_shift must be one of"), ("backend", "torch", "backend must be one of"),
    ("precision", "float16", "precision must be one of"), ("reduction", "mean:2", "reduction must be"),
    ("reduction", "group:0", "reduction must be"), ("var_floor", 0.0, "var_floor must be > 0"),
    ("precision", "float32", "the jax backend's")])
def test_a_bad_field_is_refused_at_once_naming_it(field, value, match):
  with pytest.raises(InputError, match=match):
    lira.Scoring(**{field: value})


def test_reduction_is_normalised_so_equal_settings_compare_equal():
  assert lira.Scoring(reduction="none") == lira.Scoring(reduction="") == lira.Scoring()
  assert lira.Scoring(reduction="group:04").reduction == "group:4"


def test_of_overrides_fields_and_refuses_unknown_ones():
  base = lira.Scoring(statistic="loss")
  assert lira.Scoring.of(base, covariance="independent") == lira.Scoring(statistic="loss", covariance="independent")
  assert lira.Scoring.of(None) == lira.Scoring() and lira.Scoring.of(base) is base
  with pytest.raises(InputError, match="unknown Scoring option"):
    lira.Scoring.of(None, balanced=True)
  with pytest.raises(InputError, match="must be a lira.Scoring"):
    lira.Scoring.of({"covariance": "oas"})


def test_variant_key_and_sign():
  s = lira.Scoring(statistic="loss").variant("univariate", False)
  assert (s.covariance, s.shared, s.statistic, s.key) == ("univariate", False, "loss", "univariate-classwise")
  assert s.sign == -1.0 and lira.Scoring().sign == 1.0


def test_conflicts_name_every_reason_for_each_scorer():
  assert lira.Scoring().conflicts() == []
  both = lira.Scoring(offline=True, fix_variance=True)  # default oas, shared and balanced: three reasons
  reasons = both.conflicts("leave_one_out")
  assert len(reasons) == 3 and "offline" in reasons[0] and "not OAS" in reasons[1] and "balance" in reasons[2]
  assert len(both.conflicts("targets")) == 2  # nothing is balanced when targets are scored from every shadow
  with pytest.raises(InputError, match="no shared IN/OUT covariance"):
    lira.Scoring(offline=True).check()
  assert lira.Scoring(covariance="independent", fix_variance=True).check("targets")


def test_applicable_variants_drop_what_the_scoring_cannot_score():
  kept, dropped = scoring.applicable_variants(scoring.VARIANTS, lira.Scoring(fix_variance=True))
  assert [v[1] for v in kept] == ["univariate", "univariate", "independent", "independent"]
  assert [d[0] for d in dropped] == ["OAS Class-Wise", "OAS Shared"]
  assert all("balance" not in reason for _, reason in dropped)  # the report turns balancing off with a note


def test_changed_lists_the_fields_that_differ_from_the_defaults():
  assert lira.Scoring().changed() == {}
  assert lira.Scoring(reduction="min:2", balance_counts=False).changed() == {"reduction": "min:2",
                                                                             "balance_counts": False}
  assert lira.Scoring(backend="jax").changed(["reduction", "statistic"]) == {}
