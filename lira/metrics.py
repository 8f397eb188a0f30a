"""Evaluation metrics: pooled ROC, TPR at fixed FPR, AUC, fast bootstrap over canaries (Rossi et al. 2025, Sec. 4)."""

import dataclasses
import math

import numpy as np

from lira import weighted_roc
from lira.errors import InputError

DEFAULT_FPRS = (0.01, 0.001, 0.0001)
N_BOOT = 200  # bootstrap replicates over canaries for the intervals
LEVEL = 0.95  # their level
BACKENDS = ("numpy", "jax")  # where the bootstrap replicates are computed


def fpr_key(fpr):
  """Dictionary key of a target FPR in summaries ("0.01", "0.001", "0.0001")."""
  return f"{float(fpr):g}"


def _boolean(labels):
  """Labels as bool: InputError unless they are boolean or 0/1."""
  if labels.dtype != bool:
    if not np.isin(labels, (0, 1)).all():
      raise InputError("labels must be boolean (or 0/1): True = member")
    labels = labels.astype(bool)
  return labels


def _scores_labels(scores, labels):
  """(scores float64, labels bool), both flat: InputError for labels that are not boolean or 0/1, for shapes that
  differ, and for labels of one class only (no ROC), as summarize refuses them."""
  scores = np.asarray(scores, dtype=np.float64)
  labels = np.asarray(labels)
  if scores.shape != labels.shape:
    raise InputError(f"scores {list(scores.shape)} and labels {list(labels.shape)} must have the same shape")
  labels = _boolean(labels).ravel()
  if labels.all() or not labels.any():
    raise InputError(f"need both members and non-members among the labels (got {int(labels.sum())} and "
                     f"{int((~labels).sum())})")
  return scores.ravel(), labels


def roc(scores, labels, sample_weight=None):
  """ROC curve (fpr, tpr, thresholds) with every threshold kept; higher score = member (label True)."""
  scores, labels = _scores_labels(scores, labels)
  if sample_weight is not None:
    sample_weight = np.asarray(sample_weight, dtype=np.float64).ravel()
  from sklearn import metrics as skm  # here, not at the top: sklearn's import (~1 s) would slow every command's --help
  return skm.roc_curve(labels, scores, drop_intermediate=False, sample_weight=sample_weight)


def curve_tpr_at_fpr(fpr_G, tpr_G, fpr):
  """TPR at a target FPR of an already computed ROC curve: max TPR over its points with FPR <= target (no interpolation)."""
  fpr_G, tpr_G = np.asarray(fpr_G, dtype=np.float64), np.asarray(tpr_G, dtype=np.float64)
  ok_G = fpr_G <= fpr
  return float(tpr_G[ok_G].max()) if ok_G.any() else 0.0


def tpr_at_fpr(scores, labels, fpr, sample_weight=None):
  """TPR at a target FPR: max TPR over ROC points with FPR <= target (docs/conventions.md, "Leave-one-out evaluation": no interpolation)."""
  fpr_G, tpr_G, _ = roc(scores, labels, sample_weight)
  return curve_tpr_at_fpr(fpr_G, tpr_G, fpr)


def auc(scores, labels, sample_weight=None):
  """Area under the ROC curve (sklearn roc_auc_score)."""
  scores, labels = _scores_labels(scores, labels)
  if sample_weight is not None:
    sample_weight = np.asarray(sample_weight, dtype=np.float64).ravel()
  from sklearn import metrics as skm  # imported where used, as in roc
  return float(skm.roc_auc_score(labels, scores, sample_weight=sample_weight))


def min_negatives(fpr):
  """Smallest number of negatives that resolves a target FPR (the n with n * fpr >= 1)."""
  return int(math.ceil((1.0 - 1e-9) / float(fpr)))


def is_resolved(n_negatives, fpr):
  """A target FPR is resolved when there are at least 1/FPR negatives (docs/conventions.md, "Leave-one-out evaluation")."""
  return bool(n_negatives * float(fpr) >= 1.0 - 1e-9)


