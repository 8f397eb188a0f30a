"""Tests for lira.metrics: ROC conventions, the weighted bootstrap ROC against sklearn and against the previous float64
implementation (kept below, verbatim, as the reference), the jax backend, summaries, and their tables
(lira.reports.tables)."""

import json

import numpy as np
import pytest
from sklearn import metrics as skm

from lira import metrics
from lira import weighted_roc
from lira.errors import InputError
from lira.reports import tables

# Tiny example with ties across classes. Sorted by score (label 1 = member):
#   0.9:+   0.8:+ 0.8:-   0.7:+   0.5:- 0.5:+   0.3:-   0.1:-       (4 positives, 4 negatives)
# One ROC point per distinct score (tied scores form ONE threshold), plus the (0, 0) start:
#   threshold  inf   0.9   0.8   0.7   0.5   0.3   0.1
#   TP           0     1     2     3     4     4     4
#   FP           0     0     1     1     2     3     4
#   TPR          0   .25   .50   .75     1     1     1
#   FPR          0     0   .25   .25   .50   .75     1
# TPR@FPR = max TPR over points with FPR <= target, no interpolation:
#   target 0    -> .25 (only the 0.9 threshold has no false positive)
#   target .2   -> .25 (the 0.8 tie group brings a positive AND a negative: it cannot be split)
#   target .25  -> .75 (thresholds 0.8 and 0.7 both have FPR .25; take the larger TPR)
#   target .5   -> 1.0
# AUC = 13/16 = .8125 by Mann-Whitney: each positive's wins over negatives, ties count 1/2:
#   0.9 -> 4, 0.8 -> 3 + .5, 0.7 -> 3, 0.5 -> 2 + .5.
TIE_SCORES = np.array([0.9, 0.8, 0.8, 0.7, 0.5, 0.5, 0.3, 0.1])
TIE_LABELS = np.array([1, 1, 0, 1, 0, 1, 0, 0], dtype=bool)


def _random_pairs(rng, m, n, decimals=None, shift=0.5):
  keep_MxN = rng.uniform(size=(m, n)).argsort(0) < m // 2
  scores_MxN = rng.normal(size=(m, n)) + shift * keep_MxN + 0.3 * rng.normal(size=(1, n))
  if decimals is not None:
    scores_MxN = np.round(scores_MxN, decimals)  # many ties, within and across classes
  return scores_MxN, keep_MxN


def _brute_tpr_at_fpr(scores, labels, target):
  """Independent reference: one threshold per distinct score, counted directly."""
  best = 0.0
  for t in np.unique(scores):
    fpr = np.sum(scores[~labels] >= t) / np.sum(~labels)
    if fpr <= target:
      best = max(best, np.sum(scores[labels] >= t) / np.sum(labels))
  return best


def test_roc_and_tpr_at_fpr_hand_example_with_ties():
  fpr, tpr, thresholds = metrics.roc(TIE_SCORES, TIE_LABELS)
  np.testing.assert_array_equal(fpr, [0, 0, .25, .25, .5, .75, 1])
  np.testing.assert_array_equal(tpr, [0, .25, .5, .75, 1, 1, 1])
  np.testing.assert_array_equal(thresholds[1:], [0.9, 0.8, 0.7, 0.5, 0.3, 0.1])
  assert metrics.tpr_at_fpr(TIE_SCORES, TIE_LABELS, 0.0) == 0.25
  assert metrics.tpr_at_fpr(TIE_SCORES, TIE_LABELS, 0.2) == 0.25
  assert metrics.tpr_at_fpr(TIE_SCORES, TIE_LABELS, 0.25) == 0.75
  assert metrics.tpr_at_fpr(TIE_SCORES, TIE_LABELS, 0.5) == 1.0
  # The same rule on a curve already computed (what plots read from a summary's ROC).
  for target, want in ((0.0, 0.25), (0.2, 0.25), (0.25, 0.75), (0.5, 1.0)):
    assert metrics.curve_tpr_at_fpr(fpr, tpr, target) == want
  assert metrics.curve_tpr_at_fpr([0.5, 1.0], [0.9, 1.0], 0.1) == 0.0  # no point at or below the target
  assert metrics.auc(TIE_SCORES, TIE_LABELS) == pytest.approx(13 / 16, abs=1e-15)  # sums of quarters: exact up to 1 ulp


