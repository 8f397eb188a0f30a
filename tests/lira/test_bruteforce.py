"""Sanity checks of the brute-force reference itself, against hand formulas and sklearn."""

import numpy as np
import pytest
import scipy.stats
import sklearn.covariance

from bruteforce import bruteforce_llr, fit_covariance, model_vector, statistic_of


def _data(M=8, N=3, T=5, seed=0):
  rng = np.random.default_rng(seed)
  loss_MxNxT = rng.gamma(2.0, 0.5, size=(M, N, T)).astype(np.float32)
  order = rng.uniform(size=(M, N)).argsort(0)
  keep_MxN = order < M // 2
  return loss_MxNxT, keep_MxN


def _logit(loss):
  p = np.exp(-np.asarray(loss, np.float64))
  return np.log(p) - np.log1p(-p)


def test_logit_statistic_matches_definition_and_is_finite_at_zero():
  loss = np.array([1e-3, 0.5, 3.0, 20.0])
  # log1p(-p) of p = exp(-l) rounds p first: ~1e-16 / l relative, 1e-13 at l = 1e-3.
  np.testing.assert_allclose(statistic_of(loss, "logit"), _logit(loss), rtol=1e-9)
  assert np.isfinite(statistic_of(np.array([0.0]), "logit")).all()


# The reference and the hand formulas below compute the same float64 expressions in another order
# (~1e-15 relative), cancelled by at most a few digits in the llr difference: rtol 1e-10.


def test_univariate_classwise_matches_hand_formula():
  loss_MxNxT, keep_MxN = _data()
  llr_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance="univariate", shared=False)
  x_MxN = _logit(loss_MxNxT).mean(axis=2)
  M, N = keep_MxN.shape
  for m in range(M):
    for n in range(N):
      others = np.arange(M) != m
      xin = x_MxN[others & keep_MxN[:, n], n]
      xout = x_MxN[others & ~keep_MxN[:, n], n]
      x = x_MxN[m, n]
      want = (-0.5 * np.log(2 * np.pi * np.var(xin)) - (x - np.mean(xin))**2 / (2 * np.var(xin))
              + 0.5 * np.log(2 * np.pi * np.var(xout)) + (x - np.mean(xout))**2 / (2 * np.var(xout)))
      np.testing.assert_allclose(llr_MxN[m, n], want, rtol=1e-10, atol=1e-10)


def test_univariate_shared_pools_centred_variances():
  loss_MxNxT, keep_MxN = _data()
  llr_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance="univariate", shared=True, statistic="loss")
  x_MxN = loss_MxNxT.astype(np.float64).mean(axis=2)
  m, n = 3, 1
  others = np.arange(8) != m
  xin = x_MxN[others & keep_MxN[:, n], n]
  xout = x_MxN[others & ~keep_MxN[:, n], n]
  var = (np.sum((xin - xin.mean())**2) + np.sum((xout - xout.mean())**2)) / (len(xin) + len(xout))
  x = x_MxN[m, n]
  want = ((x - xout.mean())**2 - (x - xin.mean())**2) / (2 * var)  # equal variances: the log-dets cancel
  np.testing.assert_allclose(llr_MxN[m, n], want, rtol=1e-10)


def test_oas_check_vector():
  x_SxP = np.random.RandomState(0).multivariate_normal([0, 0], [[.8, .3], [.3, .4]], size=500)
  oas = sklearn.covariance.OAS().fit(x_SxP)
  # A fixed check vector for the OAS convention: the covariance known to 8 decimals, the shrinkage to 16 digits.
  np.testing.assert_allclose(oas.covariance_, [[0.75337235, 0.27634855], [0.27634855, 0.39644751]], atol=1e-8)
  np.testing.assert_allclose(oas.shrinkage_, 0.01957582121241239, rtol=1e-12)
  # The ridge rho * mu is far above the floor here, so the floored estimate is sklearn's (plus an exact 0 * I).
  np.testing.assert_allclose(fit_covariance(x_SxP, "oas", False, 1e-8), oas.covariance_, rtol=1e-14)


def test_oas_ridge_is_floored_on_constant_rows():
  rows_SxP = np.ones((6, 3))
  # Centred constant rows are exactly 0, so the estimate is the floor itself up to one rounding.
  np.testing.assert_allclose(fit_covariance(rows_SxP, "oas", False, 1e-8), 1e-8 * np.eye(3), rtol=1e-12)


