"""How LiRA fits and scores: one frozen options object that every scorer takes, and the paper's six variants.

`Scoring`'s field defaults are the only defaults: the commands build their scoring flags from its fields
(experiments/scoring_flags.py), so `lira.leave_one_out(loss, keep)` scores exactly as `python -m experiments.evaluate`
does with no flags. A variant of Table II is a Scoring with its (covariance, shared) pair set: `scoring.variant(...)`.
"""

import dataclasses

from lira.covariance import ESTIMATORS, VAR_FLOOR
from lira.errors import InputError
from lira.options import Options, option
from lira.transforms import STATISTICS, member_sign, normal_reduction

COVARIANCES = ESTIMATORS
OFFLINE_SHIFTS = ("uniform", "std")
BACKENDS = ("numpy", "jax")
PRECISIONS = ("float64", "float32")


@dataclasses.dataclass(frozen=True)
class Scoring(Options):
  """Settings of the Gaussian fits and scores (docs/conventions.md); invalid values raise InputError at once."""

  PUBLIC_NAME = "lira.Scoring"

  covariance: str = option("oas", "Covariance model of the per-position vector (paper Sec. 2.4).", choices=COVARIANCES)
  shared: bool = option(True, "One covariance from IN and OUT rows centred by their own means (else class-wise).")
  reduction: str | None = option(None, "Length reduction before fitting: group:K, min:K or max:K (default none).",
                                 normal=normal_reduction)
  statistic: str = option("logit", "Per-token statistic the Gaussians model.", choices=STATISTICS)
  offline: bool = option(False, "Score with the OUT Gaussian only (one-sided; class-wise variants only).")
  offline_shift: str = option("std", "Offline test direction: the same shift at every position (uniform) or one "
                              "OUT standard deviation per position (std: scale-free).", choices=OFFLINE_SHIFTS)
  fix_variance: bool = option(False, "LiRA's global variance pooled over canaries (univariate/independent).")
  balance_counts: bool = option(True, "Fit both classes on the same number of models (balanced leave-one-out).")
  var_floor: float = option(VAR_FLOOR, "Variances below this are raised to it (squared statistic units).", low=0,
                            low_open=True)
  backend: str = option("numpy", "Leave-one-out on the host (numpy, threads) or jitted on the local devices, "
                        "sharded over them (jax; on CPUs float64 scores with numpy, the faster there).",
                        choices=BACKENDS)
  precision: str = option("float64", "jax backend: float64 (CPU, GPU) or float32 (TPUs).", choices=PRECISIONS)

  def check_fields(self):
    if self.precision != "float64" and self.backend != "jax":
      raise InputError(f"precision={self.precision!r} is the jax backend's (for TPUs); the numpy backend runs in "
                       "float64")

  @classmethod
  def of(cls, scoring=None, **fields):
    """`scoring` (default Scoring()) with `fields` replaced: what every scorer does with its arguments."""
    return super().of(scoring, **fields)

  def variant(self, covariance, shared):
    """This scoring with another (covariance, shared) pair: one row of Table II."""
    return dataclasses.replace(self, covariance=covariance, shared=bool(shared))

  @property
  def key(self):
    """Command-line key of the variant: "univariate-classwise", ..., "oas-shared"."""
    return f"{self.covariance}-{'shared' if self.shared else 'classwise'}"

  @property
  def sign(self):
    """+1 if members have larger values of the statistic (logit), -1 if smaller (loss)."""
    return member_sign(self.statistic)

  def conflicts(self, scorer="leave_one_out"):
    """Why this combination cannot be scored by `scorer` ("leave_one_out" or "targets"): a list of reasons."""
    reasons = []
    if self.offline and self.shared:
      reasons.append("offline scoring fits the OUT models alone, so it has no shared IN/OUT covariance")
    if self.fix_variance and self.covariance == "oas":
      reasons.append("fix_variance (LiRA's global variance) applies to univariate and independent, not OAS")
    if scorer == "leave_one_out" and self.fix_variance and self.balance_counts:
      reasons.append("fix_variance pools one variance over all canaries, which balanced counts do not apply to; "
                     "pass balance_counts=False")
    return reasons

  def check(self, scorer="leave_one_out"):
    """Raise InputError if the combination cannot be scored."""
    reasons = self.conflicts(scorer)
    if reasons:
      raise InputError("; ".join(reasons))
    return self



def defaults():
  """{field: default} of Scoring, in field order."""
  return Scoring.defaults()


# Table II's rows: (name, covariance, shared).
VARIANTS = (
    ("Univariate Class-Wise", "univariate", False),
    ("Univariate Shared", "univariate", True),
    ("Independent Class-Wise", "independent", False),
    ("Independent Shared", "independent", True),
    ("OAS Class-Wise", "oas", False),
    ("OAS Shared", "oas", True),
)


def variant_key(variant):
  """Command-line key of a variant: "univariate-classwise", ..., "oas-shared"."""
  _, covariance, shared = variant
  return f"{covariance}-{'shared' if shared else 'classwise'}"


def _folded(name):
  # "oas_shared", "OAS-Shared", "OAS Shared" and "oas-shared" are one name; so are "Class-Wise" and "classwise".
  return "".join(ch for ch in str(name).lower() if ch not in " -_")


def select_variants(names=None):
  """Variants by key ("oas-shared", ...) or Table II name, case, "-", "_" and spaces ignored; None = all six."""
  if not names:
    return VARIANTS
  by_name = {_folded(n): v for v in VARIANTS for n in (variant_key(v), v[0])}
  out = []
  for name in names:
    variant = by_name.get(_folded(name))
    if variant is None:
      raise InputError(f"unknown variant {name!r}; choose from {', '.join(variant_key(v) for v in VARIANTS)}")
    if variant not in out:
      out.append(variant)
  return tuple(out)


def applicable_variants(variants, scoring, scorer="leave_one_out"):
  """Split variants into (kept, dropped) under `scoring`: offline has no shared variants, fix_variance no OAS.

  dropped is a list of (name, reason) so a report can say once which variants were left out and why.
  """
  kept, dropped = [], []
  for variant in variants:
    name, covariance, shared = variant
    reasons = [r for r in scoring.variant(covariance, shared).conflicts(scorer) if "balanced counts" not in r]
    if reasons:
      dropped.append((name, "; ".join(reasons)))
    else:
      kept.append(variant)
  return tuple(kept), dropped
