"""Which records leak: per-canary leakage with exact intervals, thresholds fixed on shadow models, precision at a
membership prior, and whether the same canaries leak again (docs/per_sample.md).

Leave-one-out makes every model a target replica: canary n's IN models are its member trials, its OUT models its
non-member trials. Every function reads leave-one-out scores score_MxN (higher = member; NaN = an undefined pair,
left out) and keep_MxN, and works in float64.

Thresholds without an oracle. The M models are dealt into K folds (model_folds); the threshold for the models of fold
k at a target FPR alpha is set from the OUT scores of the other folds' models only, and applied to fold k's models:
every model is held out once, and the pooled decisions say whether the threshold holds its FPR on models it was not
fitted on. A threshold t calls a pair a member when its score is > t; t is the (k + 1)-th largest calibration OUT
score with k = floor(alpha x n), so at most k of the n calibration OUT scores lie above it (ties: fewer). `global`
sets one threshold over all calibration (model, canary) OUT pairs; `per_canary` one per canary from that canary's
calibration OUT scores alone (LiRA's own per-example calibration), undefined for a canary without one.

Per canary, at the calibrated global threshold: TPR = its IN pairs above the threshold / its decided IN pairs, with a
Clopper-Pearson interval; the OUT pairs above it; and `vulnerable`, the canaries whose interval's lower bound exceeds
the threshold's held-out FPR by a stated margin.
"""

import dataclasses
import math

import numpy as np

from lira import metrics
from lira.errors import InputError
from lira.options import Options, check_number, option

KINDS = ("global", "per_canary")
LEVEL = 0.95  # of the Clopper-Pearson intervals, as the bootstrap's
_EPS = 1e-9  # floor(alpha x n) of a product that is an integer up to rounding


def _numbers(name, low, high, low_open, high_open):
  def normal(value):
    if isinstance(value, str):
      value = [v for v in value.split(",") if v.strip()]
    values = [value] if isinstance(value, (int, float)) else list(value)
    if not values:
      raise InputError(f"{name} must hold at least one number")
    out = []
    for v in values:
      try:
        v = float(v)
      except (TypeError, ValueError):
        raise InputError(f"{name} must hold numbers, got {v!r}") from None
      out.append(float(check_number(name, v, low, high, low_open, high_open)))
    return tuple(dict.fromkeys(out))
  return normal


@dataclasses.dataclass(frozen=True)
class PerSampleOptions(Options):
  """The settings of a per-sample audit (experiments/per_sample.py; its flags are generated from these fields)."""

  PUBLIC_NAME = "lira.per_canary.PerSampleOptions"

  fprs: tuple = option((0.01, 0.001), "Target FPRs of the thresholds calibrated on shadow models (comma-separated).",
                       normal=_numbers("fprs", 0, 1, True, True))
  folds: int = option(2, "K: the models dealt into K folds; each fold's threshold is set on the other folds' models "
                      "(2: a calibration half and a held-out half, rotated).", low=2, integer=True)
  margin: float = option(0.1, "A canary is vulnerable when the lower bound of its TPR's exact interval exceeds the "
                         "global threshold's held-out FPR by this margin.", low=0, high=1, high_open=True)
  priors: tuple = option((0.5, 0.1, 0.01, 0.001), "Membership priors pi of the precision (PPV) of a positive "
                         "(comma-separated).", normal=_numbers("priors", 0, 1, True, True))
  n_boot: int = option(metrics.N_BOOT, "Bootstrap replicates over canaries for the intervals of TPR, FPR and PPV "
                       "(0 = none).", low=0, integer=True)
  seed: int = option(0, "Seed of the folds, the split halves and the bootstrap.", low=0, integer=True)
  min_models: int = option(4, "The split halves: the fewest IN and OUT models a canary must have in each half.",
                           low=2, integer=True)

  def check_fields(self):
    if self.folds > 64:
      raise InputError(f"folds={self.folds}: at most 64 folds")


# ---- per canary: AUC and exact intervals ----