def test_tpr_at_fpr_random_matches_brute_force():
  rng = np.random.default_rng(0)
  for decimals in (None, 1):
    scores_MxN, keep_MxN = _random_pairs(rng, 6, 40, decimals)
    s, y = scores_MxN.ravel(), keep_MxN.ravel()
    for target in (0.0, 0.01, 0.05, 0.1, 0.3, 1.0):
      assert metrics.tpr_at_fpr(s, y, target) == _brute_tpr_at_fpr(s, y, target)
    assert metrics.auc(s, y) == skm.roc_auc_score(y, s)


def _ranked_curve(ranked, w_N):
  """The ROC (fpr, tpr, thresholds) that rank_pairs' tie groups describe when pair (m, n) weighs w_N[n]."""
  w_1xN = np.asarray(w_N, dtype=np.int64)[None]
  cn_P1 = weighted_roc._cumulative(w_1xN, ranked.canary_neg_Pn)[0]
  cp_P1 = weighted_roc._cumulative(w_1xN, ranked.canary_pos_Pp)[0]
  fps_G1 = cn_P1[ranked.nneg_upto_G1].astype(np.float64)
  tps_G1 = cp_P1[ranked.npos_upto_G1].astype(np.float64)
  thresholds_G1 = np.r_[np.inf, ranked.score_P[ranked.end_P_G]]
  return fps_G1 / fps_G1[-1], tps_G1 / tps_G1[-1], thresholds_G1


def test_ranked_tie_groups_with_unit_weights_give_sklearns_roc_exactly():
  rng = np.random.default_rng(1)
  for decimals in (None, 1):
    scores_MxN, keep_MxN = _random_pairs(rng, 8, 30, decimals)
    valid_MxN = rng.uniform(size=keep_MxN.shape) > 0.1
    ranked = metrics.rank_pairs(scores_MxN, keep_MxN, valid_MxN)
    fpr, tpr, thresholds = _ranked_curve(ranked, np.ones(30, dtype=int))
    sk_fpr, sk_tpr, sk_thr = skm.roc_curve(keep_MxN[valid_MxN], scores_MxN[valid_MxN], drop_intermediate=False)
    # Exact: integer counts divided by the same integer totals.
    np.testing.assert_array_equal(fpr, sk_fpr)
    np.testing.assert_array_equal(tpr, sk_tpr)
    np.testing.assert_array_equal(thresholds, sk_thr)
    tpr_BxF, auc_B = weighted_roc.weighted_stats(ranked, np.ones((1, 30), dtype=int), [0.01, 0.1, 0.5])
    sk = [metrics.tpr_at_fpr(scores_MxN[valid_MxN], keep_MxN[valid_MxN], f) for f in (0.01, 0.1, 0.5)]
    np.testing.assert_array_equal(tpr_BxF[0], sk)
    # AUC sums ~100 float64 products in another order than sklearn's trapezoid: ~1e-15 relative.
    assert auc_B[0] == pytest.approx(skm.roc_auc_score(keep_MxN[valid_MxN], scores_MxN[valid_MxN]), rel=1e-12)


