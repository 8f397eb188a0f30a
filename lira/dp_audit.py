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

one_run and clopper_pearson give the auditor's own number, from its public epsilon_one_run /
epsilon_clopper_pearson with the Bonferroni or Split threshold strategy. The public API returns only that number,
not the threshold it was taken at, the auditor's candidate thresholds or their counts; so this module rebuilds them
as the auditor does (its convex frontier of (FN, TN) counts over the distinct scores and inf, and the same
per-threshold search, Split's random halves included) and names the threshold the search picks. Each bound is
checked against the auditor's: the rebuilt search must reach the auditor's epsilon (bonferroni), and the auditor's
public Explicit strategy at the named threshold on the held-out half must give it again (split); otherwise a
RuntimeError (a jax-privacy whose search differs from 2.0.0's, which this was written against). gdp is
epsilon_from_gdp's computation on those rebuilt thresholds, one-sided: epsilon_from_gdp takes |mu|, counting a
negative mu as evidence in the reverse direction, but upper bounds on FPR and FNR do not bound the reverse test's
error rates (that needs lower bounds): on 100 IN and 100 OUT scores without any membership signal jax-privacy 2.0.0
returns epsilons of 4 to 12. Where the largest |mu| is positive the two agree. tests/lira/test_dp_audit.py checks
both against the public methods, and every number against values recorded from jax-privacy 2.0.0's private
per-threshold methods, which this module called before.
"""

import dataclasses

import dp_accounting
import jax_privacy
import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats
from jax_privacy import auditing

from lira.errors import InputError
from lira.options import Options, option

METHODS = ("one_run", "clopper_pearson", "gdp")
THRESHOLD_STRATEGIES = ("bonferroni", "split")


@dataclasses.dataclass(frozen=True)
class AuditOptions(Options):
  """How scores become an epsilon lower bound; invalid values raise InputError naming the field."""

  PUBLIC_NAME = "lira.dp_audit.AuditOptions"

  method: str = option("one_run", "The bound: one_run (Steinke et al. 2023), clopper_pearson or gdp (Gaussian "
                       "trade-off).", choices=METHODS)
  delta: float = option(1e-5, "The DP delta the epsilon lower bound is for.", low=0, high=1, low_open=True,
                        high_open=True)
  confidence: float = option(0.95, "Probability that the bound holds (1 - significance).", low=0, high=1,
                             low_open=True, high_open=True)
  threshold_strategy: str = option("bonferroni", "How the threshold is chosen: bonferroni (every threshold, "
                                   "significance / n) or split (chosen on half the scores, bounded on the other "
                                   "half); gdp always takes bonferroni.", choices=THRESHOLD_STRATEGIES)
  seed: int = option(0, "Seed of the split (threshold_strategy=split).", low=0, integer=True)

  def check_fields(self):
    low = 0.0 if self.method == "one_run" else 0.5  # the auditor's Clopper-Pearson bounds need significance < 0.5
    if not low < float(self.confidence) < 1.0:
      raise InputError(f"confidence must be in ({low:g}, 1) for method {self.method}, got {self.confidence!r}")
    if self.method == "gdp" and self.threshold_strategy != "bonferroni":
      raise InputError(f"threshold_strategy {self.threshold_strategy} does not apply to method gdp, which takes "
                       "the Bonferroni correction over every threshold; use bonferroni")

  @property
  def significance(self):
    return 1.0 - float(self.confidence)


def defaults():
  """{field: default} of AuditOptions, in field order."""
  return AuditOptions.defaults()


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
  frontier = _Frontier(in_scores, out_scores)
  mu = None
  if options.method == "gdp":
    epsilon, threshold, mu = _gdp_bound(frontier, options.significance, options.delta)
    used_in, used_out = in_scores, out_scores
  else:
    epsilon, used_in, used_out, threshold = _strategy_bound(frontier, in_scores, out_scores, options)
  tp, fp = int(np.sum(used_in >= threshold)), int(np.sum(used_out >= threshold))
  return Bound(epsilon=float(epsilon), method=options.method, threshold_strategy=options.threshold_strategy,
               delta=float(options.delta), confidence=float(options.confidence), n_in=in_scores.size,
               n_out=out_scores.size, bound_in=used_in.size, bound_out=used_out.size,
               n_thresholds=len(frontier.thresholds), threshold=float(threshold), tp=tp, fp=fp,
               tpr=tp / used_in.size, fpr=fp / used_out.size, mu=mu)


# What jax-privacy's public API does not give, rebuilt here: CanaryScoreAuditor's public methods return an epsilon
# alone, while a Bound also names the threshold it was taken at (and n_thresholds, gdp's mu). The code below follows
# jax-privacy 2.0.0's auditing.py step for step (same numpy and scipy calls in the same order, so the same floats):
# _get_tn_fn_counts and _pareto_frontier (the candidate thresholds), _clopper_pearson_upper, _one_run_p_value and
# _epsilon_one_run (the one-run bound at one threshold, warm-started at the best so far),
# CanaryScoreAuditor._epsilon_one_run_all_thresholds / _epsilon_clopper_pearson_all_thresholds (the search over
# thresholds) and _random_partition (Split's halves). The epsilon reported is still the auditor's, from its public
# method; _strategy_bound checks the rebuilt choice against it.


def _pareto_frontier(points):
  """Indices of the (N, 2) points, sorted by x, not weakly below the segment of any outer pair (jax-privacy's)."""
  indices = np.arange(points.shape[0])
  while len(indices) > 2:
    diff = np.diff(points[indices], axis=0)
    dominated_mask = diff[:-1, 1] * diff[1:, 0] - diff[1:, 1] * diff[:-1, 0] <= 0
    if not np.any(dominated_mask):
      break
    indices = indices[np.r_[True, ~dominated_mask, True]]
  return indices


class _Frontier:
  """The auditor's candidate thresholds of IN and OUT scores and the FN and TN counts below each (ascending).

  Every distinct score and inf, kept where (FN, TN) lies on the convex frontier: CanaryScoreAuditor's
  _thresholds, _fn_counts and _tn_counts, which its public API does not expose.
  """

  def __init__(self, in_scores, out_scores):
    thresholds = np.concatenate((np.union1d(in_scores, out_scores), [np.inf]))
    fn_counts = np.searchsorted(np.sort(in_scores), thresholds, side="left")
    tn_counts = np.searchsorted(np.sort(out_scores), thresholds, side="left")
    indices = _pareto_frontier(np.stack([fn_counts, tn_counts], axis=1))
    self.thresholds, self.tn_counts, self.fn_counts = thresholds[indices], tn_counts[indices], fn_counts[indices]


def _clopper_pearson_upper(k, n, significance):
  """One-sided Clopper-Pearson upper bound on a rate from k of n at `significance` (1 where k = n)."""
  return np.where(k < n, scipy.stats.beta.ppf(1 - significance, k + 1, n - k), 1.0)


def _one_run_p_value(m, n_guess, n_correct, eps, delta):
  """Steinke et al.'s p-value of n_correct right of n_guess guesses among m canaries under (eps, delta)-DP."""
  q = scipy.special.expit(eps)
  beta = scipy.stats.binom.sf(n_correct - 1, n_guess, q)
  if delta == 0:
    return beta
  i_vals = np.arange(1, n_correct + 1)
  cum_sums = scipy.stats.binom.sf(n_correct - i_vals - 1, n_guess, q) - beta
  alpha = np.max(cum_sums / i_vals, initial=0)
  return min(beta + alpha * delta * 2 * m, 1)


def _epsilon_one_run(eps_lo, m, n_guess, n_correct, significance, delta):
  """The largest epsilon >= eps_lo whose claim the counts reject at `significance` (eps_lo if none)."""
  if _one_run_p_value(m, n_guess, n_correct, eps_lo, 0) > significance:
    return eps_lo

  def audit_objective(eps):
    return significance - _one_run_p_value(m, n_guess, n_correct, eps, delta)

  if audit_objective(eps_lo) <= 0:
    return eps_lo
  eps_hi = max(1.0, 2 * eps_lo)
  while audit_objective(eps_hi) > 0:
    eps_lo, eps_hi = eps_hi, eps_hi * 2
  return scipy.optimize.brentq(audit_objective, eps_lo, eps_hi, xtol=1e-6)


def _one_run_search(frontier, significance, delta):
  """(epsilon, threshold) of the one-run bound over every candidate threshold, as the auditor searches them: by
  decreasing lower bound on precision, skipping a threshold whose raw precision cannot beat the best so far."""
  n_pos, n_neg = frontier.fn_counts[-1], frontier.tn_counts[-1]
  m = n_pos + n_neg
  tp_counts, fp_counts = n_pos - frontier.fn_counts, n_neg - frontier.tn_counts
  total_counts = tp_counts + fp_counts
  prec_lbs = 1.0 - _clopper_pearson_upper(fp_counts, total_counts, significance)
  best_eps, best_idx, best_q = 0, -1, 0.5
  for idx in np.argsort(-prec_lbs):
    n_guess, n_correct = total_counts[idx], tp_counts[idx]
    if n_guess == 0 or n_correct / n_guess <= best_q:
      continue
    new_eps = _epsilon_one_run(best_eps, m, n_guess, n_correct, significance, delta)
    if new_eps > best_eps:
      best_eps, best_idx, best_q = new_eps, idx, scipy.special.expit(new_eps)
  return best_eps, frontier.thresholds[best_idx]


def _clopper_pearson_search(frontier, significance, delta):
  """(epsilon, threshold) of the largest one-sided Clopper-Pearson bound over the candidate thresholds (its
  threshold even where the bound is clipped to 0; inf where no TPR bound exceeds delta)."""
  n_pos, n_neg = frontier.fn_counts[-1], frontier.tn_counts[-1]
  tpr_lbs = 1 - _clopper_pearson_upper(frontier.fn_counts, n_pos, significance / 2)
  fpr_ubs = _clopper_pearson_upper(n_neg - frontier.tn_counts, n_neg, significance / 2)
  valid = np.flatnonzero(tpr_lbs > delta)
  if valid.size == 0:
    return 0.0, frontier.thresholds[-1]
  eps_vals = np.log(tpr_lbs[valid] - delta) - np.log(fpr_ubs[valid])
  subidx = np.argmax(eps_vals)
  return max(0.0, eps_vals[subidx]), frontier.thresholds[valid[subidx]]


_SEARCH = {"one_run": _one_run_search, "clopper_pearson": _clopper_pearson_search}
# How far the rebuilt search may land from the auditor's epsilon: the xtol of the auditor's brentq for one_run (the
# two agree exactly with jax-privacy 2.0.0; this leaves room for a release that changes its root finding only).
_AGREE_TOL = 1e-6


def _public_epsilon(auditor, options, strategy):
  """The auditor's own epsilon through its public API."""
  method = auditor.epsilon_one_run if options.method == "one_run" else auditor.epsilon_clopper_pearson
  return method(options.significance, options.delta, threshold_strategy=strategy)


def _random_partition(scores, rng, frac):
  """jax-privacy's Split halves: a permutation by `rng`, the first int(n * frac) of it, then the rest."""
  perm = rng.permutation(len(scores))
  split_idx = int(len(scores) * frac)
  return scores[perm[:split_idx]], scores[perm[split_idx:]]


def _strategy_bound(frontier, in_scores, out_scores, options):
  """(epsilon, IN and OUT scores it was computed on, threshold) of one_run or clopper_pearson.

  The epsilon is the auditor's public epsilon_one_run / epsilon_clopper_pearson. The threshold is the rebuilt
  search's: over every candidate at significance / n (bonferroni), or over those of the first random half at the
  significance, the bound then taken on the second half (split).
  """
  search, auditor = _SEARCH[options.method], auditing.CanaryScoreAuditor(in_scores, out_scores)
  if options.threshold_strategy == "bonferroni":
    epsilon = _public_epsilon(auditor, options, auditing.Bonferroni())
    rebuilt, threshold = search(frontier, options.significance / len(frontier.thresholds), options.delta)
    used_in, used_out = in_scores, out_scores
  else:
    split = auditing.Split(seed=int(options.seed))
    epsilon = _public_epsilon(auditor, options, split)
    rng = np.random.default_rng(split.seed)
    choose_in, used_in = _random_partition(in_scores, rng, split.threshold_estimation_frac)
    choose_out, used_out = _random_partition(out_scores, rng, split.threshold_estimation_frac)
    _, threshold = search(_Frontier(choose_in, choose_out), options.significance, options.delta)
    held_out = auditing.CanaryScoreAuditor(used_in, used_out)
    rebuilt = _public_epsilon(held_out, options, auditing.Explicit(float(threshold)))
  if not abs(rebuilt - epsilon) <= _AGREE_TOL:
    raise RuntimeError(f"jax-privacy {getattr(jax_privacy, '__version__', '?')}'s {options.method} bound "
                       f"({options.threshold_strategy}) is {epsilon!r}, but lira.dp_audit's rebuilt threshold search "
                       f"gives {rebuilt!r}: the auditor chooses thresholds differently from jax-privacy 2.0.0, so the "
                       "threshold the bound was taken at cannot be named")
  return epsilon, used_in, used_out, threshold


def _gdp_bound(frontier, significance, delta):
  """(epsilon, threshold, mu) of gdp: epsilon_from_gdp's Clopper-Pearson bounds at each of the auditor's thresholds,
  one-sided (the threshold with the largest mu; nan when no threshold has both bounds below 1 - delta)."""
  fn_G, tn_G = frontier.fn_counts, frontier.tn_counts
  n_pos, n_neg, alpha = fn_G[-1], tn_G[-1], significance / (2 * len(fn_G))
  fnr_hi_G = _clopper_pearson_upper(fn_G, n_pos, alpha)
  fpr_hi_G = _clopper_pearson_upper(n_neg - tn_G, n_neg, alpha)
  ok_G = np.maximum(fpr_hi_G, fnr_hi_G) < 1 - delta  # as epsilon_from_gdp: a rate bound near 1 says nothing
  if not ok_G.any():
    return 0.0, float("nan"), 0.0
  mu_G = np.where(ok_G, scipy.stats.norm.isf(fpr_hi_G) - scipy.stats.norm.ppf(fnr_hi_G), -np.inf)
  g = int(np.argmax(mu_G))
  mu = float(mu_G[g])
  epsilon = float(dp_accounting.get_epsilon_gaussian(1.0 / mu, delta)) if mu > 0 else 0.0
  return epsilon, float(frontier.thresholds[g]), max(mu, 0.0)


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