def pair_counts(score_MxN, keep_MxN):
  """(valid_MxN, n_in_N, n_out_N): the finite scores, and each canary's IN and OUT pairs among them."""
  score_MxN, keep_MxN = _checked(score_MxN, keep_MxN)
  valid_MxN = np.isfinite(score_MxN)
  return valid_MxN, (valid_MxN & keep_MxN).sum(axis=0), (valid_MxN & ~keep_MxN).sum(axis=0)


def per_canary_auc(score_MxN, keep_MxN):
  """auc_N: each canary's AUC of its IN scores against its OUT scores (the Mann-Whitney statistic, a tie counted one
  half, as sklearn's roc_auc_score); NaN for a canary without a valid IN or OUT pair."""
  score_MxN, keep_MxN = _checked(score_MxN, keep_MxN)
  valid_MxN, n_in_N, n_out_N = pair_counts(score_MxN, keep_MxN)
  rank_MxN = _column_ranks(np.where(valid_MxN, score_MxN, np.inf))  # invalid pairs rank last, after every valid one
  u_N = np.where(valid_MxN & keep_MxN, rank_MxN, 0.0).sum(axis=0) - n_in_N * (n_in_N + 1) / 2.0
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where((n_in_N > 0) & (n_out_N > 0), u_N / (n_in_N * n_out_N), np.nan)


def _column_ranks(x_MxN):
  """Ranks 1..M within each column, tied values given their mean rank (scipy.stats.rankdata's "average"): one
  argsort, and rankdata only for the columns that hold a tie."""
  from scipy import stats
  M, N = x_MxN.shape
  order_MxN = np.argsort(x_MxN, axis=0, kind="stable")
  rank_MxN = np.empty((M, N))
  np.put_along_axis(rank_MxN, order_MxN, np.arange(1.0, M + 1)[:, None], axis=0)
  sorted_MxN = np.take_along_axis(x_MxN, order_MxN, axis=0)
  tied_N = (sorted_MxN[1:] == sorted_MxN[:-1]).any(axis=0)
  if tied_N.any():
    rank_MxN[:, tied_N] = stats.rankdata(x_MxN[:, tied_N], axis=0)
  return rank_MxN


def clopper_pearson(k, n, level=LEVEL):
  """(low, high): the exact binomial (Clopper-Pearson) interval of k successes in n trials, elementwise, as
  scipy.stats.binomtest(k, n).proportion_ci(level, method="exact"); NaN where n = 0."""
  from scipy import stats
  k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
  a = (1.0 - level) / 2.0
  with np.errstate(invalid="ignore", divide="ignore"):
    low = np.where(k > 0, stats.beta.ppf(a, k, n - k + 1), 0.0)
    high = np.where(k < n, stats.beta.ppf(1.0 - a, k + 1, n - k), 1.0)
  low, high = np.where(n > 0, low, np.nan), np.where(n > 0, high, np.nan)
  return low, high


# ---- thresholds fixed on shadow models ----

def model_folds(num_models, folds, seed=0):
  """fold_M: each model's fold, the M models dealt at random into `folds` folds of sizes differing by at most one."""
  if not 2 <= folds <= num_models:
    raise InputError(f"{folds} folds need at least {folds} models, got M = {num_models}")
  fold_M = np.empty(num_models, np.int64)
  fold_M[np.random.default_rng([seed, 62]).permutation(num_models)] = np.arange(num_models) % folds
  return fold_M


def top_count(n, fpr):
  """k = floor(fpr x n): how many of n OUT scores a threshold at FPR fpr may leave above it."""
  return np.floor(np.asarray(fpr, np.float64) * np.asarray(n, np.float64) + _EPS).astype(np.int64)


def global_threshold(out_scores, fpr):
  """(threshold, n): the (k + 1)-th largest of the n OUT scores (k = top_count), at most k of them above it; NaN
  without OUT scores."""
  out = np.asarray(out_scores, np.float64).ravel()
  if out.size == 0:
    return float("nan"), 0
  k = int(top_count(out.size, fpr))
  return float(-np.partition(-out, k)[k]), int(out.size)


