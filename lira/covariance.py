"""Batched covariance estimators in float64: MLE, isotropic, diagonal and OAS (Rossi et al. 2025, Sec. 2.4)."""

import numpy as np
from array_api_compat import array_namespace

from lira.errors import InputError

# Variances below this (in squared statistic units) are raised to it, so that positions every
# model predicts identically give finite densities instead of inf/NaN (docs/conventions.md, "Gaussian fits").
VAR_FLOOR = 1e-8

# The three covariance models of the paper, in Table II's order.
ESTIMATORS = ("univariate", "independent", "oas")


def _centered(x_BxSxT, assume_centered):
  x_BxSxT = np.asarray(x_BxSxT, dtype=np.float64)
  if x_BxSxT.ndim == 2:
    x_BxSxT = x_BxSxT[None]
  if x_BxSxT.ndim != 3:
    raise InputError(f"expected samples shaped [B, S, T] or [S, T], got {x_BxSxT.shape}")
  if x_BxSxT.shape[1] < 1:
    raise InputError("need at least one sample per batch element")
  if assume_centered:
    return x_BxSxT
  return x_BxSxT - x_BxSxT.mean(axis=1, keepdims=True)


def mle_covariance(x_BxSxT, assume_centered=False):
  """Maximum-likelihood covariance (divide by S, as sklearn's empirical_covariance) per batch element."""
  xc_BxSxT = _centered(x_BxSxT, assume_centered)
  return np.einsum("bst,bsu->btu", xc_BxSxT, xc_BxSxT) / xc_BxSxT.shape[1]


def oas_shrinkage(mu, sq_mean, n, p):
  """OAS shrinkage rho of an MLE covariance S of n rows in p dimensions, from mu = trace(S) / p and mean(S**2).

  Sigma = (1 - rho) S + rho mu I, with rho as sklearn.covariance.oas computes it (Chen et al. 2010, Eq. 23).
  The one departure: den = (n + 1) (mean(S**2) - mu**2 / p) is >= 0 in exact arithmetic, and where it is
  not > 0 (0, or below 0 by rounding, where sklearn would divide by it) rho = 1; p == 1 also gives rho = 1,
  whose Sigma is S itself whatever rounding does to den. Arguments broadcast.
  """
  arrays = [a for a in (mu, sq_mean, p) if not isinstance(a, (bool, int, float))]
  xp = array_namespace(*arrays) if arrays else np  # numpy or jax.numpy (lira.gram's jax backend)
  num = sq_mean + mu**2
  den = (n + 1.0) * (sq_mean - mu**2 / p)
  rho = xp.where(den > 0, xp.minimum(num / xp.where(den > 0, den, 1.0), 1.0), 1.0)
  return xp.where(p == 1, 1.0, rho)


def oas_from_scatter(cov_BxTxT, n_samples):
  """OAS shrinkage of MLE covariances, equal to sklearn.covariance.oas on the rows they came from.

  Returns (shrunk_BxTxT, shrinkage_B). `n_samples` is a scalar or [B] array.
  """
  cov_BxTxT = np.asarray(cov_BxTxT, dtype=np.float64)
  n_B = np.broadcast_to(np.asarray(n_samples, dtype=np.float64), cov_BxTxT.shape[:1])
  p = cov_BxTxT.shape[-1]
  if p == 1:
    # sklearn reports shrinkage 0 for one feature; the covariance is S either way.
    return cov_BxTxT.copy(), np.zeros(cov_BxTxT.shape[0])
  mu_B = np.trace(cov_BxTxT, axis1=1, axis2=2) / p
  rho_B = oas_shrinkage(mu_B, np.mean(cov_BxTxT**2, axis=(1, 2)), n_B, p)
  shrunk_BxTxT = (1.0 - rho_B)[:, None, None] * cov_BxTxT
  idx = np.arange(p)
  shrunk_BxTxT[:, idx, idx] += (rho_B * mu_B)[:, None]
  return shrunk_BxTxT, rho_B


def oas(x_BxSxT, assume_centered=False):
  """OAS covariance per batch element, equal to sklearn.covariance.OAS().fit(x).covariance_.

  Returns (cov_BxTxT, shrinkage_B). A 2-D input [S, T] is treated as B = 1.
  """
  xc_BxSxT = _centered(x_BxSxT, assume_centered)
  return oas_from_scatter(mle_covariance(xc_BxSxT, assume_centered=True), xc_BxSxT.shape[1])


def isotropic(cov_BxTxT):
  """Univariate LiRA's model sigma^2 I of MLE covariances, sigma^2 = trace(S) / T (the mean per-position variance)."""
  cov_BxTxT = np.asarray(cov_BxTxT, dtype=np.float64)
  p = cov_BxTxT.shape[-1]
  return (np.trace(cov_BxTxT, axis1=1, axis2=2) / p)[:, None, None] * np.eye(p)


def diagonal(cov_BxTxT):
  """Independent model of MLE covariances: their per-position variances on the diagonal, zero elsewhere."""
  cov_BxTxT = np.asarray(cov_BxTxT, dtype=np.float64)
  return np.einsum("btt->bt", cov_BxTxT)[:, :, None] * np.eye(cov_BxTxT.shape[-1])


def estimate(cov_BxTxT, n_B, estimator):
  """One of ESTIMATORS applied to MLE covariances of n_B rows each: sigma^2 I, diag(S) or OAS (Sec. 2.4)."""
  if estimator == "univariate":
    return isotropic(cov_BxTxT)
  if estimator == "independent":
    return diagonal(cov_BxTxT)
  if estimator == "oas":
    return oas_from_scatter(cov_BxTxT, n_B)[0]
  raise InputError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