def test_weighted_stats_equal_sklearn_with_sample_weight():
  rng = np.random.default_rng(2)
  m, n = 6, 40
  scores_MxN, keep_MxN = _random_pairs(rng, m, n, decimals=1)
  ranked = metrics.rank_pairs(scores_MxN, keep_MxN)
  # Weights >= 1: the whole curve matches (sklearn drops zero-weight samples' thresholds).
  w_N = rng.integers(1, 5, size=n)
  fpr, tpr, _ = _ranked_curve(ranked, w_N)
  sw = np.broadcast_to(w_N, (m, n)).ravel()
  sk_fpr, sk_tpr, _ = skm.roc_curve(keep_MxN.ravel(), scores_MxN.ravel(), sample_weight=sw, drop_intermediate=False)
  np.testing.assert_array_equal(fpr, sk_fpr)
  np.testing.assert_array_equal(tpr, sk_tpr)
  # Bootstrap-like weights with zeros: TPR@FPR and AUC match sklearn with sample_weight.
  fprs = [0.0, 0.01, 0.05, 0.1, 0.25, 0.5]
  w_BxN = np.r_[metrics.bootstrap_weights(n, 5, seed=3), rng.integers(0, 4, size=(3, n))]
  tpr_BxF, auc_B = weighted_roc.weighted_stats(ranked, w_BxN, fprs)
  for b, w_N in enumerate(w_BxN):
    sw = np.broadcast_to(w_N, (m, n)).ravel()
    expect = [metrics.tpr_at_fpr(scores_MxN, keep_MxN, f, sample_weight=sw) for f in fprs]
    np.testing.assert_array_equal(tpr_BxF[b], expect)
    # As above: the same float64 sum in another order.
    assert auc_B[b] == pytest.approx(skm.roc_auc_score(keep_MxN.ravel(), scores_MxN.ravel(), sample_weight=sw),
                                     rel=1e-12)


def test_bootstrap_counts_and_leaves_out_replicates_without_a_roc():
  rng = np.random.default_rng(9)
  scores_MxN, keep_MxN = _random_pairs(rng, 6, 4)
  valid_MxN = keep_MxN.copy()
  valid_MxN[:, 0] = True  # only canary 0 has non-member pairs: a replicate without it has no ROC
  n_boot, fprs = 200, (0.1, 0.5)
  w_BxN = metrics.bootstrap_weights(4, n_boot, seed=5)
  defined_B = w_BxN[:, 0] > 0
  assert 0 < (~defined_B).sum() < n_boot  # P(canary 0 not drawn) = (3/4)^4 ~ 0.32
  summary = metrics.summarize(scores_MxN, keep_MxN, fprs=fprs, n_boot=n_boot, seed=5, valid_MxN=valid_MxN)
  assert summary["n_boot_undefined"] == (~defined_B).sum()
  # The intervals are numpy's percentiles of sklearn's weighted AUC over the defined replicates alone.
  s, y = scores_MxN[valid_MxN], keep_MxN[valid_MxN]
  canary = np.broadcast_to(np.arange(4), keep_MxN.shape)[valid_MxN]
  auc_B = [skm.roc_auc_score(y, s, sample_weight=w_N[canary]) for w_N in w_BxN[defined_B]]
  # Weighted AUC sums in another order than sklearn: ~1e-15 relative; percentiles interpolate linearly.
  np.testing.assert_allclose(summary["auc_ci"], np.percentile(auc_B, [2.5, 97.5]), rtol=1e-12)
  k = summary["n_boot_undefined"]
  note = f"X: intervals from {n_boot - k} of {n_boot} bootstrap replicates; {k} drew no member or no non-member"
  assert note in tables.format_table([("X", summary)])


def test_bootstrap_weights_resample_canaries():
  w_BxN = metrics.bootstrap_weights(50, 7, seed=0)
  assert w_BxN.shape == (7, 50)
  np.testing.assert_array_equal(w_BxN.sum(1), 50)
  np.testing.assert_array_equal(w_BxN, metrics.bootstrap_weights(50, 7, seed=0))


def test_bootstrap_steps_do_not_change_results(monkeypatch):
  rng = np.random.default_rng(4)
  for decimals in (None, 1):  # steps are cut between tie groups, even where a group is longer than a step
    scores_MxN, keep_MxN = _random_pairs(rng, 8, 60, decimals)
    full = metrics.bootstrap_ci(scores_MxN, keep_MxN, (0.01, 0.1), n_boot=30)
    monkeypatch.setattr(weighted_roc, "_BLOCK", 5)  # ~50 steps, positives in chunks of 5
    stepped = metrics.bootstrap_ci(scores_MxN, keep_MxN, (0.01, 0.1), n_boot=30)
    monkeypatch.undo()
    np.testing.assert_array_equal(full[0], stepped[0])
    np.testing.assert_array_equal(full[1], stepped[1])
    assert full[2] == stepped[2] == 0