def per_canary_thresholds(score_MxN, negative_MxN, fpr):
  """(threshold_N, n_N): for each canary the (k + 1)-th largest of its n OUT scores (those where negative_MxN),
  k = top_count(n, fpr); NaN for a canary without one."""
  n_N = negative_MxN.sum(axis=0)
  desc_MxN = -np.sort(-np.where(negative_MxN, score_MxN, -np.inf), axis=0)
  k_N = np.minimum(top_count(n_N, fpr), score_MxN.shape[0] - 1)
  threshold_N = desc_MxN[k_N, np.arange(score_MxN.shape[1])]
  return np.where(n_N > 0, threshold_N, np.nan), n_N


def calibrate(score_MxN, keep_MxN, fold_M, fpr, kind="global"):
  """Thresholds at `fpr` set for each fold on the other folds' OUT scores and applied to its models.

  Returns {threshold_K (global) or threshold_KxN (per_canary), n_calibration_K(xN): the OUT pairs behind each,
  decided_MxN: the pairs a threshold decides (valid, threshold defined), positive_MxN: score > its fold's threshold}.
  """
  if kind not in KINDS:
    raise InputError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
  score_MxN, keep_MxN = _checked(score_MxN, keep_MxN)
  fold_M = np.asarray(fold_M)
  valid_MxN = np.isfinite(score_MxN)
  K = int(fold_M.max()) + 1
  thresholds, counts = [], []
  threshold_MxN = np.empty(score_MxN.shape)
  for k in range(K):
    calibration_MxN = valid_MxN & ~keep_MxN & (fold_M != k)[:, None]
    if kind == "global":
      t, n = global_threshold(score_MxN[calibration_MxN], fpr)
      threshold_MxN[fold_M == k] = t
    else:
      t, n = per_canary_thresholds(score_MxN, calibration_MxN, fpr)
      threshold_MxN[fold_M == k] = t[None, :]
    thresholds.append(t)
    counts.append(n)
  decided_MxN = valid_MxN & ~np.isnan(threshold_MxN)
  with np.errstate(invalid="ignore"):
    positive_MxN = decided_MxN & (score_MxN > threshold_MxN)
  return {"threshold": np.asarray(thresholds, np.float64), "n_calibration": np.asarray(counts, np.int64),
          "decided_MxN": decided_MxN, "positive_MxN": positive_MxN}


def oracle_points(score_MxN, keep_MxN, fprs):
  """[(threshold, realised fpr, tpr, n_negatives) per fpr]: the pooled ROC's points that evaluate reads, the largest
  TPR at FPR <= fpr over every pair (lira.metrics.tpr_at_fpr). That point's threshold is the global threshold of all
  the OUT pairs (no folds): lowering it further would pass the OUT score it sits on, and the FPR with it."""
  score_MxN, keep_MxN = _checked(score_MxN, keep_MxN)
  valid_MxN = np.isfinite(score_MxN)
  out_P, in_P = score_MxN[valid_MxN & ~keep_MxN], score_MxN[valid_MxN & keep_MxN]
  out = []
  for fpr in fprs:
    threshold, n_neg = global_threshold(out_P, fpr)
    out.append((threshold, float(np.count_nonzero(out_P > threshold) / n_neg),
                float(np.count_nonzero(in_P > threshold) / in_P.size), n_neg))
  return out


# ---- operating points: rates, intervals, precision ----

def ppv(tpr, fpr, prior):
  """Precision of a positive at membership prior pi: pi TPR / (pi TPR + (1 - pi) FPR); NaN where TPR = FPR = 0."""
  tpr, fpr = np.asarray(tpr, np.float64), np.asarray(fpr, np.float64)
  num, den = prior * tpr, prior * tpr + (1.0 - prior) * fpr
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def canary_counts(positive_MxN, decided_MxN, keep_MxN):
  """{hits_N, n_in_N, false_N, n_out_N}: per canary its IN pairs called members, its decided IN pairs, its OUT pairs
  called members and its decided OUT pairs."""
  keep_MxN = np.asarray(keep_MxN, bool)
  return {"hits_N": (positive_MxN & keep_MxN).sum(axis=0), "n_in_N": (decided_MxN & keep_MxN).sum(axis=0),
          "false_N": (positive_MxN & ~keep_MxN).sum(axis=0), "n_out_N": (decided_MxN & ~keep_MxN).sum(axis=0)}


