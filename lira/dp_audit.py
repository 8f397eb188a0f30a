"""Empirical epsilon lower bounds from membership scores, by jax-privacy's auditor (jax_privacy.auditing).

The scores of the IN canaries (members) and of the OUT canaries (non-members), higher = member, go to
`CanaryScoreAuditor(in_scores, out_scores)`. A threshold t guesses IN for every score >= t; at t it has TP IN and FP
OUT scores above it, TPR = TP / n_in and FPR = FP / n_out. With significance a = 1 - confidence:

- one_run (Steinke, Nasr and Jagielski 2023, arXiv 2305.08846): the m = n_in + n_out canaries are each IN
  independently with probability 1/2 in one training run. Of the r = TP + FP guesses, v = TP are right; under
  (eps, delta)-DP, P[v or more right] <= P[Binomial(r, e^eps / (1 + e^eps)) >= v] + (a term in 2 m delta). The bound
  is the largest eps whose p-value is <= a: the delta term grows with m, so at a fixed delta more canaries can
  lower it.
- clopper_pearson (Jagielski, Ullman and Oprea 2020; Nasr et al. 2021): each score an independent trial;
  eps >= ln((TPR_lo - delta) / FPR_hi), TPR_lo and FPR_hi one-sided Clopper-Pearson bounds at a / 2 each.
- gdp (Nasr et al. 2023, arXiv 2302.07956): the trade-off curve is taken to be Gaussian (mu-GDP, as DP-SGD's nearly
  is); mu >= Phi^-1(1 - FPR_hi) - Phi^-1(FNR_hi) with Clopper-Pearson bounds at a / (2 n) over the auditor's n
  thresholds, the largest over thresholds (0 if none is positive), then eps from mu by delta(eps) =
  Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth and Su 2019, Cor. 2.13; dp_accounting's analytic
  Gaussian epsilon at sigma = 1/mu).

Thresholds (one_run, clopper_pearson): bonferroni tries each of the auditor's n thresholds at a / n and keeps the
largest bound; split chooses the threshold on a random half of each class and bounds on the other half at a.

one_run and clopper_pearson give the auditor's own number. The threshold it was taken at is read where the auditor
picks it: jax-privacy 2.0.0 (pinned in pyproject.toml) returns it only from its private per-threshold methods, which
this module calls through the same strategy code the public methods run. gdp is the auditor's epsilon_from_gdp on
the auditor's thresholds and Clopper-Pearson bounds, one-sided: epsilon_from_gdp takes |mu|, counting a negative mu
as evidence in the reverse direction, but upper bounds on FPR and FNR do not bound the reverse test's error rates
(that needs lower bounds): on 100 IN and 100 OUT scores without any membership signal it returns epsilons of
4 to 12. Where the largest |mu| is positive the two agree. tests/lira/test_dp_audit.py checks both against the
public methods.
"""

import dataclasses

import dp_accounting
import numpy as np
import scipy.stats
from jax_privacy import auditing

from lira.errors import InputError

METHODS = ("one_run", "clopper_pearson", "gdp")
THRESHOLD_STRATEGIES = ("bonferroni", "split")
_PER_THRESHOLD = {"one_run": auditing.CanaryScoreAuditor._epsilon_one_run_all_thresholds,
                  "clopper_pearson": auditing.CanaryScoreAuditor._epsilon_clopper_pearson_all_thresholds}


def _option(default, help, choices=None):
  return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass(frozen=True)