# ----------------------------------------------------------------------------------------------
# Pairs pooled into one ROC, and the weighted (bootstrap) statistics of that ROC.


@dataclasses.dataclass(frozen=True)
class RankedPairs:
  """Valid (model, canary) pairs sorted once by descending score, with tie groups (one threshold each)."""
  n_canaries: int
  score_P: np.ndarray  # sorted scores, descending
  canary_neg_Pn: np.ndarray  # canary of each negative pair, in sorted order
  canary_pos_Pp: np.ndarray  # canary of each positive pair, in sorted order
  nneg_upto_G1: np.ndarray  # negatives at or above tie group g (index 0 = the empty top point)
  npos_upto_G1: np.ndarray  # positives at or above tie group g
  end_P_G: np.ndarray  # index in score_P of the last pair of each tie group
  nneg_before_Pp: np.ndarray  # for each positive: negatives strictly above its tie group
  nneg_through_Pp: np.ndarray  # for each positive: negatives up to the end of its tie group
  nneg_N: np.ndarray  # negative pairs per canary
  npos_N: np.ndarray  # positive pairs per canary


def check_pairs(scores_MxN, labels_MxN, valid_MxN=None):
  """Validate [M, N] scores and labels; return (scores, labels, valid) as float64/bool [M, N] arrays."""
  scores_MxN = np.atleast_2d(np.asarray(scores_MxN, dtype=np.float64))
  labels_MxN = np.atleast_2d(np.asarray(labels_MxN))
  if scores_MxN.ndim != 2 or scores_MxN.shape != labels_MxN.shape:
    raise InputError(f"scores {scores_MxN.shape} and labels {labels_MxN.shape} must both be [M, N]")
  labels_MxN = _boolean(labels_MxN)
  if valid_MxN is None:
    valid_MxN = np.ones(scores_MxN.shape, dtype=bool)
  else:
    valid_MxN = np.atleast_2d(np.asarray(valid_MxN))
    if valid_MxN.dtype != bool or valid_MxN.shape != scores_MxN.shape:
      raise InputError(f"valid_MxN must be a boolean array shaped {scores_MxN.shape}")
  bad_MxN = valid_MxN & ~np.isfinite(scores_MxN)
  if bad_MxN.any():
    m, n = (int(i) for i in np.argwhere(bad_MxN)[0])
    raise InputError(
        f"non-finite score {scores_MxN[m, n]} for (model {m}, canary {n}) "
        f"({int(bad_MxN.sum())} such pairs); pass valid_MxN to exclude undefined pairs")
  return scores_MxN, labels_MxN, valid_MxN


def rank_pairs(scores_MxN, labels_MxN, valid_MxN=None):
  """Sort the valid pairs by descending score once and index their tie groups for weighted ROCs."""
  return _rank_checked(*check_pairs(scores_MxN, labels_MxN, valid_MxN))


def _descending_order(score_P):
  """Order and values of finite float64 scores sorted in descending order (tied scores in no set order)."""
  # One np.sort of uint64 keys (the score's order-preserving bits, the low ones replaced by the pair's index) is
  # several times faster than an argsort. Order within a tie group changes no ROC point: a group is one threshold.
  n = score_P.size
  shift = max(1, (n - 1).bit_length())
  low = np.uint64((1 << shift) - 1)
  packed_P = _descending_key(score_P)
  packed_P >>= shift
  packed_P <<= shift
  packed_P |= np.arange(n, dtype=np.uint64)
  packed_P.sort()
  order_P = (packed_P & low).view(np.int64)
  sorted_P = score_P[order_P]
  bad = np.flatnonzero(sorted_P[1:] > sorted_P[:-1])
  if bad.size:  # scores that differ only in the replaced bits are in index order: sort their runs by full key
    run_R = np.unique(packed_P[bad] & ~low)
    first_R, length_R = np.searchsorted(packed_P, run_R), np.searchsorted(packed_P, run_R | low, side="right")
    length_R -= first_R
    at = np.arange(length_R.sum()) + np.repeat(first_R - (np.cumsum(length_R) - length_R), length_R)  # the runs' pairs
    sub = order_P[at][np.argsort(_descending_key(score_P[order_P[at]]), kind="stable")]
    order_P[at], sorted_P[at] = sub, score_P[sub]
  return order_P, sorted_P