def operating_point(counts, priors, n_boot=metrics.N_BOOT, seed=0, level=LEVEL):
  """The pooled rates of per-canary counts (canary_counts): tpr and fpr with their pairs, Clopper-Pearson intervals
  over the pairs, and bootstrap intervals over canaries (lira.metrics.bootstrap_weights: evaluate's replicates, the
  thresholds held fixed) of tpr, fpr and the PPV at each prior."""
  tp, n_pos = int(counts["hits_N"].sum()), int(counts["n_in_N"].sum())
  fp, n_neg = int(counts["false_N"].sum()), int(counts["n_out_N"].sum())
  tpr = tp / n_pos if n_pos else float("nan")
  fpr = fp / n_neg if n_neg else float("nan")
  out = {"tpr": tpr, "tp": tp, "n_pos": n_pos, "tpr_ci_exact": _floats(clopper_pearson(tp, n_pos, level)),
         "fpr": fpr, "fp": fp, "n_neg": n_neg, "fpr_ci_exact": _floats(clopper_pearson(fp, n_neg, level)),
         "ppv": {metrics.fpr_key(p): _float(ppv(tpr, fpr, p)) for p in priors}}
  if n_boot:
    w_BxN = metrics.bootstrap_weights(counts["hits_N"].size, n_boot, seed).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
      tpr_B = (w_BxN @ counts["hits_N"]) / (w_BxN @ counts["n_in_N"])
      fpr_B = (w_BxN @ counts["false_N"]) / (w_BxN @ counts["n_out_N"])
    out["tpr_ci_boot"] = _floats(metrics._percentile_ci(tpr_B, level))
    out["fpr_ci_boot"] = _floats(metrics._percentile_ci(fpr_B, level))
    out["ppv_ci_boot"] = {metrics.fpr_key(p): _floats(metrics._percentile_ci(ppv(tpr_B, fpr_B, p), level))
                          for p in priors}
  return out


def canary_tpr(counts):
  """tpr_N of per-canary counts (canary_counts): hits over decided IN pairs, NaN for a canary without one."""
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(counts["n_in_N"] > 0, counts["hits_N"] / np.maximum(counts["n_in_N"], 1), np.nan)


def vulnerable(hits_N, n_in_N, fpr, margin, level=LEVEL):
  """(vulnerable_N, low_N, high_N): the canaries whose TPR interval's lower bound exceeds fpr + margin."""
  low_N, high_N = clopper_pearson(hits_N, n_in_N, level)
  return np.nan_to_num(low_N, nan=-1.0) > fpr + margin, low_N, high_N


def concentration(hits_N, shares=(0.01, 0.1)):
  """{share: the fraction of all true positives held by the top ceil(share x N) canaries by hits} (NaN without any)."""
  hits_N = np.sort(np.asarray(hits_N, np.int64))[::-1]
  total = hits_N.sum()
  return {metrics.fpr_key(s): (float(hits_N[:max(1, math.ceil(s * hits_N.size))].sum() / total) if total else
                               float("nan")) for s in shares}


# ---- the whole audit of one attack's scores ----