class AuditOptions:
  """How scores become an epsilon lower bound; invalid values raise InputError naming the field."""

  method: str = _option("one_run", "The bound: one_run (Steinke et al. 2023), clopper_pearson or gdp (Gaussian "
                        "trade-off).", METHODS)
  delta: float = _option(1e-5, "The DP delta the epsilon lower bound is for.")
  confidence: float = _option(0.95, "Probability that the bound holds (1 - significance).")
  threshold_strategy: str = _option("bonferroni", "How the threshold is chosen: bonferroni (every threshold, "
                                    "significance / n) or split (chosen on half the scores, bounded on the other "
                                    "half); gdp always takes bonferroni.", THRESHOLD_STRATEGIES)
  seed: int = _option(0, "Seed of the split (threshold_strategy=split).")

  def __post_init__(self):
    for field in dataclasses.fields(self):
      choices = field.metadata["choices"]
      if choices is not None and getattr(self, field.name) not in choices:
        raise InputError(f"{field.name} must be one of {', '.join(choices)}, got {getattr(self, field.name)!r}")
    if not 0.0 < float(self.delta) < 1.0:
      raise InputError(f"delta must be in (0, 1), got {self.delta!r}")
    low = 0.0 if self.method == "one_run" else 0.5  # the auditor's Clopper-Pearson bounds need significance < 0.5
    if not low < float(self.confidence) < 1.0:
      raise InputError(f"confidence must be in ({low:g}, 1) for method {self.method}, got {self.confidence!r}")
    if self.method == "gdp" and self.threshold_strategy != "bonferroni":
      raise InputError(f"threshold_strategy {self.threshold_strategy} does not apply to method gdp, which takes "
                       "the Bonferroni correction over every threshold; use bonferroni")
    if int(self.seed) != self.seed or self.seed < 0:
      raise InputError(f"seed must be an integer >= 0, got {self.seed!r}")

  @classmethod
  def of(cls, options=None, **fields):
    """`options` (default AuditOptions()) with `fields` replaced."""
    base = cls() if options is None else options
    if not isinstance(base, cls):
      raise InputError(f"options must be a lira.dp_audit.AuditOptions, got {type(base).__name__}")
    return dataclasses.replace(base, **fields) if fields else base

  @property
  def significance(self):
    return 1.0 - float(self.confidence)


def defaults():
  """{field: default} of AuditOptions, in field order."""
  return {f.name: f.default for f in dataclasses.fields(AuditOptions)}


@dataclasses.dataclass(frozen=True)
class Bound:
  """One epsilon lower bound, its settings, and the realised rates at the threshold it was taken at.

  n_in / n_out count all scores given; bound_in / bound_out those the bound was computed on (split: the held-out
  half). tp, fp, tpr, fpr are at `threshold` on those scores (threshold inf: no guess; NaN: gdp found no threshold
  with both bounds below 1 - delta). mu is gdp's lower bound on the Gaussian mu (None for the other methods).
  """
  epsilon: float
  method: str
  threshold_strategy: str
  delta: float
  confidence: float
  n_in: int
  n_out: int
  bound_in: int
  bound_out: int
  n_thresholds: int
  threshold: float
  tp: int
  fp: int
  tpr: float
  fpr: float
  mu: float | None = None

  def as_dict(self):
    return dataclasses.asdict(self)


def _scores(name, scores):
  """1-D float64 finite scores; InputError naming `name` otherwise."""
  scores = np.asarray(scores, dtype=np.float64)
  if scores.ndim != 1:
    raise InputError(f"{name} must be a 1-D array of scores, got shape {list(scores.shape)}")
  if scores.size == 0:
    raise InputError(f"{name} is empty: the bound needs at least one IN and one OUT score")
  bad = ~np.isfinite(scores)
  if bad.any():
    raise InputError(f"{name} holds {int(bad.sum())} non-finite score(s) (first at index {int(np.argmax(bad))})")
  return scores


def epsilon_bound(in_scores, out_scores, options=None, **fields):
  """The auditor's epsilon lower bound for IN and OUT scores (higher = member) under `options`, as a Bound."""
  options = AuditOptions.of(options, **fields)
  in_scores, out_scores = _scores("in_scores", in_scores), _scores("out_scores", out_scores)
  auditor = auditing.CanaryScoreAuditor(in_scores, out_scores)
  n_thresholds = len(auditor._thresholds)
  mu = None
  if options.method == "gdp":
    epsilon, threshold, mu = _gdp_bound(auditor, options.significance, options.delta)
    used_in, used_out = in_scores, out_scores
  else:
    epsilon, used_in, used_out, threshold = _strategy_bound(auditor, options)
  tp, fp = int(np.sum(used_in >= threshold)), int(np.sum(used_out >= threshold))
  return Bound(epsilon=float(epsilon), method=options.method, threshold_strategy=options.threshold_strategy,
               delta=float(options.delta), confidence=float(options.confidence), n_in=in_scores.size,
               n_out=out_scores.size, bound_in=used_in.size, bound_out=used_out.size, n_thresholds=n_thresholds,
               threshold=float(threshold), tp=tp, fp=fp, tpr=tp / used_in.size, fpr=fp / used_out.size, mu=mu)