def _descending_key(score_P):
  """uint64 keys that ascend where the float64 scores descend."""
  bits_P = score_P.view(np.uint64)
  key_P = bits_P >> 63
  key_P -= 1
  key_P >>= 1  # 0 for negative scores (their bits already ascend as they fall), else all but the sign bit
  key_P ^= bits_P
  return key_P


def _rank_checked(scores_MxN, labels_MxN, valid_MxN):
  """rank_pairs on arrays check_pairs returned."""
  n_canaries = scores_MxN.shape[1]
  flat_P = None if valid_MxN.all() else np.flatnonzero(valid_MxN)
  score_P = scores_MxN.ravel() if flat_P is None else scores_MxN.ravel()[flat_P]
  order_P, score_P = _descending_order(np.ascontiguousarray(score_P))
  at_P = order_P if flat_P is None else flat_P[order_P]  # flat [M, N] index of each sorted pair
  label_P = labels_MxN.ravel()[at_P]
  canary_neg_Pn, canary_pos_Pp = at_P[~label_P], at_P[label_P]
  canary_neg_Pn %= n_canaries
  canary_pos_Pp %= n_canaries
  # A tie group ends where the next score differs (or at the last pair). int32 counts where they fit: less memory.
  count = np.int32 if score_P.size < 2**31 else np.int64
  last_P = np.ones(score_P.size, dtype=bool)
  np.not_equal(score_P[1:], score_P[:-1], out=last_P[:-1])
  end_P_G = np.flatnonzero(last_P)
  nneg_upto_G1, npos_upto_G1 = np.zeros(end_P_G.size + 1, np.int64), np.zeros(end_P_G.size + 1, np.int64)
  nneg_upto_G1[1:] = np.cumsum(~label_P, dtype=count)[end_P_G]
  np.subtract(end_P_G + 1, nneg_upto_G1[1:], out=npos_upto_G1[1:])
  last_P[1:], last_P[:1] = last_P[:-1].copy(), False  # now: a tie group starts at the pair
  group_pos_Pp = np.cumsum(last_P, dtype=count)[label_P]
  return RankedPairs(
      n_canaries=n_canaries,
      score_P=score_P,
      canary_neg_Pn=canary_neg_Pn,
      canary_pos_Pp=canary_pos_Pp,
      nneg_upto_G1=nneg_upto_G1,
      npos_upto_G1=npos_upto_G1,
      end_P_G=end_P_G,
      nneg_before_Pp=nneg_upto_G1[group_pos_Pp],
      nneg_through_Pp=nneg_upto_G1[group_pos_Pp + 1],
      nneg_N=np.bincount(canary_neg_Pn, minlength=n_canaries).astype(np.int64),
      npos_N=np.bincount(canary_pos_Pp, minlength=n_canaries).astype(np.int64),
  )


def ranked_roc(ranked):
  """ROC (fpr, tpr, thresholds) of ranked pairs with every threshold kept, as roc(): sklearn's, without re-sorting."""
  fps_G1, tps_G1 = ranked.nneg_upto_G1.astype(np.float64), ranked.npos_upto_G1.astype(np.float64)
  # The same integer counts over the same totals as sklearn's; NaN for a class without pairs, as sklearn gives.
  fpr_G1 = fps_G1 / fps_G1[-1] if fps_G1[-1] > 0 else np.full(fps_G1.shape, np.nan)
  tpr_G1 = tps_G1 / tps_G1[-1] if tps_G1[-1] > 0 else np.full(tps_G1.shape, np.nan)
  return fpr_G1, tpr_G1, np.r_[np.inf, ranked.score_P[ranked.end_P_G]]