def audit(score_MxN, keep_MxN, options=None, **fields):
  """The per-sample audit of one attack's leave-one-out scores under PerSampleOptions.

  Returns {"auc_N", "n_in_N", "n_out_N", "folds_M", "fprs": [per fpr: {"fpr", "oracle", "global", "per_canary",
  "canary": {hits_N, n_in_N, false_N, n_out_N, low_N, high_N, vulnerable_N}, "oracle_hits_N"}]}: per FPR the
  oracle point, the calibrated thresholds' operating points (each with its thresholds, in-sample calibration FPR and
  held-out rates) and the per-canary counts at the global threshold.
  """
  options = PerSampleOptions.of(options, **fields)
  score_MxN, keep_MxN = _checked(score_MxN, keep_MxN)
  _, n_in_N, n_out_N = pair_counts(score_MxN, keep_MxN)
  fold_M = model_folds(score_MxN.shape[0], options.folds, options.seed)
  out = {"auc_N": per_canary_auc(score_MxN, keep_MxN), "n_in_N": n_in_N, "n_out_N": n_out_N, "folds_M": fold_M,
         "fprs": []}
  valid_MxN = np.isfinite(score_MxN)
  for fpr, (t, realised, tpr, n_neg) in zip(options.fprs, oracle_points(score_MxN, keep_MxN, options.fprs)):
    with np.errstate(invalid="ignore"):
      oracle_positive_MxN = valid_MxN & (score_MxN > t)
    entry = {"fpr": fpr, "oracle": {"threshold": t, "fpr": realised, "tpr": tpr, "n_neg": n_neg,
                                    "resolved": metrics.is_resolved(n_neg, fpr)},
             "oracle_hits_N": (oracle_positive_MxN & keep_MxN).sum(axis=0)}
    for kind in KINDS:
      cal = calibrate(score_MxN, keep_MxN, fold_M, fpr, kind)
      counts = canary_counts(cal["positive_MxN"], cal["decided_MxN"], keep_MxN)
      point = operating_point(counts, options.priors, options.n_boot, options.seed)
      point.update(_calibration_record(score_MxN, keep_MxN, fold_M, cal, kind, fpr))
      point["n_undecided"] = int((valid_MxN & ~cal["decided_MxN"]).sum())
      entry[kind] = point
      if kind == "global":
        vulnerable_N, low_N, high_N = vulnerable(counts["hits_N"], counts["n_in_N"], point["fpr"], options.margin)
        entry["canary"] = {**counts, "low_N": low_N, "high_N": high_N, "vulnerable_N": vulnerable_N}
    out["fprs"].append(entry)
  return out


def _calibration_record(score_MxN, keep_MxN, fold_M, cal, kind, fpr):
  """What a report records of the thresholds: per fold (global) its threshold, its calibration OUT pairs and the
  in-sample FPR there; per canary the thresholds' spread and the canaries without one."""
  valid_MxN = np.isfinite(score_MxN)
  if kind == "global":
    folds = []
    for k, (t, n) in enumerate(zip(cal["threshold"], cal["n_calibration"])):
      calibration_MxN = valid_MxN & ~keep_MxN & (fold_M != k)[:, None]
      above = int((score_MxN[calibration_MxN] > t).sum()) if n else 0
      folds.append({"fold": k, "threshold": _float(t), "n_calibration_neg": int(n),
                    "calibration_fpr": float(above / n) if n else None, "held_out_models": int((fold_M == k).sum())})
    return {"thresholds": folds}
  t_KxN = cal["threshold"]
  defined = np.isfinite(t_KxN)
  return {"thresholds": {"median": _float(np.median(t_KxN[defined])) if defined.any() else None,
                         "min_calibration_neg": int(cal["n_calibration"].min()),
                         "max_calibration_neg": int(cal["n_calibration"].max()),
                         "undefined": int((~defined).sum()),
                         "k_above": sorted({int(v) for v in np.unique(top_count(cal["n_calibration"], fpr))})}}


# ---- reproducibility: split halves and overlaps ----

