"""Evaluation metrics: pooled ROC, TPR at fixed FPR, AUC, fast bootstrap over canaries (Rossi et al. 2025, Sec. 4)."""

import dataclasses
import math

import numpy as np

from lira.errors import InputError

DEFAULT_FPRS = (0.01, 0.001, 0.0001)
N_BOOT = 200  # bootstrap replicates over canaries for the intervals
LEVEL = 0.95  # their level
# Bootstrap replicates processed together; bounds memory to a few [chunk, pairs] int arrays.
_CHUNK_ELEMENTS = 8_000_000


def fpr_key(fpr):
  """Dictionary key of a target FPR in summaries ("0.01", "0.001", "0.0001")."""
  return f"{float(fpr):g}"


def roc(scores, labels, sample_weight=None):
  """ROC curve (fpr, tpr, thresholds) with every threshold kept; higher score = member (label True)."""
  scores = np.asarray(scores, dtype=np.float64).ravel()
  labels = np.asarray(labels).ravel().astype(bool)
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
  scores = np.asarray(scores, dtype=np.float64).ravel()
  labels = np.asarray(labels).ravel().astype(bool)
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
  if labels_MxN.dtype != bool:
    if not np.isin(labels_MxN, (0, 1)).all():
      raise InputError("labels must be boolean (or 0/1): True = member")
    labels_MxN = labels_MxN.astype(bool)
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
  scores_MxN, labels_MxN, valid_MxN = check_pairs(scores_MxN, labels_MxN, valid_MxN)
  n_canaries = scores_MxN.shape[1]
  canary_MxN = np.broadcast_to(np.arange(n_canaries), scores_MxN.shape)
  score_P = scores_MxN[valid_MxN]
  label_P = labels_MxN[valid_MxN]
  canary_P = canary_MxN[valid_MxN]
  order_P = np.argsort(-score_P, kind="stable")
  score_P, label_P, canary_P = score_P[order_P], label_P[order_P], canary_P[order_P]
  # A tie group ends where the next score differs (or at the last pair).
  end_P_G = np.flatnonzero(np.r_[score_P[1:] != score_P[:-1], True]) if score_P.size else np.zeros(0, int)
  neg_cum_P = np.cumsum(~label_P)
  pos_cum_P = np.cumsum(label_P)
  nneg_upto_G1 = np.r_[0, neg_cum_P[end_P_G]].astype(np.int64)
  npos_upto_G1 = np.r_[0, pos_cum_P[end_P_G]].astype(np.int64)
  group_P = np.cumsum(np.r_[0, score_P[1:] != score_P[:-1]]) if score_P.size else np.zeros(0, int)
  group_pos_Pp = group_P[label_P]
  return RankedPairs(
      n_canaries=n_canaries,
      score_P=score_P,
      canary_neg_Pn=canary_P[~label_P].astype(np.intp),
      canary_pos_Pp=canary_P[label_P].astype(np.intp),
      nneg_upto_G1=nneg_upto_G1,
      npos_upto_G1=npos_upto_G1,
      end_P_G=end_P_G,
      nneg_before_Pp=nneg_upto_G1[group_pos_Pp],
      nneg_through_Pp=nneg_upto_G1[group_pos_Pp + 1],
      nneg_N=np.bincount(canary_P[~label_P], minlength=n_canaries).astype(np.int64),
      npos_N=np.bincount(canary_P[label_P], minlength=n_canaries).astype(np.int64),
  )


def _cumulative(w_BxN, canary_P):
  """Running weight totals [B, P+1] (leading zero) of pairs whose canaries are canary_P, in order."""
  w_BxP = np.take(w_BxN, canary_P, axis=1)
  cum_BxP1 = np.zeros((w_BxN.shape[0], canary_P.size + 1), dtype=w_BxN.dtype)
  np.cumsum(w_BxP, axis=1, out=cum_BxP1[:, 1:])
  return cum_BxP1


def _largest_count_within(fpr, total_B):
  """Largest integer c per replicate with c / total <= fpr in float64, as sklearn's fpr <= target compares."""
  c_B = np.floor(fpr * total_B)
  with np.errstate(divide="ignore", invalid="ignore"):
    c_B = np.where((c_B + 1) / total_B <= fpr, c_B + 1, c_B)
    c_B = np.where(c_B / total_B > fpr, c_B - 1, c_B)
  return c_B