def test_zero_variance_tokens_give_finite_scores():
  loss_MxNxT, keep_MxN = _data()
  loss_MxNxT[:, :, 2] = 1e-3  # every model predicts this token identically
  for covariance in ("univariate", "independent", "oas"):
    for shared in (False, True):
      llr_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance=covariance, shared=shared)
      assert np.isfinite(llr_MxN).all(), (covariance, shared)


def test_offline_univariate_is_z_score():
  loss_MxNxT, keep_MxN = _data()
  for statistic, sign in (("logit", 1.0), ("loss", -1.0)):
    llr_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance="univariate", shared=False,
                             statistic=statistic, offline=True)
    x_MxN = (_logit(loss_MxNxT) if statistic == "logit" else loss_MxNxT.astype(np.float64)).mean(axis=2)
    m, n = 5, 2
    xout = x_MxN[(np.arange(8) != m) & ~keep_MxN[:, n], n]
    np.testing.assert_allclose(llr_MxN[m, n], sign * (x_MxN[m, n] - xout.mean()) / xout.std(), rtol=1e-10)


def test_offline_rejects_shared():
  loss_MxNxT, keep_MxN = _data()
  with pytest.raises(ValueError):
    bruteforce_llr(loss_MxNxT, keep_MxN, covariance="oas", shared=True, offline=True)


def test_independent_is_sum_of_per_position_univariate_scores():
  loss_MxNxT, keep_MxN = _data()
  full_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance="independent", shared=False)
  parts = [bruteforce_llr(loss_MxNxT[:, :, t:t + 1], keep_MxN, covariance="univariate", shared=False)
           for t in range(loss_MxNxT.shape[2])]
  np.testing.assert_allclose(full_MxN, np.sum(parts, axis=0), rtol=1e-10)


def test_oas_matches_multivariate_normal_by_hand():
  loss_MxNxT, keep_MxN = _data(M=10, T=4)
  llr_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance="oas", shared=False)
  x_MxT = _logit(loss_MxNxT[:, 0])
  m = 0
  others = np.arange(10) != m
  xin, xout = x_MxT[others & keep_MxN[:, 0]], x_MxT[others & ~keep_MxN[:, 0]]
  cin = sklearn.covariance.OAS().fit(xin).covariance_
  cout = sklearn.covariance.OAS().fit(xout).covariance_
  want = (scipy.stats.multivariate_normal(xin.mean(0), cin).logpdf(x_MxT[m])
          - scipy.stats.multivariate_normal(xout.mean(0), cout).logpdf(x_MxT[m]))
  np.testing.assert_allclose(llr_MxN[m, 0], want, rtol=1e-10)


def test_reductions_and_mask():
  loss_T = np.array([0.5, 0.1, 0.9, 0.1, 0.3, 2.0], np.float32)
  valid_T = np.array([True, True, True, True, True, False])
  stat_T = loss_T[valid_T].astype(np.float64)
  np.testing.assert_allclose(model_vector(loss_T, valid_T, "independent", "loss", "group:2"),
                             [stat_T[:3].mean(), stat_T[3:].mean()])
  np.testing.assert_allclose(model_vector(loss_T, valid_T, "independent", "loss", "min:3"),
                             stat_T[[1, 3, 4]])  # ties keep position order
  np.testing.assert_allclose(model_vector(loss_T, valid_T, "independent", "loss", "max:2"), stat_T[[2, 0]])
  np.testing.assert_allclose(model_vector(loss_T, valid_T, "univariate", "loss", None), [stat_T.mean()])
  with pytest.raises(ValueError):
    model_vector(loss_T, valid_T, "independent", "loss", "group:6")


def test_subset_leaves_nan_elsewhere():
  loss_MxNxT, keep_MxN = _data()
  llr_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance="independent", shared=True,
                           targets=[1, 4], canaries=[0, 2])
  computed_MxN = np.zeros_like(keep_MxN)
  computed_MxN[np.ix_([1, 4], [0, 2])] = True
  assert np.isfinite(llr_MxN[computed_MxN]).all() and np.isnan(llr_MxN[~computed_MxN]).all()