def test_is_resolved():
  assert metrics.is_resolved(10_000, 0.0001)
  assert not metrics.is_resolved(9_999, 0.0001)
  assert metrics.is_resolved(1_000, 0.001)
  assert metrics.is_resolved(100, 0.01)
  assert not metrics.is_resolved(99, 0.01)
  assert metrics.min_negatives(0.0001) == 10_000
  assert metrics.min_negatives(0.01) == 100


def test_summarize_marks_unresolved_and_is_json():
  rng = np.random.default_rng(5)
  scores_MxN, keep_MxN = _random_pairs(rng, 4, 100)  # 200 negatives: 1% resolved, 0.1% and 0.01% not
  summary = metrics.summarize(scores_MxN, keep_MxN, n_boot=20)
  json.dumps(summary, allow_nan=False)
  assert (summary["n_pos"], summary["n_neg"], summary["n_excluded"]) == (200, 200, 0)
  assert summary["tpr"]["0.01"]["resolved"]
  assert not summary["tpr"]["0.001"]["resolved"]
  assert not summary["tpr"]["0.0001"]["resolved"]
  assert summary["tpr"]["0.0001"]["min_negatives"] == 10_000
  assert summary["tpr"]["0.01"]["tpr"] == metrics.tpr_at_fpr(scores_MxN, keep_MxN, 0.01)
  assert summary["auc"] == metrics.auc(scores_MxN, keep_MxN)
  table = tables.format_table([("Independent Shared", summary)])
  assert "n/r" in table and "10,000" in table and "1,000" in table and "200" in table
  row = table.splitlines()[2]
  assert row.count("n/r") == 2 and f"{100 * summary['tpr']['0.01']['tpr']:.2f}" in row
  md = tables.format_markdown([("Independent Shared", summary), ("OAS Shared", summary)])
  assert md.startswith("| variant | AUC | TPR@1% | TPR@0.1% | TPR@0.01% |")
  assert "n/r = not resolved" in md


def test_non_finite_scores_raise_with_pair_named():
  rng = np.random.default_rng(6)
  scores_MxN, keep_MxN = _random_pairs(rng, 4, 10)
  scores_MxN[2, 3] = np.nan
  scores_MxN[3, 1] = np.inf
  with pytest.raises(ValueError, match=r"model 2, canary 3"):
    metrics.summarize(scores_MxN, keep_MxN, n_boot=0)
  valid_MxN = np.isfinite(scores_MxN)
  summary = metrics.summarize(scores_MxN, keep_MxN, n_boot=10, valid_MxN=valid_MxN)
  assert summary["n_excluded"] == 2
  assert summary["n_pos"] + summary["n_neg"] == 38
  assert summary["auc"] == metrics.auc(scores_MxN[valid_MxN], keep_MxN[valid_MxN])


def test_ci_contains_point_estimate():
  rng = np.random.default_rng(7)
  scores_MxN, keep_MxN = _random_pairs(rng, 16, 500, shift=1.0)
  summary = metrics.summarize(scores_MxN, keep_MxN, fprs=(0.01, 0.1), n_boot=100)
  for key in ("0.01", "0.1"):
    lo, hi = summary["tpr"][key]["ci"]
    assert lo < summary["tpr"][key]["tpr"] < hi
  lo, hi = summary["auc_ci"]
  # 500 canaries x 16 models: the measured 95% interval is 0.021 wide (deterministic data, seed 7).
  assert lo < summary["auc"] < hi and hi - lo < 0.05


