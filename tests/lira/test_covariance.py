"""Covariance estimators and per-token statistics against sklearn / scipy."""

import numpy as np
import pytest
import scipy.special
import sklearn.covariance

import lira
from lira import covariance


def test_oas_check_vector_from_reference():
  rng = np.random.RandomState(0)
  x = rng.multivariate_normal([0, 0], [[0.8, 0.3], [0.3, 0.4]], size=500)
  cov, shrinkage = lira.oas(x)
  # The reference prints the covariance to 8 decimals and the shrinkage to 16 significant digits.
  np.testing.assert_allclose(cov[0], [[0.75337235, 0.27634855], [0.27634855, 0.39644751]], atol=1e-8)
  np.testing.assert_allclose(shrinkage[0], 0.01957582121241239, rtol=1e-12)


@pytest.mark.parametrize("S,T", [(50, 5), (5, 20), (3, 64), (40, 1), (2, 2)])
@pytest.mark.parametrize("assume_centered", [False, True])
def test_oas_equals_sklearn(S, T, assume_centered):
  rng = np.random.default_rng(S * 100 + T)
  x = rng.normal(size=(4, S, T)) @ rng.normal(size=(T, T)) + 3.0
  cov, shrinkage = lira.oas(x, assume_centered=assume_centered)
  for b in range(4):
    ref = sklearn.covariance.OAS(assume_centered=assume_centered).fit(x[b])
    # Same formula, sums in another order (float64, ~1e-15 relative); rho's denominator
    # mean(S**2) - mu**2 / p is a difference that can cancel a few digits, hence 1e-10.
    np.testing.assert_allclose(cov[b], ref.covariance_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(shrinkage[b], ref.shrinkage_, rtol=1e-10, atol=1e-14)


def test_oas_shrinkage_at_the_edges():
  # den = (n + 1) (sq_mean - mu**2 / p): 0 (isotropic S) or below 0 by rounding gives rho = 1, not a division.
  assert covariance.oas_shrinkage(1.0, 0.5, 10, 2) == 1.0
  assert covariance.oas_shrinkage(1.0, np.nextafter(0.5, 0.0), 10, 2) == 1.0
  # p == 1: rho = 1 whatever rounding makes den; Sigma = mu = S either way.
  assert covariance.oas_shrinkage(2.0, np.nextafter(4.0, 5.0), 10, 1) == 1.0
  # Broadcasts over canaries with different p (the masked Gram fits of lira.gram).
  # p = 2: num = 2 + 1 = 3, den = (3 + 1) (2 - 1 / 2) = 6, rho = 0.5 (all exact in binary).
  np.testing.assert_array_equal(covariance.oas_shrinkage(np.ones(2), np.array([2.0, 2.0]), 3.0, np.array([1, 2])),
                                [1.0, 0.5])


def test_mle_and_structured_estimators():
  x = np.random.default_rng(0).normal(size=(3, 30, 4))
  mle = covariance.mle_covariance(x)
  # float64 sums of 30 terms in another order than numpy's: ~1e-15 relative.
  for b in range(3):
    np.testing.assert_allclose(mle[b], np.cov(x[b], rowvar=False, bias=True), rtol=1e-12)
  np.testing.assert_allclose(covariance.diagonal(mle)[1], np.diag(x[1].var(0)), rtol=1e-12)
  np.testing.assert_allclose(covariance.isotropic(mle)[2], np.eye(4) * x[2].var(0).mean(), rtol=1e-12)
  for name, want in (("univariate", covariance.isotropic(mle)), ("independent", covariance.diagonal(mle)),
                     ("oas", lira.oas(x)[0])):
    np.testing.assert_array_equal(covariance.estimate(mle, 30, name), want)
  with pytest.raises(ValueError, match="estimator"):
    covariance.estimate(mle, 30, "full")


def test_logit_scale_matches_scipy_and_stays_finite():
  loss = np.array([1e-6, 0.01, 0.5, 0.6931471805599453, 2.0, 20.0])
  # scipy's reference rounds p = exp(-l) before 1 - p: it loses ~log10(1/l) digits (~1e-10 relative at l = 1e-6).
  np.testing.assert_allclose(lira.logit_scale(loss), scipy.special.logit(np.exp(-loss)), rtol=1e-6)
  # ln 2 rounded to float64 is off by ~1e-17, so its logit is ~1e-16 from 0.
  assert lira.logit_scale(np.array([0.6931471805599453]))[0] == pytest.approx(0.0, abs=1e-12)
  extreme = lira.logit_scale(np.array([0.0, 1e-40, 1e-30, 1e-12, 700.0], dtype=np.float32))
  assert np.isfinite(extreme).all() and (np.diff(extreme) < 0).all()  # tiny losses keep distinct logits
  # logit = -l - ln(l - l^2/2 + ...) = -ln l - l/2 + O(l^2), exact to float64 rounding for l <= 1e-12.
  tiny = np.float32([1e-40, 1e-30, 1e-12]).astype(np.float64)
  np.testing.assert_allclose(extreme[1:4], -np.log(tiny) - tiny / 2, rtol=1e-15)
  assert extreme[0] == pytest.approx(149 * np.log(2.0), rel=1e-15)  # 0 is clipped at float32's smallest 2**-149
  assert lira.logit_scale(np.float32(0.3)).dtype == np.float64


def test_reductions_follow_array_split_and_loss_order():
  rng = np.random.default_rng(1)
  loss = rng.exponential(size=(3, 2, 10))
  stat = lira.logit_scale(loss)
  grouped, _ = lira.reduce_length(stat, loss, "group:3")
  np.testing.assert_allclose(grouped[1, 0], [c.mean() for c in np.array_split(stat[1, 0], 3)])
  smallest, _ = lira.reduce_length(stat, loss, "min:2")
  np.testing.assert_allclose(smallest[2, 1], stat[2, 1][np.argsort(loss[2, 1])[:2]])
  largest, _ = lira.reduce_length(stat, loss, "max:4")
  np.testing.assert_allclose(largest[0, 0], stat[0, 0][np.argsort(-loss[0, 0])[:4]])
  mask = np.ones((2, 10), bool)
  mask[0, 6:] = False
  grouped, _ = lira.reduce_length(stat, loss, "group:4", mask)
  np.testing.assert_allclose(grouped[0, 0], [c.mean() for c in np.array_split(stat[0, 0, :6], 4)])
  with pytest.raises(ValueError, match="reduction"):
    lira.parse_reduction("top:3")