def ranked_auc(ranked):
  """AUC of ranked pairs, as auc() (sklearn's roc_auc_score) computes it, without re-sorting."""
  fps_G, tps_G = ranked.nneg_upto_G1[1:], ranked.npos_upto_G1[1:]
  if fps_G[-1:].sum() == 0 or tps_G[-1:].sum() == 0:
    return float("nan")  # one class only: no ROC (sklearn warns and gives NaN)
  if fps_G.size > 2:  # roc_curve's drop_intermediate: the points where neither count bends are dropped
    keep_G = np.r_[True, (np.diff(fps_G, 2) != 0) | (np.diff(tps_G, 2) != 0), True]
    fps_G, tps_G = fps_G[keep_G], tps_G[keep_G]
  fpr_G, tpr_G = np.r_[0.0, fps_G] / fps_G[-1], np.r_[0.0, tps_G] / tps_G[-1]
  return float(np.sum(np.diff(fpr_G) * (tpr_G[1:] + tpr_G[:-1]) / 2.0))  # scipy.integrate.trapezoid's sum: bit for bit


def bootstrap_weights(n_canaries, n_boot, seed=0):
  """Multinomial canary counts [B, N]: each replicate resamples the N canaries with replacement."""
  rng = np.random.default_rng(seed)
  draws_BxN = rng.integers(0, n_canaries, size=(n_boot, n_canaries))
  flat = (draws_BxN + n_canaries * np.arange(n_boot)[:, None]).ravel()
  return np.bincount(flat, minlength=n_boot * n_canaries).reshape(n_boot, n_canaries)


def _percentile_ci(x_B, level):
  """Percentile interval of the defined (finite) replicates; [NaN, NaN] if none is."""
  x_B = x_B[np.isfinite(x_B)]
  if x_B.size == 0:
    return np.array([np.nan, np.nan])
  alpha = 100.0 * (1.0 - level) / 2.0
  return np.percentile(x_B, [alpha, 100.0 - alpha])


def bootstrap_ci(scores_MxN, labels_MxN, fprs=DEFAULT_FPRS, n_boot=N_BOOT, level=LEVEL, seed=0, valid_MxN=None,
                 backend="numpy"):
  """Percentile intervals over canary-bootstrap replicates: (tpr_ci_Fx2, auc_ci_2, n_undefined).

  A replicate that draws no member pair or no non-member pair has no ROC; it cannot be given a value
  without inventing one, so the intervals are taken over the other replicates and n_undefined counts
  the ones left out (summaries report it as n_boot_undefined; all undefined gives NaN intervals).
  backend "jax" computes the replicates on jax's default device (lira.metrics_jax), with the same results.
  """
  check_backend(backend)
  ranked = scores_MxN if isinstance(scores_MxN, RankedPairs) else rank_pairs(scores_MxN, labels_MxN, valid_MxN)
  w_BxN = bootstrap_weights(ranked.n_canaries, n_boot, seed)
  if backend == "jax":
    tpr_BxF, auc_B = weighted_roc.weighted_stats_on_device(ranked, w_BxN, fprs)
  else:
    tpr_BxF, auc_B = weighted_roc.weighted_stats(ranked, w_BxN, fprs)
  # TPR and AUC are undefined in the same replicates (no negatives or no positives drawn).
  n_undefined = int(np.isnan(auc_B).sum())
  tpr_ci_Fx2 = np.stack([_percentile_ci(tpr_BxF[:, f], level) for f in range(tpr_BxF.shape[1])])
  return tpr_ci_Fx2.reshape(-1, 2), _percentile_ci(auc_B, level), n_undefined


def check_backend(backend):
  """Raise InputError unless backend is one of BACKENDS."""
  if backend not in BACKENDS:
    raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


# ----------------------------------------------------------------------------------------------
# Summaries and tables.