def weighted_stats(ranked, w_BxN, fprs):
  """TPR at each target FPR [B, F] and AUC [B] of the weighted pooled ROC, one row of canary weights per replicate."""
  w_BxN = np.asarray(w_BxN)
  n_boot = w_BxN.shape[0]
  fprs = np.asarray(fprs, dtype=np.float64).ravel()
  total_neg_B = w_BxN.astype(np.int64) @ ranked.nneg_N
  total_pos_B = w_BxN.astype(np.int64) @ ranked.npos_N
  # Integer running sums are exact; int32 when the largest total fits, for memory bandwidth.
  big = max(int(total_neg_B.max(initial=0)), int(total_pos_B.max(initial=0)))
  w_BxN = w_BxN.astype(np.int32 if big < 2**31 - 1 else np.int64)
  tpr_BxF = np.full((n_boot, fprs.size), np.nan)
  auc_B = np.full(n_boot, np.nan)
  chunk = max(1, _CHUNK_ELEMENTS // max(1, ranked.score_P.size))
  for lo in range(0, n_boot, chunk):
    hi = min(n_boot, lo + chunk)
    cn_BxPn1 = _cumulative(w_BxN[lo:hi], ranked.canary_neg_Pn)
    cp_BxPp1 = _cumulative(w_BxN[lo:hi], ranked.canary_pos_Pp)
    tn_B, tp_B = total_neg_B[lo:hi].astype(np.float64), total_pos_B[lo:hi].astype(np.float64)
    ok_B = (tn_B > 0) & (tp_B > 0)
    for f, fpr in enumerate(fprs):
      cmax_B = _largest_count_within(fpr, tn_B)
      for b in np.flatnonzero(ok_B):
        # Last negative count k with fpr <= target, then the last tie group that needs no more negatives.
        k = np.searchsorted(cn_BxPn1[b], cmax_B[b], side="right") - 1
        g = np.searchsorted(ranked.nneg_upto_G1, k, side="right") - 1
        tpr_BxF[lo + b, f] = cp_BxPp1[b, ranked.npos_upto_G1[g]] / tp_B[b]
    # Trapezoid over tie groups = sum over positives of w * (negatives below + half the tied ones).
    wp_BxPp = np.diff(cp_BxPp1, axis=1).astype(np.float64)
    above_BxPp = (np.take(cn_BxPn1, ranked.nneg_before_Pp, axis=1).astype(np.float64)
                  + np.take(cn_BxPn1, ranked.nneg_through_Pp, axis=1))
    num_B = np.einsum("bp,bp->b", wp_BxPp, 2.0 * tn_B[:, None] - above_BxPp)
    with np.errstate(divide="ignore", invalid="ignore"):
      auc_B[lo:hi] = np.where(ok_B, num_B / (2.0 * tn_B * tp_B), np.nan)
  return tpr_BxF, auc_B


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


def bootstrap_ci(scores_MxN, labels_MxN, fprs=DEFAULT_FPRS, n_boot=N_BOOT, level=LEVEL, seed=0, valid_MxN=None):
  """Percentile intervals over canary-bootstrap replicates: (tpr_ci_Fx2, auc_ci_2, n_undefined).

  A replicate that draws no member pair or no non-member pair has no ROC; it cannot be given a value
  without inventing one, so the intervals are taken over the other replicates and n_undefined counts
  the ones left out (summaries report it as n_boot_undefined; all undefined gives NaN intervals).
  """
  ranked = scores_MxN if isinstance(scores_MxN, RankedPairs) else rank_pairs(scores_MxN, labels_MxN, valid_MxN)
  w_BxN = bootstrap_weights(ranked.n_canaries, n_boot, seed)
  tpr_BxF, auc_B = weighted_stats(ranked, w_BxN, fprs)
  # TPR and AUC are undefined in the same replicates (no negatives or no positives drawn).
  n_undefined = int(np.isnan(auc_B).sum())
  tpr_ci_Fx2 = np.stack([_percentile_ci(tpr_BxF[:, f], level) for f in range(tpr_BxF.shape[1])])
  return tpr_ci_Fx2.reshape(-1, 2), _percentile_ci(auc_B, level), n_undefined


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


def summarize(scores_MxN, labels_MxN, fprs=DEFAULT_FPRS, n_boot=N_BOOT, level=LEVEL, seed=0, valid_MxN=None):
  """JSON-ready summary of one attack: AUC, TPR at each FPR with bootstrap CIs and resolution, and a plot-sized ROC.

  n_boot_undefined counts the bootstrap replicates left out of the intervals (no member or no non-member drawn).
  """
  scores_MxN, labels_MxN, valid_MxN = check_pairs(scores_MxN, labels_MxN, valid_MxN)
  score_P, label_P = scores_MxN[valid_MxN], labels_MxN[valid_MxN]
  n_pos, n_neg = int(label_P.sum()), int((~label_P).sum())
  if n_pos == 0 or n_neg == 0:
    raise InputError(f"need both members and non-members among valid pairs (got {n_pos} and {n_neg})")
  fpr_G, tpr_G, _ = roc(score_P, label_P)
  auc_value = auc(score_P, label_P)
  if n_boot > 0:
    ranked = rank_pairs(scores_MxN, labels_MxN, valid_MxN)
    tpr_ci_Fx2, auc_ci_2, n_undefined = bootstrap_ci(ranked, None, fprs, n_boot, level, seed)
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


def _json_floats(x):
  return [float(v) if np.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]
