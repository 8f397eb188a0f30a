"""The canary bootstrap's replicate statistics over one sorted order of pairs (lira.metrics.bootstrap_ci).

A replicate resamples canaries, so it is a weighting of canaries: w[b, n] copies of canary n's pairs. Its pooled ROC
is then a weighted running count over the pairs sorted once (lira.metrics.rank_pairs: descending scores, tie groups),
never a re-sort: at each target FPR the TPR is the positive weight above the last tie group whose running negative
weight stays within FPR times the replicate's negative total, and the AUC is the trapezoid over tie groups, the sum
over positives of w * (negatives below + half the tied ones). The sums are of integers, so they are exact:
`weighted_stats` packs two replicates into the 32-bit halves of uint64 words on the host's threads,
`weighted_stats_on_device` runs the same sums on jax's default device (lira.metrics_jax), and both equal
`weighted_stats_reference` (float64 sums over [replicate, pair] arrays) bit for bit wherever its sums are exact.
`ranked` is a lira.metrics.RankedPairs.
"""

import bisect
import concurrent.futures
import os
import threading

import numpy as np
import threadpoolctl

# Replicates processed together by weighted_stats_reference; bounds memory to a few [chunk, pairs] int arrays.
_CHUNK_ELEMENTS = 8_000_000
_BLOCK = 1 << 16  # pairs of one class per step of weighted_stats: the step's buffers stay in the CPU's cache
_LO32 = np.uint64(0xFFFFFFFF)


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


def weighted_stats_reference(ranked, w_BxN, fprs):
  """weighted_stats as float64 sums over [replicate, pair] arrays: its fallback outside the exact integer bounds, and
  its reference in the tests."""
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
    return weighted_stats_reference(ranked, w_BxN, fprs)
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


def weighted_stats_on_device(ranked, w_BxN, fprs):
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