def downsample_roc(fpr_G, tpr_G, max_points=2000, fprs=DEFAULT_FPRS, n_first=150):
  """Indices of at most ~max_points ROC points for log-log plots: the lowest FPRs exactly, then a log grid."""
  fpr_G = np.asarray(fpr_G)
  # Each distinct FPR is a vertical step: keep its first and last point.
  starts_U = np.flatnonzero(np.r_[True, fpr_G[1:] != fpr_G[:-1]])
  ends_U = np.r_[starts_U[1:] - 1, fpr_G.size - 1]
  if 2 * starts_U.size <= max_points:
    keep_U = np.arange(starts_U.size)
  else:
    values_U = fpr_G[starts_U]
    n_grid = max_points // 2 - n_first - len(fprs) - 2
    lo = values_U[min(n_first, values_U.size - 1)]
    grid = np.r_[np.geomspace(max(lo, 1e-12), 1.0, max(n_grid, 2)), np.asarray(fprs, dtype=np.float64)]
    # The last distinct FPR at or below each grid value keeps TPR@grid exact.
    at_grid = np.searchsorted(values_U, grid, side="right") - 1
    keep_U = np.unique(np.r_[np.arange(min(n_first, values_U.size)), at_grid[at_grid >= 0], values_U.size - 1])
  return np.unique(np.r_[starts_U[keep_U], ends_U[keep_U]])


def summarize(scores_MxN, labels_MxN, fprs=DEFAULT_FPRS, n_boot=N_BOOT, level=LEVEL, seed=0, valid_MxN=None,
              backend="numpy"):
  """JSON-ready summary of one attack: AUC, TPR at each FPR with bootstrap CIs and resolution, and a plot-sized ROC.

  n_boot_undefined counts the bootstrap replicates left out of the intervals (no member or no non-member drawn).
  The pairs are sorted once (rank_pairs); backend picks where the bootstrap replicates run (bootstrap_ci).
  """
  check_backend(backend)
  scores_MxN, labels_MxN, valid_MxN = check_pairs(scores_MxN, labels_MxN, valid_MxN)
  ranked = _rank_checked(scores_MxN, labels_MxN, valid_MxN)
  n_pos, n_neg = int(ranked.npos_upto_G1[-1]), int(ranked.nneg_upto_G1[-1])
  if n_pos == 0 or n_neg == 0:
    raise InputError(f"need both members and non-members among valid pairs (got {n_pos} and {n_neg})")
  fpr_G, tpr_G, _ = ranked_roc(ranked)
  auc_value = ranked_auc(ranked)
  if n_boot > 0:
    tpr_ci_Fx2, auc_ci_2, n_undefined = bootstrap_ci(ranked, None, fprs, n_boot, level, seed, backend=backend)
  else:
    tpr_ci_Fx2, auc_ci_2, n_undefined = np.full((len(fprs), 2), np.nan), np.full(2, np.nan), 0
  tpr = {}
  for f, fpr in enumerate(fprs):
    tpr[fpr_key(fpr)] = {
        "fpr": float(fpr),
        "tpr": curve_tpr_at_fpr(fpr_G, tpr_G, fpr),
        "ci": _json_floats(tpr_ci_Fx2[f]),
        "resolved": is_resolved(n_neg, fpr),
        "min_negatives": min_negatives(fpr),
    }
  keep = downsample_roc(fpr_G, tpr_G, fprs=fprs)
  return {
      "auc": auc_value,
      "auc_ci": _json_floats(auc_ci_2),
      "n_pos": n_pos,
      "n_neg": n_neg,
      "n_excluded": int((~valid_MxN).sum()),
      "n_boot": int(n_boot),
      "n_boot_undefined": n_undefined,
      "ci_level": float(level),
      "tpr": tpr,
      "roc": {"fpr": fpr_G[keep].tolist(), "tpr": tpr_G[keep].tolist()},
  }


def resolved_tpr(summary, fpr):
  """A summary's TPR at `fpr`, or None where it is not resolved (fewer than 1 / FPR non-member pairs: the number
  there is the TPR at FPR 0, which the tables print as n/r)."""
  entry = summary["tpr"][fpr_key(fpr)]
  return entry["tpr"] if entry["resolved"] else None


def _json_floats(x):
  return [float(v) if np.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]