def _strategy_bound(auditor, options):
  """(epsilon, IN and OUT scores it was computed on, threshold) of one_run or clopper_pearson.

  The auditor's strategy code (as the public epsilon_one_run / epsilon_clopper_pearson run it) calls the
  per-threshold method once (bonferroni), or twice (split: choose on one half, bound on the other); the last call
  is the one whose epsilon is returned, and it names the threshold.
  """
  per_threshold, calls = _PER_THRESHOLD[options.method], []

  def recorded(aud, significance, delta, one_sided, threshold):
    epsilon, chosen = per_threshold(aud, significance, delta, one_sided, threshold)
    calls.append((aud, chosen))
    return epsilon, chosen

  strategy = (auditing.Bonferroni() if options.threshold_strategy == "bonferroni"
              else auditing.Split(seed=int(options.seed)))
  epsilon = auditor._audit_with_threshold_strategy(strategy, recorded, options.significance, options.delta, True)
  aud, threshold = calls[-1]
  return epsilon, aud._in_canary_scores, aud._out_canary_scores, threshold


def _gdp_bound(auditor, significance, delta):
  """(epsilon, threshold, mu) of gdp: epsilon_from_gdp's Clopper-Pearson bounds at each of the auditor's thresholds,
  one-sided (the threshold with the largest mu; nan when no threshold has both bounds below 1 - delta)."""
  fn_G, tn_G = auditor._fn_counts, auditor._tn_counts
  n_pos, n_neg, alpha = fn_G[-1], tn_G[-1], significance / (2 * len(fn_G))
  fnr_hi_G = auditing._clopper_pearson_upper(fn_G, n_pos, alpha)
  fpr_hi_G = auditing._clopper_pearson_upper(n_neg - tn_G, n_neg, alpha)
  ok_G = np.maximum(fpr_hi_G, fnr_hi_G) < 1 - delta  # as epsilon_from_gdp: a rate bound near 1 says nothing
  if not ok_G.any():
    return 0.0, float("nan"), 0.0
  mu_G = np.where(ok_G, scipy.stats.norm.isf(fpr_hi_G) - scipy.stats.norm.ppf(fnr_hi_G), -np.inf)
  g = int(np.argmax(mu_G))
  mu = float(mu_G[g])
  epsilon = float(dp_accounting.get_epsilon_gaussian(1.0 / mu, delta)) if mu > 0 else 0.0
  return epsilon, float(auditor._thresholds[g]), max(mu, 0.0)


def _check_pairs(llr_MxN, keep_MxN):
  llr_MxN, keep_MxN = np.asarray(llr_MxN, dtype=np.float64), np.asarray(keep_MxN)
  if llr_MxN.ndim != 2:
    raise InputError(f"scores must be shaped [M, N], got {list(llr_MxN.shape)}")
  if keep_MxN.shape != llr_MxN.shape or keep_MxN.dtype != bool:
    raise InputError(f"keep must be bool [M, N] = {list(llr_MxN.shape)}, got {keep_MxN.dtype} {list(keep_MxN.shape)}")
  return llr_MxN, keep_MxN


def model_bounds(llr_MxN, keep_MxN, options=None, **fields):
  """One Bound per model m as the audited one: IN = llr[m, keep[m]], OUT = llr[m, ~keep[m]]."""
  options = AuditOptions.of(options, **fields)
  llr_MxN, keep_MxN = _check_pairs(llr_MxN, keep_MxN)
  for m, keep_N in enumerate(keep_MxN):
    if keep_N.all() or not keep_N.any():
      raise InputError(f"keep row of model {m} has {'no OUT' if keep_N.all() else 'no IN'} canary: the bound needs "
                       "both")
  return [epsilon_bound(llr_N[keep_N], llr_N[~keep_N], options) for llr_N, keep_N in zip(llr_MxN, keep_MxN)]


def pooled_bound(llr_MxN, keep_MxN, options=None, **fields):
  """One Bound from every (model, canary) pair: IN = llr[keep], OUT = llr[~keep]."""
  options = AuditOptions.of(options, **fields)
  llr_MxN, keep_MxN = _check_pairs(llr_MxN, keep_MxN)
  if keep_MxN.all() or not keep_MxN.any():
    raise InputError(f"keep has {'no OUT' if keep_MxN.all() else 'no IN'} pair: the bound needs both")
  return epsilon_bound(llr_MxN[keep_MxN], llr_MxN[~keep_MxN], options)


def model_summary(bounds):
  """{median, max, argmax} of the per-model epsilons (argmax: the model with the largest)."""
  eps_M = np.array([b.epsilon for b in bounds], dtype=np.float64)
  return {"median": float(np.median(eps_M)), "max": float(eps_M.max()), "argmax": int(np.argmax(eps_M))}
