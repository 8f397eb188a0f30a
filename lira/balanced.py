"""Balanced leave-one-out: both classes fitted on the same number of shadow models (docs/conventions.md).

Plain leave-one-out fits the target's own class on one model fewer than the other, which biases scores towards
"non-member" when models are few. Here, for target m on canary n, each class keeps L = min(n_own - 1, n_other)
models: m itself is removed, and the class with more models left drops the ones that follow m in cyclic model
order (m + 1, m + 2, ... mod M), so the choice is reproducible, needs no seed, and spreads the dropped models evenly.
The fits are refitted per target on the kept rows (a batched refit over canaries, in the Gram space for OAS), since
the kept rows change with the target.
"""

import numpy as np

from lira import gram


def kept_rows(keep_MxB, m):
  """For target m: (own_BxL, other_BxL) model ids each class keeps, per canary, L = min(n_own - 1, n_other).

  Canaries of one call must share L (callers group them by IN count and the target's class).
  """
  M = keep_MxB.shape[0]
  seq = (m + 1 + np.arange(M - 1)) % M  # cyclic order after m
  same_SxB = keep_MxB[seq] == keep_MxB[m][None]
  n_own_B = same_SxB.sum(axis=0)  # own class without m
  n_oth_B = (M - 1) - n_own_B
  if np.unique(n_own_B).size > 1:
    raise ValueError("kept_rows needs canaries with the same class counts")
  n_own, n_oth = int(n_own_B[0]), int(n_oth_B[0])
  L = min(n_own, n_oth)
  pos_SxB = np.argsort(~same_SxB, axis=0, kind="stable")  # own positions first, each in cyclic order
  own = seq[pos_SxB[n_own - L:n_own]].T  # the last L of the own class in cyclic order
  oth = seq[pos_SxB[n_own + n_oth - L:]].T  # the last L of the other class
  return own, oth


def _gather(x_MxBxD, rows_BxL):
  return np.take_along_axis(np.moveaxis(x_MxBxD, 0, 1), rows_BxL[:, :, None], axis=1)  # [B, L, D]


def _diag_fit(rows_BxLxD, valid_BxD, floor):
  mean = rows_BxLxD.mean(axis=1)
  var = ((rows_BxLxD - mean[:, None]) ** 2).mean(axis=1)
  return mean, np.where(valid_BxD, np.maximum(var, floor), 1.0)


def _diag_logpdf_terms(r_BxD, var_BxD):
  return (r_BxD**2 / var_BxD).sum(axis=1) + np.log(var_BxD).sum(axis=1)


def _oas_terms(z_BxnxD, r_BxD, valid_BxD, floor, shift=None):
  """Quadratic form r^T S^-1 r and logdet S of the OAS fit on centred rows z; or, with a shift, the offline score."""
  p_B = valid_BxD.sum(axis=1).astype(np.float64)
  fit = gram._Fit(z_BxnxD, p_B)
  alpha, beta = (v[:, None] for v in fit.params(float(fit.n), fit.trace_B, fit.fro2_B, floor))
  r = r_BxD[:, None, :]
  p_r = fit.project(r)
  if shift is None:
    return fit.bilinear(p_r, p_r, (r * r).sum(axis=2), alpha, beta)[:, 0], fit.logdet(alpha, beta)[:, 0]
  u = valid_BxD[:, None, :].astype(np.float64)
  if shift == "std":
    u = u * np.sqrt(alpha[..., None] + beta[..., None] * (z_BxnxD**2).sum(axis=1)[:, None])
  p_u = fit.project(u)
  u_r = fit.bilinear(p_u, p_r, (u * r).sum(axis=2), alpha, beta)
  u_u = fit.bilinear(p_u, p_u, (u * u).sum(axis=2), alpha, beta)
  return (u_r / np.sqrt(u_u))[:, 0]


def _score(x_BxD, own_BxLxD, oth_BxLxD, is_in, valid_BxD, covariance, shared, offline, sign, floor, shift):
  """Scores [B] of one target on canaries where it is IN (is_in) or OUT, from the kept rows of both classes."""
  own_mean, oth_mean = own_BxLxD.mean(axis=1), oth_BxLxD.mean(axis=1)
  oas = covariance == "oas" and x_BxD.shape[1] > 1
  if offline:
    rows, mean = (oth_BxLxD, oth_mean) if is_in else (own_BxLxD, own_mean)
    r = x_BxD - mean
    if oas:
      return sign * _oas_terms(rows - mean[:, None], r, valid_BxD, floor, shift)
    _, var = _diag_fit(rows, valid_BxD, floor)
    if shift == "std":
      return sign * (r / np.sqrt(var)).sum(axis=1) / np.sqrt(valid_BxD.sum(axis=1))
    return sign * (r / var).sum(axis=1) / np.sqrt((valid_BxD / var).sum(axis=1))
  r_own, r_oth = x_BxD - own_mean, x_BxD - oth_mean
  if shared:
    pooled = np.concatenate([own_BxLxD - own_mean[:, None], oth_BxLxD - oth_mean[:, None]], axis=1)
    if oas:
      q_own, _ = _oas_terms(pooled, r_own, valid_BxD, floor)
      q_oth, _ = _oas_terms(pooled, r_oth, valid_BxD, floor)
    else:
      var = np.where(valid_BxD, np.maximum((pooled**2).mean(axis=1), floor), 1.0)
      q_own, q_oth = (r_own**2 / var).sum(axis=1), (r_oth**2 / var).sum(axis=1)  # logdets cancel
  elif oas:
    q_own = sum(_oas_terms(own_BxLxD - own_mean[:, None], r_own, valid_BxD, floor))
    q_oth = sum(_oas_terms(oth_BxLxD - oth_mean[:, None], r_oth, valid_BxD, floor))
  else:
    q_own = _diag_logpdf_terms(r_own, _diag_fit(own_BxLxD, valid_BxD, floor)[1])
    q_oth = _diag_logpdf_terms(r_oth, _diag_fit(oth_BxLxD, valid_BxD, floor)[1])
  llr_own_minus_oth = -0.5 * (q_own - q_oth)
  return llr_own_minus_oth if is_in else -llr_own_minus_oth


def balanced_llr(x_MxBxD, keep_MxB, valid_BxD, *, covariance, shared, offline, sign, floor, offline_shift="std"):
  """Balanced leave-one-out scores [M, B] of a block of canaries (features as lira.loo computes them)."""
  M, B, _ = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  n_in_B = keep_MxB.sum(axis=0)
  for m in range(M):
    for k in np.unique(n_in_B):
      for is_in in (True, False):
        cols = np.flatnonzero((n_in_B == k) & (keep_MxB[m] == is_in))
        if cols.size == 0:
          continue
        own, oth = kept_rows(keep_MxB[:, cols], m)
        x = x_MxBxD[:, cols]
        out_MxB[m, cols] = _score(x[m], _gather(x, own), _gather(x, oth), is_in, valid_BxD[cols], covariance, shared,
                                  offline, sign, floor, offline_shift)
  return out_MxB
