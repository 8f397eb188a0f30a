"""lira.cov_permutation: the statistic against numpy's corrcoef, the p-value against a brute-force count, and the
test's behaviour on independent and on correlated positions."""

import numpy as np
import pytest
import scipy.stats

from lira import cov_permutation
from lira import transforms
from lira.errors import InputError


def brute_statistic(x_SxT):
  keep = x_SxT.std(axis=0) > 0
  r = np.corrcoef(x_SxT[:, keep], rowvar=False)
  t = r.shape[0]
  return sum(abs(r[i, j]) for i in range(t) for j in range(t) if i != j) / (t * (t - 1))


def test_statistic_matches_corrcoef_and_skips_constant_columns():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(12, 7))
  x[:, 3] = 2.5  # constant: no correlation defined
  # corrcoef and the normalised Gram matrix round differently by a few float64 eps per entry
  assert abs(cov_permutation.mean_abs_offdiag_corr(x) - brute_statistic(x)) < 1e-12
  assert np.isnan(cov_permutation.mean_abs_offdiag_corr(np.ones((5, 3))))


def test_pvalue_equals_brute_force_count():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(10, 6))
  observed, p = cov_permutation.permutation_test(x, num_permutations=50, rng=123)
  rng2 = np.random.default_rng(123)  # the same draws, permuted one column at a time by a loop
  hits = 0
  for _ in range(50):
    order = np.argsort(rng2.random(x.shape), axis=0)
    y = np.column_stack([x[order[:, t], t] for t in range(x.shape[1])])
    hits += brute_statistic(y) >= brute_statistic(x) - 1e-12
  assert observed == pytest.approx(brute_statistic(x), abs=1e-12)
  assert p == (1 + hits) / 51


def test_independent_positions_reject_at_the_nominal_rate_and_correlated_ones_always():
  rng = np.random.default_rng(2)
  M, N, T = 16, 300, 10
  keep = np.zeros((M, N), bool)
  keep[:8] = True
  independent = rng.normal(size=(M, N, T))
  _, p_ind = cov_permutation.canaries_test(independent, keep, num_permutations=19, seed=0)
  # Under the null the p-value is uniform on {1/20, ..., 1}: P(p <= 0.05) = 0.05 exactly. 300 canaries: the count
  # is Binomial(300, 0.05); reject only beyond its 99.99% quantile on either side.
  lo, hi = scipy.stats.binom.ppf([1e-4, 1 - 1e-4], N, 0.05)
  assert lo <= (p_ind <= 0.05).sum() <= hi
  factor = rng.normal(size=(M, N, 1))
  correlated = factor + 0.3 * rng.normal(size=(M, N, T))  # correlation ~0.92 between every pair of positions
  observed, p_cor = cov_permutation.canaries_test(correlated, keep, num_permutations=19, seed=0)
  assert (p_cor == 1 / 20).all() and (observed > 0.5).all()  # population 0.92; 8 models per class scatter it


def test_bad_input_is_named():
  with pytest.raises(InputError, match="S >= 3"):
    cov_permutation.permutation_test(np.zeros((2, 4)))
  with pytest.raises(InputError, match="disagree"):
    cov_permutation.canaries_test(np.zeros((4, 3, 2)), np.zeros((4, 2), bool))


def test_summarize_reads_the_first_canaries_and_positions_of_a_run():
  rng = np.random.default_rng(3)
  loss = rng.exponential(size=(10, 30, 12)).astype(np.float32)
  keep = np.zeros((10, 30), bool)
  keep[:5] = True
  d = cov_permutation.summarize(loss, keep, max_canaries=20, max_positions=8, num_permutations=9)
  obs, p = cov_permutation.canaries_test(transforms.to_statistic(loss[:, :20, :8]), keep[:, :20], num_permutations=9,
                                       seed=0)
  assert d["canaries"] == 20 and d["positions"] == 8 and d["models_per_canary"] == [5, 5]
  # with 9 permutations the smallest p is 0.1: no share at 0.05 or 0.01 (not 0%, which would say no structure)
  assert d["share_p_le_0.05"] is None and d["share_p_le_0.01"] is None and d["smallest_p"] == 0.1
  assert d["median_statistic"] == round(float(np.median(obs)), 4)
  d = cov_permutation.summarize(loss, keep, max_canaries=20, max_positions=8, num_permutations=19)
  obs, p = cov_permutation.canaries_test(transforms.to_statistic(loss[:, :20, :8]), keep[:, :20], num_permutations=19,
                                       seed=0)
  assert d["share_p_le_0.05"] == round(float((p <= 0.05).mean()), 4) and d["share_p_le_0.01"] is None


def test_independent_abs_corr_matches_its_closed_forms_and_a_simulation():
  assert cov_permutation.independent_abs_corr(3) == pytest.approx(2 / np.pi, rel=1e-12)  # density 1/(pi sqrt(1-r^2))
  assert cov_permutation.independent_abs_corr(4) == pytest.approx(0.5, rel=1e-12)  # uniform on [-1, 1]
  rng = np.random.default_rng(4)
  S, reps = 10, 40_000
  x = rng.normal(size=(reps, S, 2))
  x -= x.mean(axis=1, keepdims=True)
  r = (x[..., 0] * x[..., 1]).sum(1) / np.sqrt((x[..., 0] ** 2).sum(1) * (x[..., 1] ** 2).sum(1))
  # |r| has standard deviation below 0.3 at S = 10: the mean of 40,000 draws is within 6 standard errors
  assert abs(np.abs(r).mean() - cov_permutation.independent_abs_corr(S)) < 6 * 0.3 / np.sqrt(reps)
  with pytest.raises(InputError, match="at least 3"):
    cov_permutation.independent_abs_corr(2)


def test_a_masked_canary_is_tested_on_its_scored_positions_only():
  rng = np.random.default_rng(5)
  M, N, T = 8, 6, 5
  stat = rng.normal(size=(M, N, T))
  keep = np.zeros((M, N), bool)
  keep[:4] = True
  mask = np.ones((N, T), bool)
  mask[1, 3:] = False
  mask[2, 1:] = False  # one position left: nothing to correlate
  stat[:, 1, 3:] = np.nan  # padding
  obs, p = cov_permutation.canaries_test(stat, keep, num_permutations=9, seed=0, mask_NxT=mask)
  assert np.isnan(obs[2]) and np.isnan(p[2])
  assert obs[1] == pytest.approx(brute_statistic(stat[4:, 1, :3]), abs=1e-12)
  assert np.isfinite(obs[[0, 1, 3, 4, 5]]).all()