def test_downsampled_roc_keeps_low_fpr_end():
  rng = np.random.default_rng(8)
  scores_MxN, keep_MxN = _random_pairs(rng, 20, 1000)
  summary = metrics.summarize(scores_MxN, keep_MxN, n_boot=0)
  fpr, tpr = np.array(summary["roc"]["fpr"]), np.array(summary["roc"]["tpr"])
  full_fpr, full_tpr, _ = metrics.roc(scores_MxN, keep_MxN)
  assert len(fpr) <= 2000 < len(full_fpr)
  assert np.all(np.diff(fpr) >= 0) and (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
  # The first 100 distinct FPRs are all kept, and TPR at the summary FPRs is unchanged.
  np.testing.assert_array_equal(np.unique(full_fpr)[:100], np.unique(fpr)[:100])
  for f in (0.01, 0.001, 0.0001, 0.003, 0.2):
    want = full_tpr[full_fpr <= f].max()
    got = tpr[fpr <= f].max()
    # Off the summary FPRs the downsampled curve is read at the kept point below: the log grid's step
    # (~0.5% in FPR) moves this smooth curve's TPR by 4e-4 at most here (deterministic data, seed 8).
    assert got == want if f in (0.01, 0.001, 0.0001) else abs(got - want) < 0.01


# ----------------------------------------------------------------------------------------------
# The previous weighted_stats, verbatim (float64 sums over [replicate, pair] arrays): the new one must equal it.

_REF_CHUNK_ELEMENTS = 8_000_000


def _ref_cumulative(w_BxN, canary_P):
  """Running weight totals [B, P+1] (leading zero) of pairs whose canaries are canary_P, in order."""
  w_BxP = np.take(w_BxN, canary_P, axis=1)
  cum_BxP1 = np.zeros((w_BxN.shape[0], canary_P.size + 1), dtype=w_BxN.dtype)
  np.cumsum(w_BxP, axis=1, out=cum_BxP1[:, 1:])
  return cum_BxP1


def _ref_largest_count_within(fpr, total_B):
  """Largest integer c per replicate with c / total <= fpr in float64, as sklearn's fpr <= target compares."""
  c_B = np.floor(fpr * total_B)
  with np.errstate(divide="ignore", invalid="ignore"):
    c_B = np.where((c_B + 1) / total_B <= fpr, c_B + 1, c_B)
    c_B = np.where(c_B / total_B > fpr, c_B - 1, c_B)
  return c_B


def _ref_weighted_stats(ranked, w_BxN, fprs):
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
  chunk = max(1, _REF_CHUNK_ELEMENTS // max(1, ranked.score_P.size))
  for lo in range(0, n_boot, chunk):
    hi = min(n_boot, lo + chunk)
    cn_BxPn1 = _ref_cumulative(w_BxN[lo:hi], ranked.canary_neg_Pn)
    cp_BxPp1 = _ref_cumulative(w_BxN[lo:hi], ranked.canary_pos_Pp)
    tn_B, tp_B = total_neg_B[lo:hi].astype(np.float64), total_pos_B[lo:hi].astype(np.float64)
    ok_B = (tn_B > 0) & (tp_B > 0)
    for f, fpr in enumerate(fprs):
      cmax_B = _ref_largest_count_within(fpr, tn_B)
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


# Targets from below the smallest resolvable to all of them.
_EQUALITY_FPRS = (0.0, 1e-6, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0)


def _equality_cases():
  """(ranked pairs, weights [B, N]) with ties, valid masks, canaries alone in their class (replicates without a
  ROC), odd and single replicates, bootstrap counts, arbitrary nonnegative weights and zero rows."""
  rng = np.random.default_rng(11)
  for m, n, decimals, masked in ((6, 40, None, False), (8, 30, 1, True), (5, 3, 0, False), (4, 2, None, True),
                                 (12, 25, 2, False), (7, 50, 1, False)):
    scores_MxN, keep_MxN = _random_pairs(rng, m, n, decimals)
    valid_MxN = rng.uniform(size=keep_MxN.shape) > 0.25 if masked else None
    ranked = metrics.rank_pairs(scores_MxN, keep_MxN, valid_MxN)
    for w_BxN in (metrics.bootstrap_weights(n, 9, seed=m), rng.integers(0, 5, size=(4, n)),
                  rng.integers(0, 3, size=(5, n)) * (rng.uniform(size=(5, 1)) < 0.6), np.ones((1, n), np.int64)):
      yield ranked, w_BxN


def _assert_equal_stats(got, want):
  for g, w in zip(got, want):
    assert g.shape == w.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))  # the same replicates without a ROC
    assert np.array_equal(g, w, equal_nan=True)  # bit for bit


