"""Brute-force leave-one-out LiRA: a plain loop that refits every Gaussian from scratch (reference for tests).

Independent of the `lira` package on purpose (numpy, scipy and sklearn only). It is slow and meant to be
read: every formula of docs/conventions.md ("Gaussian fits", "Length reductions", "Leave-one-out evaluation")
appears once, in the most direct form.
"""

import numpy as np
import scipy.stats
import sklearn.covariance

LOSS_CLIP = 2.0**-149  # a loss of exactly 0 has an infinite logit: clip it to float32's smallest positive number
COVARIANCES = ("univariate", "independent", "oas")


def statistic_of(loss_T, statistic):
  """Per-token statistic in float64: LiRA's logit -l - log(-expm1(-l)) of p = exp(-l), or the raw loss."""
  loss_T = np.asarray(loss_T, dtype=np.float64)
  if statistic == "logit":
    l = np.maximum(loss_T, LOSS_CLIP)
    return -l - np.log(-np.expm1(-l))
  if statistic == "loss":
    return loss_T
  raise ValueError(f"unknown statistic {statistic!r}")


def reduce_vector(loss_T, stat_T, reduction):
  """One model's (already masked) vector after a length reduction: None, "group:K", "min:K" or "max:K"."""
  if reduction is None:
    return stat_T
  kind, k = reduction.split(":")
  k = int(k)
  if len(stat_T) < k:
    raise ValueError(f"reduction {reduction!r} needs at least {k} positions, got {len(stat_T)}")
  if kind == "group":
    return np.array([chunk.mean() for chunk in np.array_split(stat_T, k)])
  if kind == "min":
    return stat_T[np.argsort(loss_T, kind="stable")[:k]]
  if kind == "max":
    return stat_T[np.argsort(-loss_T, kind="stable")[:k]]
  raise ValueError(f"unknown reduction {reduction!r}")


def model_vector(loss_T, valid_T, covariance, statistic, reduction):
  """The vector one model contributes for one canary: mask, statistic, reduction, then the univariate mean."""
  loss_T = np.asarray(loss_T, dtype=np.float64)[valid_T]
  x = reduce_vector(loss_T, statistic_of(loss_T, statistic), reduction)
  if covariance == "univariate":
    x = np.array([x.mean()])
  return x


def floored_oas(rows_SxP, assume_centered, var_floor):
  """sklearn's OAS covariance whose ridge rho * mu is raised to at least var_floor."""
  oas = sklearn.covariance.OAS(assume_centered=assume_centered).fit(rows_SxP)
  p = rows_SxP.shape[1]
  empirical = sklearn.covariance.empirical_covariance(rows_SxP, assume_centered=assume_centered)
  ridge = oas.shrinkage_ * np.trace(empirical) / p
  return oas.covariance_ + (max(ridge, var_floor) - ridge) * np.eye(p)


def fit_covariance(rows_SxP, covariance, assume_centered, var_floor):
  """Covariance of S rows: a vector of floored variances (univariate/independent, or OAS with p == 1) or a matrix."""
  rows_SxP = np.asarray(rows_SxP, dtype=np.float64)
  if covariance == "oas" and rows_SxP.shape[1] > 1:
    return floored_oas(rows_SxP, assume_centered, var_floor)
  if assume_centered:
    var = np.mean(rows_SxP**2, axis=0)
  else:
    var = np.var(rows_SxP, axis=0)
  return np.maximum(var, var_floor)


def log_density(x_P, mean_P, cov):
  """log N(x | mean, cov); cov is a vector of variances (diagonal) or a full matrix."""
  if cov.ndim == 1:
    return np.sum(scipy.stats.norm.logpdf(x_P, loc=mean_P, scale=np.sqrt(cov)))
  return scipy.stats.multivariate_normal(mean=mean_P, cov=cov).logpdf(x_P)


def offline_score(x_P, mean_P, cov, sign, shift="std"):
  """Offline LiRA: sign * u^T Sigma^-1 (x - mu) / sqrt(u^T Sigma^-1 u), the one-sided z-score along the shift u:
  u = 1 ("uniform") or u = sqrt(diag Sigma) ("std")."""
  cov = np.diag(cov) if cov.ndim == 1 else cov
  u = np.ones(len(x_P)) if shift == "uniform" else np.sqrt(np.diag(cov))
  w = np.linalg.solve(cov, u)  # Sigma^-1 u (Sigma is symmetric)
  return sign * (w @ (x_P - mean_P)) / np.sqrt(w @ u)


def bruteforce_llr(loss_MxNxT, keep_MxN, *, covariance, shared, reduction=None, statistic="logit",
                   mask_NxT=None, var_floor=1e-8, offline=False, offline_shift="std", balance_counts=False,
                   targets=None, canaries=None):
  """Leave-one-out LiRA scores llr_MxN by refitting per (target, canary); uncomputed entries are NaN."""
  if covariance not in COVARIANCES:
    raise ValueError(f"covariance must be one of {COVARIANCES}, got {covariance!r}")
  if offline and shared:
    raise ValueError("offline LiRA uses OUT rows only; it has no shared variant")
  loss_MxNxT = np.asarray(loss_MxNxT)
  keep_MxN = np.asarray(keep_MxN, dtype=bool)
  M, N, T = loss_MxNxT.shape
  mask_NxT = np.ones((N, T), bool) if mask_NxT is None else np.asarray(mask_NxT, bool)
  targets = range(M) if targets is None else targets
  canaries = range(N) if canaries is None else canaries
  sign = {"logit": 1.0, "loss": -1.0}[statistic]

  llr_MxN = np.full((M, N), np.nan)
  for m in targets:
    for n in canaries:
      x_MxP = np.stack([model_vector(loss_MxNxT[j, n], mask_NxT[n], covariance, statistic, reduction)
                        for j in range(M)])
      shadow = np.arange(M) != m
      if balance_counts:  # each class keeps its last L models in cyclic order after m (m + 1, m + 2, ...)
        after_m = [(m + d) % M for d in range(1, M)]
        own = [j for j in after_m if keep_MxN[j, n] == keep_MxN[m, n]]
        other = [j for j in after_m if keep_MxN[j, n] != keep_MxN[m, n]]
        L = min(len(own), len(other))
        shadow = np.isin(np.arange(M), own[len(own) - L:] + other[len(other) - L:])
      rows_in = x_MxP[shadow & keep_MxN[:, n]]
      rows_out = x_MxP[shadow & ~keep_MxN[:, n]]
      mean_in, mean_out = rows_in.mean(axis=0), rows_out.mean(axis=0)
      if offline:
        cov_out = fit_covariance(rows_out, covariance, False, var_floor)
        llr_MxN[m, n] = offline_score(x_MxP[m], mean_out, cov_out, sign, offline_shift)
        continue
      if shared:
        centred = np.concatenate([rows_in - mean_in, rows_out - mean_out])
        cov_in = cov_out = fit_covariance(centred, covariance, True, var_floor)
      else:
        cov_in = fit_covariance(rows_in, covariance, False, var_floor)
        cov_out = fit_covariance(rows_out, covariance, False, var_floor)
      llr_MxN[m, n] = log_density(x_MxP[m], mean_in, cov_in) - log_density(x_MxP[m], mean_out, cov_out)
  return llr_MxN
