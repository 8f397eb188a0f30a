"""Batched covariance estimators in float64: MLE, diagonal, isotropic and OAS (Rossi et al. 2025, Sec. 2.4)."""

import numpy as np

from lira.errors import InputError

# Variances below this (in squared statistic units) are raised to it, so that positions every
# model predicts identically give finite densities instead of inf/NaN (reference.md).
VAR_FLOOR = 1e-8


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


def oas_from_scatter(cov_BxTxT, n_samples):
  """OAS shrinkage of MLE covariances, exactly sklearn.covariance.oas (Chen et al. 2010, Eq. 23 as in sklearn).

  Returns (shrunk_BxTxT, shrinkage_B). `n_samples` is a scalar or [B] array.
  """
  cov_BxTxT = np.asarray(cov_BxTxT, dtype=np.float64)
  n_B = np.broadcast_to(np.asarray(n_samples, dtype=np.float64), cov_BxTxT.shape[:1])
  p = cov_BxTxT.shape[-1]
  if p == 1:
    # sklearn's special case: one feature means no shrinkage.
    return cov_BxTxT.copy(), np.zeros(cov_BxTxT.shape[0])
  mu_B = np.trace(cov_BxTxT, axis1=1, axis2=2) / p
  alpha_B = np.mean(cov_BxTxT**2, axis=(1, 2))
  num_B = alpha_B + mu_B**2
  den_B = (n_B + 1.0) * (alpha_B - mu_B**2 / p)
  with np.errstate(divide="ignore", invalid="ignore"):
    rho_B = np.where(den_B == 0, 1.0, np.minimum(num_B / np.where(den_B == 0, 1.0, den_B), 1.0))
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


def diagonal_covariance(x_BxSxT, assume_centered=False):
  """Independent (diagonal) estimate: per-position MLE variances on the diagonal."""
  cov_BxTxT = mle_covariance(x_BxSxT, assume_centered)
  return np.einsum("btt->bt", cov_BxTxT)[:, :, None] * np.eye(cov_BxTxT.shape[-1])


def isotropic_covariance(x_BxSxT, assume_centered=False):
  """Univariate LiRA's model sigma^2 I with sigma^2 = trace(S) / T (the mean per-position variance)."""
  cov_BxTxT = mle_covariance(x_BxSxT, assume_centered)
  p = cov_BxTxT.shape[-1]
  return (np.trace(cov_BxTxT, axis1=1, axis2=2) / p)[:, None, None] * np.eye(p)