def test_weighted_stats_equal_the_previous_implementation_bit_for_bit():
  n_undefined = 0
  for ranked, w_BxN in _equality_cases():
    want = _ref_weighted_stats(ranked, w_BxN, _EQUALITY_FPRS)
    _assert_equal_stats(weighted_roc.weighted_stats(ranked, w_BxN, _EQUALITY_FPRS), want)
    n_undefined += np.isnan(want[1]).sum()
  assert n_undefined > 0  # some replicates drew no positive or no negative pair


def test_weighted_stats_outside_the_exact_bounds_run_the_reference():
  rng = np.random.default_rng(12)
  scores_MxN, keep_MxN = _random_pairs(rng, 6, 20, decimals=1)
  ranked = metrics.rank_pairs(scores_MxN, keep_MxN)
  # Weights too large for the 32-bit halves, and negative weights: the reference's own arithmetic.
  for w_BxN in (rng.integers(0, 2**22, size=(3, 20)), rng.integers(-2, 3, size=(3, 20))):
    _assert_equal_stats(weighted_roc.weighted_stats(ranked, w_BxN, _EQUALITY_FPRS),
                        _ref_weighted_stats(ranked, w_BxN, _EQUALITY_FPRS))


def test_descending_order_with_near_ties_and_signed_zeros():
  rng = np.random.default_rng(13)
  base = rng.normal(size=300) * 10.0 ** rng.integers(-300, 300, size=300)
  # Neighbours one ulp apart differ only in the bits the sort key drops; -0.0 and 0.0 tie.
  score_P = np.r_[base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf), base[:50], 0.0, -0.0, 0.0, -1e-320]
  score_P = score_P[rng.permutation(score_P.size)]
  order_P, sorted_P = metrics._descending_order(score_P)
  np.testing.assert_array_equal(np.sort(order_P), np.arange(score_P.size))
  np.testing.assert_array_equal(sorted_P, score_P[order_P])
  np.testing.assert_array_equal(sorted_P, np.sort(score_P)[::-1])


def test_ranked_roc_and_auc_equal_sklearn():
  rng = np.random.default_rng(14)
  for decimals, masked in ((None, False), (1, False), (1, True), (0, True), (2, False)):
    scores_MxN, keep_MxN = _random_pairs(rng, 10, 50, decimals)
    valid_MxN = rng.uniform(size=keep_MxN.shape) > 0.2 if masked else np.ones(keep_MxN.shape, bool)
    ranked = metrics.rank_pairs(scores_MxN, keep_MxN, valid_MxN)
    y, s = keep_MxN[valid_MxN], scores_MxN[valid_MxN]
    fpr, tpr, thresholds = metrics.ranked_roc(ranked)
    sk_fpr, sk_tpr, sk_thresholds = skm.roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_array_equal(fpr, sk_fpr)
    np.testing.assert_array_equal(tpr, sk_tpr)
    np.testing.assert_array_equal(thresholds, sk_thresholds)
    # The same corners and trapezoid sum as roc_auc_score: equal, which is more than the 1e-12 asked for.
    assert metrics.ranked_auc(ranked) == skm.roc_auc_score(y, s)


