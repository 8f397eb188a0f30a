"""lira.per_canary against independent references: sklearn's roc_auc_score per canary, scipy's exact binomial
interval, brute-force loops over the definitions for the calibrated thresholds, their counts, the bootstrap, the split
halves and the overlaps (full enumeration of random sets), and a synthetic run whose leaking canaries are known."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from lira import metrics
from lira import per_canary as ps
from lira import synthetic
from lira.errors import InputError
from lira.loo import leave_one_out


def scores(M=12, N=30, seed=0, ties=False, nan=0.0):
  """Leave-one-out-like scores: a per-canary shift for members, some ties (rounded), some undefined pairs."""
  rng = np.random.default_rng(seed)
  keep = synthetic.keep_matrix(M, N, seed)
  s = rng.normal(size=(M, N)) + keep * rng.uniform(0, 3, size=N)
  if ties:
    s = np.round(s)
  if nan:
    s[rng.uniform(size=(M, N)) < nan] = np.nan
  return s, keep


@pytest.mark.parametrize("ties,nan", [(False, 0.0), (True, 0.0), (True, 0.15)])
def test_per_canary_auc_is_sklearns_per_canary(ties, nan):
  s, keep = scores(ties=ties, nan=nan, seed=3)
  auc_N = ps.per_canary_auc(s, keep)
  for n in range(s.shape[1]):
    ok = np.isfinite(s[:, n])
    labels = keep[ok, n]
    if labels.all() or not labels.any():
      assert np.isnan(auc_N[n])
    else:
      # both sides sum integer ranks and counts in float64: equal up to rounding of one division
      assert auc_N[n] == pytest.approx(skm.roc_auc_score(labels, s[ok, n]), abs=1e-12)


def test_clopper_pearson_is_scipys_exact_interval():
  for n in (1, 2, 7, 16, 100):
    for k in sorted({0, 1, n // 2, n - 1, n}):
      low, high = ps.clopper_pearson(k, n)
      ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
      assert (float(low), float(high)) == pytest.approx((ci.low, ci.high), abs=1e-12)
  low, high = ps.clopper_pearson(np.array([0, 3]), np.array([0, 5]))
  assert np.isnan(low[0]) and np.isnan(high[0]) and np.isfinite(low[1])


def brute_threshold(out, fpr):
  """The smallest candidate t among the OUT scores with at most floor(fpr x n) of them above it."""
  out = sorted(out)
  k = math.floor(fpr * len(out) + 1e-9)
  for t in out:
    if sum(v > t for v in out) <= k:
      return t
  raise AssertionError


@pytest.mark.parametrize("fpr", [0.05, 0.2])
@pytest.mark.parametrize("ties,nan", [(False, 0.0), (True, 0.1)])
def test_calibrated_thresholds_and_counts_equal_a_loop_over_the_definition(fpr, ties, nan):
  s, keep = scores(M=12, N=25, seed=5, ties=ties, nan=nan)
  M, N = s.shape
  fold = ps.model_folds(M, 3, seed=1)
  assert sorted(np.bincount(fold)) == [4, 4, 4]
  for kind in ps.KINDS:
    cal = ps.calibrate(s, keep, fold, fpr, kind)
    for k in range(3):
      calibration = [m for m in range(M) if fold[m] != k]
      if kind == "global":
        out = [s[m, n] for m in calibration for n in range(N) if not keep[m, n] and np.isfinite(s[m, n])]
        assert cal["threshold"][k] == brute_threshold(out, fpr) and cal["n_calibration"][k] == len(out)
      else:
        for n in range(N):
          out = [s[m, n] for m in calibration if not keep[m, n] and np.isfinite(s[m, n])]
          if out:
            assert cal["threshold"][k, n] == brute_threshold(out, fpr)
          else:
            assert np.isnan(cal["threshold"][k, n])
    for m in range(M):
      for n in range(N):
        t = cal["threshold"][fold[m]] if kind == "global" else cal["threshold"][fold[m], n]
        decided = bool(np.isfinite(s[m, n]) and np.isfinite(t))
        assert cal["decided_MxN"][m, n] == decided
        assert cal["positive_MxN"][m, n] == (decided and s[m, n] > t)
    counts = ps.canary_counts(cal["positive_MxN"], cal["decided_MxN"], keep)
    for n in range(N):
      d = cal["decided_MxN"][:, n]
      assert counts["hits_N"][n] == sum(cal["positive_MxN"][m, n] for m in range(M) if keep[m, n])
      assert counts["n_in_N"][n] == sum(d[m] for m in range(M) if keep[m, n])
      assert counts["false_N"][n] == sum(cal["positive_MxN"][m, n] for m in range(M) if not keep[m, n])
      assert counts["n_out_N"][n] == sum(d[m] for m in range(M) if not keep[m, n])


def test_operating_point_rates_ppv_and_bootstrap_equal_a_loop():
  s, keep = scores(M=10, N=40, seed=7)
  cal = ps.calibrate(s, keep, ps.model_folds(10, 2), 0.1)
  counts = ps.canary_counts(cal["positive_MxN"], cal["decided_MxN"], keep)
  priors = (0.5, 0.01)
  point = ps.operating_point(counts, priors, n_boot=50, seed=4)
  tp = int((cal["positive_MxN"] & keep).sum())
  fp = int((cal["positive_MxN"] & ~keep).sum())
  tpr, fpr = tp / keep.sum(), fp / (~keep).sum()
  assert (point["tpr"], point["fpr"]) == (tpr, fpr)
  for pi in priors:
    assert point["ppv"][metrics.fpr_key(pi)] == pytest.approx(pi * tpr / (pi * tpr + (1 - pi) * fpr), rel=1e-12)
  ci = stats.binomtest(fp, int((~keep).sum())).proportion_ci(0.95, method="exact")
  assert point["fpr_ci_exact"] == pytest.approx([ci.low, ci.high], abs=1e-12)
  # the bootstrap: canaries drawn with replacement (evaluate's draws), the pairs of the drawn canaries pooled
  rng = np.random.default_rng(4)
  draws = rng.integers(0, 40, size=(50, 40))
  tpr_B, fpr_B = [], []
  for b in range(50):
    cols = draws[b]
    pos, neg = keep[:, cols], ~keep[:, cols]
    hit = cal["positive_MxN"][:, cols]
    tpr_B.append((hit & pos).sum() / pos.sum())
    fpr_B.append((hit & neg).sum() / neg.sum())
  tpr_B, fpr_B = np.array(tpr_B), np.array(fpr_B)
  assert point["tpr_ci_boot"] == pytest.approx(list(np.percentile(tpr_B, [2.5, 97.5])), abs=1e-12)
  ppv_B = 0.01 * tpr_B / (0.01 * tpr_B + 0.99 * fpr_B)
  assert point["ppv_ci_boot"]["0.01"] == pytest.approx(list(np.percentile(ppv_B, [2.5, 97.5])), abs=1e-12)
  assert np.isnan(ps.ppv(0.0, 0.0, 0.1))


def test_oracle_point_is_evaluates_tpr_at_its_realised_fpr():
  s, keep = scores(M=10, N=60, seed=2, ties=True)
  for fpr in (0.01, 0.05, 0.3):
    (t, realised, tpr, n_neg), = ps.oracle_points(s, keep, [fpr])
    assert tpr == metrics.tpr_at_fpr(s, keep, fpr)
    assert realised <= fpr and n_neg == (~keep).sum()
    assert (s[~keep] > t).mean() == realised and (s[keep] > t).mean() == tpr


def test_vulnerable_is_the_exact_lower_bound_above_fpr_plus_margin():
  hits, n_in = np.array([0, 3, 8, 16, 5]), np.array([16, 16, 16, 16, 0])
  v, low, _ = ps.vulnerable(hits, n_in, 0.01, 0.1)
  for i in range(4):
    lo = stats.binomtest(int(hits[i]), int(n_in[i])).proportion_ci(0.95, method="exact").low
    assert v[i] == (lo > 0.11)
  assert not v[4]  # no decided IN pair: never vulnerable


def test_concentration_is_the_top_canaries_share_of_true_positives():
  hits = np.array([0, 10, 1, 3, 0, 0, 0, 0, 0, 6] * 10)
  c = ps.concentration(hits, (0.01, 0.1))
  assert c["0.01"] == 10 / hits.sum()
  assert c["0.1"] == (10 * 10) / hits.sum()


def test_split_halves_give_every_canary_enough_models_of_each_class_or_name_the_canary():
  keep = synthetic.keep_matrix(32, 300, 0)
  a, b = ps.split_halves(keep, 4, seed=1)
  assert sorted(np.r_[a, b]) == list(range(32)) and len(a) == len(b) == 16
  for half in (a, b):
    assert keep[half].sum(axis=0).min() >= 4 and (~keep[half]).sum(axis=0).min() >= 4
  with pytest.raises(InputError, match=r"canary \d+ has 3 IN and 3 OUT models; split halves need 8 of each "
                     r"\(--min_models=4 per half; --nohalves skips them\)"):
    ps.split_halves(synthetic.keep_matrix(6, 5, 0), 4)


def test_overlap_and_its_chance_level_equal_full_enumeration():
  N = 9
  a = np.zeros(N, bool)
  a[[0, 1, 2, 5]] = True
  b = np.zeros(N, bool)
  b[[1, 2, 7]] = True
  o = ps.overlap(a, b)
  assert (o["a"], o["b"], o["both"]) == (4, 3, 2)
  assert o["jaccard"] == 2 / 5 and o["found"] == 2 / 4 and o["chance_found"] == 3 / N
  # random sets of the same sizes: every pair of subsets equally likely
  js, ge = [], 0
  subsets_a = list(itertools.combinations(range(N), 4))
  subsets_b = list(itertools.combinations(range(N), 3))
  for x in subsets_a:
    for y in subsets_b:
      both = len(set(x) & set(y))
      js.append(both / len(set(x) | set(y)))
      ge += both >= 2
  assert o["chance_jaccard"] == pytest.approx(np.mean(js), abs=1e-12)
  assert o["p_value"] == pytest.approx(ge / (len(subsets_a) * len(subsets_b)), abs=1e-12)


def test_rank_correlation_is_pearsons_of_the_ranks_over_defined_canaries():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=50), rng.normal(size=50)
  y[:10] = x[:10]
  x[3] = np.nan
  rho, n = ps.rank_correlation(x, y)
  ok = np.isfinite(x)
  expected = np.corrcoef(stats.rankdata(x[ok]), stats.rankdata(y[ok]))[0, 1]
  assert n == 49 and rho == pytest.approx(expected, abs=1e-12)


def test_audit_recovers_the_planted_canaries_and_the_global_threshold_holds_its_fpr():
  """On a synthetic run where only the planted canaries carry a (large) membership shift, the vulnerable set at 1% is
  the planted set, and the global threshold's held-out FPR interval covers 1%; the per-canary threshold (set from each
  canary's few calibration OUT scores: their maximum) does not hold it (expected about 1 / (OUT scores + 1))."""
  loss, keep, _ = synthetic.synthetic_losses(24, 400, 8, shift=6.0, frac_shifted=0.5, seed=2, frac_canaries=0.1)
  planted = synthetic.shifted_canaries(400, 0.1, 2)
  s = leave_one_out(loss, keep, covariance="univariate", shared=True)
  r = ps.audit(s, keep, fprs=(0.01,), n_boot=20)
  e = r["fprs"][0]
  v = e["canary"]["vulnerable_N"]
  assert (v & planted).sum() >= 0.9 * planted.sum() and (v & ~planted).sum() <= 2
  low, high = e["global"]["fpr_ci_exact"]
  assert low <= 0.01 <= high
  assert e["per_canary"]["fpr"] > 0.05
  # without signal a canary's AUC sits a little below one half (each IN model's own score is fitted without it)
  assert np.nanmean(r["auc_N"][planted]) > 0.95 and np.nanmean(r["auc_N"][~planted]) < 0.55


def test_options_are_checked_with_one_line():
  with pytest.raises(InputError, match="fprs must be in"):
    ps.PerSampleOptions(fprs="0.01,2")
  with pytest.raises(InputError, match="folds must be >= 2"):
    ps.PerSampleOptions(folds=1)
  assert ps.PerSampleOptions(priors="0.1, 0.01").priors == (0.1, 0.01)
