"""lira.membership_model against independent references: sklearn's OAS, brute-force formulas written here,
Monte Carlo draws for the closed-form oracle and large-sample checks of the simulations."""

import numpy as np
import pytest
from sklearn.covariance import OAS

from lira import membership_model as ms
from lira import metrics
from lira import synthetic
from lira.errors import InputError
from lira.transforms import to_statistic


def _rows(M=24, L=7, seed=0):
  rng = np.random.default_rng(seed)
  keep = np.zeros(M, bool)
  keep[rng.permutation(M)[:M // 2]] = True
  x = rng.normal(size=(M, L)) @ rng.normal(size=(L, L)) + 0.7 * keep[:, None] * rng.normal(size=L)
  return x, keep


def test_fit_canary_equals_class_means_and_sklearn_oas_of_the_pooled_residuals():
  x, keep = _rows()
  mu_out, d, S, C, r = ms.fit_canary(x, keep)
  np.testing.assert_allclose(mu_out, x[~keep].mean(0), rtol=1e-13)
  np.testing.assert_allclose(d, x[keep].mean(0) - x[~keep].mean(0), rtol=1e-12, atol=1e-13)
  want_r = np.vstack([x[i] - (x[keep] if keep[i] else x[~keep]).mean(0) for i in range(len(keep))])
  np.testing.assert_allclose(r, want_r, atol=1e-13)
  np.testing.assert_allclose(S, want_r.T @ want_r / len(keep), rtol=1e-12, atol=1e-13)
  np.testing.assert_allclose(C, OAS(assume_centered=True).fit(want_r).covariance_, rtol=1e-10, atol=1e-12)
  c_in, c_out = ms.class_oas(r, keep)
  np.testing.assert_allclose(c_in, OAS(assume_centered=True).fit(want_r[keep]).covariance_, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(c_out, OAS(assume_centered=True).fit(want_r[~keep]).covariance_, rtol=1e-10,
                             atol=1e-12)
  with pytest.raises(InputError, match="2 IN and 2 OUT"):
    ms.fit_canary(x[:3], np.array([True, False, False]))


def test_co_movement_is_the_variance_of_the_token_mean_over_the_mean_token_variance():
  x, keep = _rows(seed=1)
  *_, S, _, r = ms.fit_canary(x, keep)
  assert ms.co_movement(S) == pytest.approx(np.var(r.mean(1)) / np.mean(np.var(r, axis=0)), rel=1e-12)
  assert ms.co_movement(np.full((5, 5), 2.0)) == pytest.approx(1.0)  # one factor: the tokens move as one
  assert ms.co_movement(np.diag([1.0, 2.0, 3.0, 4.0])) == pytest.approx(0.25)  # independent: 1/L


def test_uniformity_brute_force_and_its_limits():
  x, keep = _rows(seed=2)
  _, d, S, _, _ = ms.fit_canary(x, keep)
  n_in, n_out = int(keep.sum()), int((~keep).sum())
  sd = np.sqrt(np.diag(S))
  delta, k, L = d / sd, 1 / n_in + 1 / n_out, len(d)
  corr = S / np.outer(sd, sd)
  u, snr = ms.uniformity(d, S, n_in, n_out)
  assert u == pytest.approx((delta.sum()**2 - k * corr.sum()) / (L * (delta @ delta - k * L)), rel=1e-12)
  assert snr == pytest.approx(delta @ delta / (k * L), rel=1e-12)
  # Equal standardised effects far above the noise: U -> 1; one token carrying all of it: U -> 1/L.
  assert ms.uniformity(1e4 * sd, S, n_in, n_out)[0] == pytest.approx(1.0, rel=1e-6)
  one = np.zeros(L)
  one[3] = 1e4 * sd[3]
  assert ms.uniformity(one, S, n_in, n_out)[0] == pytest.approx(1 / L, rel=1e-6)


def test_oracle_terms_identities():
  """a = w^T d / 2 and b^2 = w^T C w: calibrated tests (univariate, full) have b^2 = 2a; the independent test's
  b^2 / 2a is kappa, 1 when C is diagonal."""
  x, keep = _rows(seed=3)
  _, d, _, C, _ = ms.fit_canary(x, keep)
  terms, kappa = ms.oracle_terms(d, C)
  for name in ("univariate", "full"):
    a, b = terms[name]
    assert b**2 == pytest.approx(2 * a, rel=1e-10)
  a, b = terms["full"]
  assert 2 * a == pytest.approx(d @ np.linalg.solve(C, d), rel=1e-12)
  a, b = terms["univariate"]
  assert 2 * a == pytest.approx(d.sum()**2 / C.sum(), rel=1e-12)
  a, b = terms["independent"]
  assert b**2 / (2 * a) == pytest.approx(kappa, rel=1e-10)
  assert ms.oracle_terms(d, np.diag(np.diag(C)))[1] == pytest.approx(1.0, rel=1e-12)
  # With C diagonal the independent test is the full one.
  diag_terms = ms.oracle_terms(d, np.diag(np.diag(C)))[0]
  np.testing.assert_allclose(diag_terms["independent"], diag_terms["full"], rtol=1e-12)


def test_oracle_tpr_equals_monte_carlo_draws():
  """20 canaries, 50,000 IN and 50,000 OUT scores each (1,000,000 per class): at 1% FPR the TPR's binomial standard
  error is below 5e-4 and the threshold's (10,000 negatives above it, a relative 1% in FPR) moves TPR by well under
  2e-3 on these curves; 0.01 is more than 5 standard errors of both."""
  rng = np.random.default_rng(0)
  a = rng.uniform(0.2, 3.0, size=20)
  b = np.sqrt(2 * a) * rng.uniform(0.8, 2.5, size=20)
  K = 50_000
  for gap in (1.0, 1.7):
    pos = (gap**2 * a[:, None] + gap * b[:, None] * rng.standard_normal((20, K))).ravel()
    neg = (-gap**2 * a[:, None] + gap * b[:, None] * rng.standard_normal((20, K))).ravel()
    scores = np.concatenate([pos, neg])
    labels = np.concatenate([np.ones_like(pos, bool), np.zeros_like(neg, bool)])
    want = metrics.tpr_at_fpr(scores, labels, 0.01)
    assert ms.oracle_tpr(a, b, 0.01, gap=gap) == pytest.approx(want, abs=0.01)


def _params(M=8, N=3, L=5, seed=0):
  rng = np.random.default_rng(seed)
  keep = synthetic.keep_matrix(M, N, seed)
  params = []
  for _ in range(N):
    A = rng.normal(size=(L, L))
    C = A @ A.T / L + 0.3 * np.eye(L)
    C_in, C_out = 0.5 * C, 1.5 * np.diag(np.diag(C))
    params.append((np.ones(L, bool), rng.normal(size=L), rng.normal(size=L), C, C_in, C_out,
                   rng.normal(size=(M, L))))
  return params, keep


@pytest.mark.parametrize("structure", ["gaussian", "gaussian_diagonal", "gaussian_classwise"])
def test_gaussian_simulations_have_the_fitted_means_and_covariances(structure):
  """4,000 models (2,000 per class): a mean's standard error is sd / 45 and a covariance entry's is about
  sqrt((C_ss C_tt + C_st^2) / 2000) <= 0.032 sqrt(C_ss C_tt); the tolerances are 5 of them."""
  params, keep = _params(M=4000, N=2, L=4)
  loss = ms.simulate(params, keep, 4, gap=2.0, structure=structure, seed=1)
  z = to_statistic(loss)
  for n, (_, mu_out, d, C, C_in, C_out, _) in enumerate(params):
    k = keep[:, n]
    zi, zo = z[k, n], z[~k, n]
    want = {"gaussian": (C, C), "gaussian_diagonal": (np.diag(np.diag(C)),) * 2,
            "gaussian_classwise": (C_in, C_out)}[structure]
    for rows, cov, mean in ((zo, want[1], mu_out), (zi, want[0], mu_out + 2.0 * d)):
      sd = np.sqrt(np.diag(cov))
      assert np.all(np.abs(rows.mean(0) - mean) < 5 * sd / np.sqrt(len(rows)))
      tol = 5 * np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / len(rows))
      assert np.all(np.abs(np.cov(rows.T, bias=True) - cov) < tol + 1e-6)


def test_shuffled_simulations_move_the_real_residual_rows():
  params, keep = _params(M=10, N=3, L=5)
  z_in_class = to_statistic(ms.simulate(params, keep, 5, gap=3.0, structure="shuffled_in_class", seed=2))
  z_all = to_statistic(ms.simulate(params, keep, 5, gap=3.0, structure="shuffled", seed=2))
  for n, (_, mu_out, d, _, _, _, r) in enumerate(params):
    k = keep[:, n]
    for rows in (k, ~k):  # within each class: the class's own residual rows, in some order
      got = z_in_class[rows, n] - mu_out - 3.0 * k[rows, None] * d
      np.testing.assert_allclose(np.sort(got, axis=0), np.sort(r[rows], axis=0), rtol=1e-5, atol=1e-5)
    got = z_all[:, n] - mu_out - 3.0 * k[:, None] * d  # across the classes: all the rows, in some order
    np.testing.assert_allclose(np.sort(got, axis=0), np.sort(r, axis=0), rtol=1e-5, atol=1e-5)


def test_shuffled_in_class_at_gap_one_is_the_real_run_up_to_the_order_of_its_models():
  loss, keep, mask = synthetic.synthetic_losses(num_models=10, num_canaries=6, seq_len=5, ragged=True, seed=4)
  _, params = ms.measure(loss, keep, mask)
  sim = ms.simulate(params, keep, 5, gap=1.0, structure="shuffled_in_class", seed=0)
  assert np.array_equal(np.isnan(sim), ~np.broadcast_to(mask, sim.shape))
  for n in range(6):
    for rows in (keep[:, n], ~keep[:, n]):
      np.testing.assert_allclose(np.sort(sim[rows, n][:, mask[n]], axis=0),
                                 np.sort(loss[rows, n][:, mask[n]], axis=0), rtol=1e-5)
  with pytest.raises(InputError, match="structure"):
    ms.simulate(params, keep, 5, structure="bogus")


def test_measure_per_canary_values_equal_the_functions_on_each_canary():
  loss, keep, mask = synthetic.synthetic_losses(num_models=12, num_canaries=5, seq_len=6, ragged=True, seed=5)
  out, _ = ms.measure(loss, keep, mask)
  for n in range(5):
    x = to_statistic(loss[:, n][:, mask[n]])
    _, d, S, C, r = ms.fit_canary(x, keep[:, n])
    assert out["length"][n] == mask[n].sum()
    assert out["co_movement"][n] == pytest.approx(ms.co_movement(S), rel=1e-12)
    assert out["kappa"][n] == pytest.approx(ms.oracle_terms(d, C)[1], rel=1e-12)
    c_in, c_out = ms.class_oas(r, keep[:, n])
    assert out["variance_ratio"][n] == pytest.approx(np.trace(c_in) / np.trace(c_out), rel=1e-12)
    want_kurt = np.mean((r**4).mean(0) / (r**2).mean(0)**2 - 3)
    assert out["excess_kurtosis"][n] == pytest.approx(want_kurt, rel=1e-10)