def test_summary_points_are_sklearns_and_intervals_the_references():
  rng = np.random.default_rng(15)
  scores_MxN, keep_MxN = _random_pairs(rng, 8, 120, decimals=2)
  valid_MxN = rng.uniform(size=keep_MxN.shape) > 0.1
  fprs = (0.01, 0.1)
  summary = metrics.summarize(scores_MxN, keep_MxN, fprs=fprs, n_boot=40, seed=3, valid_MxN=valid_MxN)
  s, y = scores_MxN[valid_MxN], keep_MxN[valid_MxN]
  assert summary["auc"] == skm.roc_auc_score(y, s)
  fpr_G, tpr_G, _ = skm.roc_curve(y, s, drop_intermediate=False)
  keep = metrics.downsample_roc(fpr_G, tpr_G, fprs=fprs)
  assert summary["roc"] == {"fpr": fpr_G[keep].tolist(), "tpr": tpr_G[keep].tolist()}
  tpr_BxF, auc_B = _ref_weighted_stats(metrics.rank_pairs(scores_MxN, keep_MxN, valid_MxN),
                                       metrics.bootstrap_weights(120, 40, seed=3), fprs)
  for f, fpr in enumerate(fprs):
    assert summary["tpr"][metrics.fpr_key(fpr)]["tpr"] == metrics.curve_tpr_at_fpr(fpr_G, tpr_G, fpr)
    assert summary["tpr"][metrics.fpr_key(fpr)]["ci"] == list(metrics._percentile_ci(tpr_BxF[:, f], 0.95))
  assert summary["auc_ci"] == list(metrics._percentile_ci(auc_B, 0.95))


def test_jax_backend_equals_numpy():
  by_pairs = {}
  for ranked, w_BxN in _equality_cases():  # each case's weights in one call: one compilation per set of pairs
    by_pairs.setdefault(id(ranked), (ranked, []))[1].append(w_BxN)
  for ranked, w_list in by_pairs.values():
    w_BxN = np.concatenate(w_list)
    _assert_equal_stats(weighted_roc.weighted_stats_on_device(ranked, w_BxN, _EQUALITY_FPRS),
                        weighted_roc.weighted_stats(ranked, w_BxN, _EQUALITY_FPRS))
  rng = np.random.default_rng(16)
  scores_MxN, keep_MxN = _random_pairs(rng, 8, 60, decimals=1)
  kwargs = {"fprs": (0.01, 0.1), "n_boot": 25, "seed": 2}
  assert (metrics.summarize(scores_MxN, keep_MxN, backend="jax", **kwargs)
          == metrics.summarize(scores_MxN, keep_MxN, **kwargs))


def test_bad_backend_raises():
  scores_MxN, keep_MxN = _random_pairs(np.random.default_rng(17), 4, 10)
  with pytest.raises(InputError, match="backend"):
    metrics.summarize(scores_MxN, keep_MxN, backend="torch")
  with pytest.raises(InputError, match="backend"):
    metrics.bootstrap_ci(scores_MxN, keep_MxN, backend="cuda")


def test_bootstrap_runs_on_the_host_unless_a_device_is_there():
  from lira import metrics_jax
  import jax
  assert metrics_jax.bootstrap_backend("numpy") == "numpy"
  assert metrics_jax.bootstrap_backend("jax") == ("numpy" if jax.default_backend() == "cpu" else "jax")


@pytest.mark.parametrize("labels,words", [
    (np.random.default_rng(1).random(200), "labels must be boolean (or 0/1)"),
    (np.random.default_rng(1).integers(1, 3, 200), "labels must be boolean (or 0/1)"),
    (np.zeros(200, bool), "need both members and non-members"),
])
def test_every_public_metric_refuses_the_labels_summarize_refuses(labels, words):
  """Labels in [0, 1) or {1, 2} would give a TPR of 0.0 and an AUC of NaN: every public function refuses them."""
  import lira
  scores = np.random.default_rng(0).normal(size=200)
  for fn in (lambda: lira.tpr_at_fpr(scores, labels, 0.01), lambda: lira.auc(scores, labels),
             lambda: metrics.roc(scores, labels), lambda: lira.summarize(scores[None], labels[None], n_boot=0)):
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
      fn()
  with pytest.raises(InputError, match=r"scores \[200\] and labels \[199\] must have the same shape"):
    lira.auc(scores, scores[1:] > 0)