def split_halves(keep_MxN, min_models=4, seed=0, tries=50):
  """(models_a, models_b): the models split into two disjoint halves (sorted ids) in which every canary has at least
  min_models IN and min_models OUT models. Seeded random splits are tried, each improved by swapping the pair of
  models that most reduces the shortfall until none does; InputError naming the canary that keeps every split
  tried from it."""
  keep_MxN = np.asarray(keep_MxN, bool)
  M = keep_MxN.shape[0]
  n_in_N = keep_MxN.sum(axis=0)
  few_N = np.minimum(n_in_N, M - n_in_N)
  if few_N.min() < 2 * min_models:
    n = int(np.argmin(few_N))
    raise InputError(f"canary {n} has {int(n_in_N[n])} IN and {int(M - n_in_N[n])} OUT models; split halves need "
                     f"{2 * min_models} of each (--min_models={min_models} per half; --nohalves skips them)")
  rng = np.random.default_rng([seed, 64])
  k_MxN = keep_MxN.astype(np.int64)
  best_short = None
  for _ in range(tries):
    a_M = np.zeros(M, bool)
    a_M[rng.permutation(M)[:M // 2]] = True
    short = _shortfall(k_MxN, a_M, min_models)
    while short.sum() > 0 and M <= 256:  # hill climbing on swaps (a large run's random split has enough already)
      a_i, b_j = np.flatnonzero(a_M), np.flatnonzero(~a_M)
      d_AxBxN = k_MxN[b_j][None, :, :] - k_MxN[a_i][:, None, :]  # the IN count half a gains by swapping i and j
      in_a, in_b = k_MxN[a_M].sum(axis=0), k_MxN[~a_M].sum(axis=0)
      out_a, out_b = a_M.sum() - in_a, (~a_M).sum() - in_b
      total_AxB = sum(np.maximum(0, min_models - (c + sign * d_AxBxN)).sum(axis=2)
                      for c, sign in ((in_a, 1), (out_a, -1), (in_b, -1), (out_b, 1)))
      i, j = np.unravel_index(np.argmin(total_AxB), total_AxB.shape)
      if total_AxB[i, j] >= short.sum():
        break
      a_M[a_i[i]], a_M[b_j[j]] = False, True
      short = _shortfall(k_MxN, a_M, min_models)
    if short.sum() == 0:
      return np.flatnonzero(a_M), np.flatnonzero(~a_M)
    if best_short is None or short.sum() < best_short.sum():
      best_short = short
  n = int(np.argmax(best_short))
  raise InputError(f"no split of the {M} models into halves found ({tries} tries) in which every canary has "
                   f"{min_models} IN and {min_models} OUT models in each half (canary {n} fell short); lower "
                   "--min_models, or pass --nohalves")


def _shortfall(k_MxN, a_M, min_models):
  """short_N: how many IN or OUT models each canary lacks in the halves a_M / ~a_M, summed over the four counts."""
  in_a, in_b = k_MxN[a_M].sum(axis=0), k_MxN[~a_M].sum(axis=0)
  counts = (in_a, a_M.sum() - in_a, in_b, (~a_M).sum() - in_b)
  return sum(np.maximum(0, min_models - c) for c in counts)


def overlap(a_N, b_N):
  """How two sets of canaries (boolean [N]) overlap, against two random sets of the same sizes: {a, b, both,
  jaccard, found (both / a: the fraction of the first set found again), chance_jaccard and chance_found (their
  expectations for random sets: the hypergeometric law of `both`), p_value (P(both or more) for random sets)}."""
  from scipy import stats
  a_N, b_N = np.asarray(a_N, bool), np.asarray(b_N, bool)
  N, a, b = a_N.size, int(a_N.sum()), int(b_N.sum())
  both = int((a_N & b_N).sum())
  x = np.arange(max(0, a + b - N), min(a, b) + 1)
  p_x = stats.hypergeom.pmf(x, N, a, b)
  union_x = a + b - x
  with np.errstate(invalid="ignore", divide="ignore"):
    chance_jaccard = float(np.sum(p_x * np.where(union_x > 0, x / np.maximum(union_x, 1), 0.0))) if a + b else None
  return {"a": a, "b": b, "both": both, "n": N,
          "jaccard": both / (a + b - both) if a + b else None, "found": both / a if a else None,
          "chance_jaccard": chance_jaccard, "chance_found": b / N if a else None,
          "p_value": float(stats.hypergeom.sf(both - 1, N, a, b))}


def rank_correlation(x_N, y_N):
  """(Spearman's rho, the canaries compared): over the canaries where both are defined (scipy.stats.spearmanr)."""
  from scipy import stats
  x_N, y_N = np.asarray(x_N, np.float64), np.asarray(y_N, np.float64)
  ok = np.isfinite(x_N) & np.isfinite(y_N)
  if ok.sum() < 3:
    return None, int(ok.sum())
  rho = stats.spearmanr(x_N[ok], y_N[ok]).statistic
  return _float(rho), int(ok.sum())


# ---- helpers ----

def _checked(score_MxN, keep_MxN):
  score_MxN = np.asarray(score_MxN, dtype=np.float64)
  keep_MxN = np.asarray(keep_MxN)
  if score_MxN.ndim != 2 or score_MxN.shape != keep_MxN.shape:
    raise InputError(f"scores {list(score_MxN.shape)} and keep {list(keep_MxN.shape)} must both be [M, N]")
  return score_MxN, keep_MxN.astype(bool)


def _float(x):
  x = float(x)
  return x if math.isfinite(x) else None


def _floats(pair):
  return [_float(v) for v in np.ravel(pair)]
