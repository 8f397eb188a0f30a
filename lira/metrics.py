"""Evaluation metrics: pooled ROC, TPR at fixed FPR, AUC, fast bootstrap over canaries (Rossi et al. 2025, Sec. 4)."""

import bisect
import concurrent.futures
import dataclasses
import math
import os
import threading

import numpy as np
import threadpoolctl

from lira.errors import InputError

DEFAULT_FPRS = (0.01, 0.001, 0.0001)
N_BOOT = 200  # bootstrap replicates over canaries for the intervals
LEVEL = 0.95  # their level
BACKENDS = ("numpy", "jax")  # where the bootstrap replicates are computed
# Replicates processed together by _weighted_stats_reference; bounds memory to a few [chunk, pairs] int arrays.
_CHUNK_ELEMENTS = 8_000_000
_BLOCK = 1 << 16  # pairs of one class per step of weighted_stats: the step's buffers stay in the CPU's cache
_LO32 = np.uint64(0xFFFFFFFF)


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


def _weighted_stats_reference(ranked, w_BxN, fprs):
  """weighted_stats as float64 sums over [replicate, pair] arrays (the previous implementation): its fallback."""
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


def weighted_stats(ranked, w_BxN, fprs):
  """TPR at each target FPR [B, F] and AUC [B] of the weighted pooled ROC, one row of canary weights per replicate."""
  # Exact integer sums, two replicates at once in the 32-bit halves of uint64 words (one gather and one running sum
  # serve both), pairs of replicates spread over threads. Sums of integers below 2**53 are exact in the reference's
  # float64 too, so the results equal _weighted_stats_reference's bit for bit; outside those bounds it runs instead.
  w_BxN, tn_B, tp_B, fprs = _totals(ranked, w_BxN, fprs)
  wmax, tn, tp = int(w_BxN.max(initial=0)), int(tn_B.max(initial=0)), int(tp_B.max(initial=0))
  # A half holds the running negatives (signed: int64 cumsums are faster), the positives' total, weight * negatives.
  if not _exact(w_BxN, tn_B, tp_B) or tn >= 2**31 or tp >= 2**32 or tn * wmax >= 2**32:
    return _weighted_stats_reference(ranked, w_BxN, fprs)
  bound_BxF = _count_bounds(fprs, tn_B)
  s_B, num_BxF = np.zeros(w_BxN.shape[0], np.int64), np.zeros(bound_BxF.shape, np.int64)
  if not np.any((tn_B > 0) & (tp_B > 0)):
    return _finish(tn_B, tp_B, s_B, num_BxF)
  steps = _steps(ranked, max(1, (2**32 - 1) // max(1, tn * wmax)))
  n_pairs, local = (w_BxN.shape[0] + 1) // 2, threading.local()

  def run(i):
    if not hasattr(local, "buffers"):  # one set per thread
      local.buffers = (np.zeros(int(np.diff(steps[0]).max()) + 1, np.uint64), np.empty(_BLOCK, np.uint64),
                       np.empty(_BLOCK, np.uint64))
    b = slice(2 * i, 2 * i + 2)
    s_B[b], num_BxF[b] = _pair_sums(ranked, w_BxN[b], bound_BxF[b], steps, local.buffers)

  # numpy's gathers and sums release the GIL: pairs of replicates go to the threads as they free up. One BLAS thread
  # per worker keeps BLAS from oversubscribing the cores.
  workers = max(1, min(os.cpu_count() or 1, n_pairs))
  with threadpoolctl.threadpool_limits(1, user_api="blas"), concurrent.futures.ThreadPoolExecutor(workers) as pool:
    list(pool.map(run, range(n_pairs)))
  return _finish(tn_B, tp_B, s_B, num_BxF)


def _weighted_stats_on_device(ranked, w_BxN, fprs):
  """weighted_stats (the same values) with the replicates' integer sums on jax's default device (lira.metrics_jax)."""
  w_BxN, tn_B, tp_B, fprs = _totals(ranked, w_BxN, fprs)
  if not _exact(w_BxN, tn_B, tp_B):  # the reference rounds its float sums: only it gives its results
    return weighted_stats(ranked, w_BxN, fprs)
  bound_BxF = _count_bounds(fprs, tn_B)
  if w_BxN.shape[0] == 0:
    return _finish(tn_B, tp_B, np.zeros(0, np.int64), np.zeros(bound_BxF.shape, np.int64))
  # Running sums in int32 where twice the largest total fits (half the memory traffic), else int64: exact either way.
  dtype = np.int32 if 2 * max(int(tn_B.max()), int(tp_B.max())) + 1 < 2**31 else np.int64
  from lira import metrics_jax  # here: jax is imported only when asked for
  s_B, num_BxF = metrics_jax.pair_sums(ranked, w_BxN, bound_BxF, dtype)
  return _finish(tn_B, tp_B, s_B, num_BxF)


def _totals(ranked, w_BxN, fprs):
  """Integer weights [B, N], each replicate's negative and positive pair weight [B], and the target FPRs [F]."""
  w_BxN = np.asarray(w_BxN).astype(np.int64)
  return w_BxN, w_BxN @ ranked.nneg_N, w_BxN @ ranked.npos_N, np.asarray(fprs, dtype=np.float64).ravel()


def _exact(w_BxN, tn_B, tp_B):
  """Whether the reference's float64 sums are of integers below 2**53 (exact): no negative weight, small totals."""
  return w_BxN.min(initial=0) >= 0 and bool(np.all(2.0 * tn_B * tp_B.astype(np.float64) < 2.0**52))


def _count_bounds(fprs, tn_B):
  """Largest running negative count within each target FPR [B, F], as integers the reference's searchsorted matches."""
  cmax_BxF = np.zeros((tn_B.size, fprs.size))
  for f, fpr in enumerate(fprs):
    cmax_BxF[:, f] = _largest_count_within(fpr, tn_B.astype(np.float64))
  top = 2 * int(tn_B.max(initial=0)) + 1  # above every count; NaN sorts last in searchsorted: all counts are within
  with np.errstate(invalid="ignore"):
    return np.where(np.isnan(cmax_BxF) | (cmax_BxF >= top), top, np.maximum(np.floor(cmax_BxF), -1)).astype(np.int64)


def _finish(tn_B, tp_B, s_B, num_BxF):
  """TPRs [B, F] and AUCs [B] from the exact sums, in the reference's float64 operations; NaN without a ROC."""
  tn_f, tp_f = tn_B.astype(np.float64), tp_B.astype(np.float64)
  ok_B = (tn_f > 0) & (tp_f > 0)
  with np.errstate(divide="ignore", invalid="ignore"):
    tpr_BxF = np.where(ok_B[:, None], num_BxF / tp_f[:, None], np.nan)
    auc_B = np.where(ok_B, (2 * tn_B * tp_B - s_B).astype(np.float64) / (2.0 * tn_f * tp_f), np.nan)
  return tpr_BxF, auc_B


def _steps(ranked, per_sum):
  """weighted_stats' steps over the negatives, cut between tie groups, and each positive's place in them."""
  # The first negative [J+1] and positive [J+1] of each step, the negatives above each positive's tie group from its
  # step's first on, the tied positives [T] and the negatives through their group's end, and per_sum (_pair_sums).
  upto_G1, before_Pp, n_neg = ranked.nneg_upto_G1, ranked.nneg_before_Pp, ranked.canary_neg_Pn.size
  neg_J1 = np.unique(np.r_[0, upto_G1[np.searchsorted(upto_G1, np.arange(0, n_neg, _BLOCK))], n_neg])
  neg_J1 = neg_J1 if neg_J1.size > 1 else np.zeros(2, np.int64)
  pos_J1 = np.searchsorted(before_Pp, neg_J1)
  pos_J1[-1] = before_Pp.size  # below the last negative: the last step
  before_Pp = before_Pp - np.repeat(neg_J1[:-1], np.diff(pos_J1))
  tied_T = np.flatnonzero(ranked.nneg_before_Pp != ranked.nneg_through_Pp)
  through_T = before_Pp[tied_T] + (ranked.nneg_through_Pp - ranked.nneg_before_Pp)[tied_T]
  return neg_J1, pos_J1, before_Pp, tied_T, through_T, per_sum


def _pair_sums(ranked, w_2xN, bound_2xF, steps, buffers):
  """AUC sums [2] and TPR numerators [2, F] of (up to) two replicates, one per 32-bit half of uint64 words."""
  neg_J1, pos_J1, before_Pp, tied_T, through_T, per_sum = steps
  cn_L1, wp_L, above_L = buffers
  halves = range(len(w_2xN))
  w_N = w_2xN[0].astype(np.uint64) | (w_2xN[-1].astype(np.uint64) << 32 if len(w_2xN) == 2 else np.uint64(0))
  count_2xF = np.full(bound_2xF.shape, neg_J1[-1] + 1)  # running counts (leading 0 too) within the bound
  pending = {(h, f) for h in halves for f in range(bound_2xF.shape[1])}
  twice, tied, chunk_C, pos_C, carry = [], [], [], [], np.uint64(0)  # chunk_C, pos_C: chunks' first positive, weight
  for j in range(len(neg_J1) - 1):  # a step's buffers stay in the CPU's cache
    cn = cn_L1[:neg_J1[j + 1] - neg_J1[j] + 1]
    cn[0] = carry
    np.take(w_N, ranked.canary_neg_Pn[neg_J1[j]:neg_J1[j + 1]], out=cn[1:], mode="clip")
    np.cumsum(cn.view(np.int64), out=cn.view(np.int64))  # running negative weight from the step's first negative
    carry = cn[-1]
    for h, f in [(h, f) for h, f in pending if (int(carry) >> 32 * h) & 0xFFFFFFFF > bound_2xF[h, f]]:
      pending.discard((h, f))  # this step passes the bound: count its running sums within it
      half = lambda v: (int(v) >> 32 * h) & 0xFFFFFFFF  # noqa: E731
      count_2xF[h, f] = neg_J1[j] + bisect.bisect_right(cn, bound_2xF[h, f], key=half)
    for a in range(pos_J1[j], pos_J1[j + 1], _BLOCK):
      b = min(pos_J1[j + 1], a + _BLOCK)
      wp, above = wp_L[:b - a], above_L[:b - a]
      np.take(w_N, ranked.canary_pos_Pp[a:b], out=wp, mode="clip")
      chunk_C.append(a)
      pos_C.append(wp.sum())
      # Weight * (negatives above the tie group + those through its end) = twice the first, plus for tied positives
      # the negatives tied with them.
      np.take(cn, before_Pp[a:b], out=above, mode="clip")
      t = slice(*np.searchsorted(tied_T, (a, b)))
      if t.start < t.stop:
        extra = cn[through_T[t]] - cn[before_Pp[tied_T[t]]]
        tied += _products(extra, wp[tied_T[t] - a], per_sum)
      twice += _products(above, wp, per_sum)
  s_2 = [2 * x + y for x, y in zip(_halves(twice), _halves(tied))]
  # TPR numerator: the weight of the positives in the tie groups above the first negative past the bound.
  m_2xF = ranked.npos_upto_G1[np.searchsorted(ranked.nneg_upto_G1, count_2xF - 1, side="right") - 1]
  upto, pos_C1 = {}, np.cumsum(np.r_[np.uint64(0), pos_C], dtype=np.uint64)
  for m in np.unique(m_2xF):  # both halves at once
    c = max(0, np.searchsorted(chunk_C, m, side="right") - 1)
    upto[m] = int(pos_C1[c] + w_N[ranked.canary_pos_Pp[chunk_C[c] if chunk_C else 0:m]].sum())
  return s_2[:len(w_2xN)], [[(upto[m] >> 32 * h) & 0xFFFFFFFF for m in m_2xF[h]] for h in halves]


def _products(x, y, per_sum):
  """Sums of per_sum products of x's and y's 32-bit halves at a time (x is overwritten): each half stays exact."""
  np.multiply(x.view(np.uint32), y.view(np.uint32), out=x.view(np.uint32))
  whole = x.size // per_sum * per_sum
  return [x[:whole].reshape(-1, per_sum).sum(axis=1), x[whole:].sum(keepdims=True)]


def _halves(sums):
  """Totals [2] of the low and high 32-bit halves of uint64 partial sums."""
  sums = np.concatenate(sums) if sums else np.zeros(1, np.uint64)
  return int((sums & _LO32).sum()), int((sums >> 32).sum())


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
    tpr_BxF, auc_B = _weighted_stats_on_device(ranked, w_BxN, fprs)
  else:
    tpr_BxF, auc_B = weighted_stats(ranked, w_BxN, fprs)
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


def _json_floats(x):
  return [float(v) if np.isfinite(v) else None for v in np.asarray(x, dtype=np.float64)]
