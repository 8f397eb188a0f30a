"""OAS leave-one-out scores from one small eigendecomposition per canary and class (no T x T inverse).

For a fit on n centred rows Z (scatter W = Z^T Z), OAS gives Sigma = alpha I + beta W with
alpha = rho * mu and beta = (1 - rho) / n, and the OAS statistics need only trace(W) and ||W||_F^2.
With W = V diag(lam) V^T (V: orthonormal columns spanning the rows, rank R <= min(n, p)),
  u^T (alpha I + beta W)^-1 v = sum_k (V^T u)_k (V^T v)_k / (alpha + beta lam_k)
                               + (u.v - sum_k (V^T u)_k (V^T v)_k) / alpha,
  logdet(alpha I + beta W)     = sum_k log(alpha + beta lam_k) + (p - R) log alpha.
V comes from the n x n Gram matrix Z Z^T = U diag(lam) U^T (V = Z^T U lam^-1/2) when n < T, and from
W itself when n >= T, whichever eigendecomposition is smaller. Removing the target's row z from the
fit (W' = W - c z z^T) is a rank-one downdate handled by Sherman-Morrison and the matrix determinant
lemma, so one eigendecomposition per canary and class serves all M targets.
"""

import numpy as np

from lira.covariance import oas_shrinkage

# Eigenvalues below this fraction of the largest are the null space of the centred rows.
_RANK_RTOL = 1e-10


class _Fit:
  """Eigenbasis of the scatter of one class (or the shared pool) for a batch of canaries."""

  def __init__(self, z_BxnxD, p_B):
    n, D = z_BxnxD.shape[1:]
    if n < D:  # Gram space: eigh of n x n
      gram = z_BxnxD @ np.swapaxes(z_BxnxD, 1, 2)
      lam, u = np.linalg.eigh(gram)
      kept = lam > _RANK_RTOL * np.maximum(lam[:, -1:], np.finfo(np.float64).tiny)
      isqrt = np.where(kept, 1.0 / np.sqrt(np.where(kept, lam, 1.0)), 0.0)
      self.v = np.swapaxes(z_BxnxD, 1, 2) @ (u * isqrt[:, None, :])  # [B, D, n]
    else:  # position space: eigh of D x D
      gram = np.swapaxes(z_BxnxD, 1, 2) @ z_BxnxD
      lam, self.v = np.linalg.eigh(gram)
      kept = lam > _RANK_RTOL * np.maximum(lam[:, -1:], np.finfo(np.float64).tiny)
    self.lam = np.where(kept, lam, 0.0)
    self.kept = kept
    self.rank_B = kept.sum(axis=1)
    self.trace_B = np.trace(gram, axis1=1, axis2=2)
    self.fro2_B = (gram**2).sum(axis=(1, 2))
    self.n = n
    self.p_B = p_B

  def project(self, vectors_BxJxD):
    """V^T v for J vectors per canary: [B, J, R]."""
    return (vectors_BxJxD @ self.v) * self.kept[:, None, :]

  def params(self, n, trace, fro2, floor):
    """OAS (alpha, beta) exactly as sklearn's formula, from n rows, trace(W) and ||W||_F^2; ridge floored."""
    p = self.p_B[:, None] if np.ndim(trace) == 2 else self.p_B
    # S = W / n: mu = trace(S) / p = trace(W) / (n p) and mean(S**2) = ||W||_F^2 / (n^2 p^2).
    mu = trace / (n * p)
    rho = oas_shrinkage(mu, fro2 / (n * n * p * p), n, p)
    return np.maximum(rho * mu, floor), (1.0 - rho) / n

  def loo_params(self, pz_BxJxR, zz_BxJ, c, n_after, floor):
    """OAS (alpha, beta) after removing row z_j (W' = W - c z z^T): trace and ||W||_F^2 downdated."""
    zwz = (pz_BxJxR**2 * self.lam[:, None, :]).sum(axis=-1)  # z^T W z (z lies in the span of the rows)
    trace = self.trace_B[:, None] - c * zz_BxJ
    fro2 = self.fro2_B[:, None] - 2 * c * zwz + c**2 * zz_BxJ**2
    return self.params(n_after, trace, fro2, floor)

  def bilinear(self, pu, pv, uv, alpha, beta):
    """u^T (alpha I + beta W)^-1 v for projections pu, pv [B, J, R], dot products uv and alpha, beta [B, J]."""
    w = self.kept[:, None, :] / (alpha[..., None] + beta[..., None] * self.lam[:, None, :])
    inspan = (pu * pv * w).sum(axis=-1)
    resid = uv - (pu * pv).sum(axis=-1)
    resid = np.where((self.rank_B >= self.p_B)[:, None], 0.0, resid)
    return inspan + resid / alpha

  def logdet(self, alpha, beta):
    """logdet(alpha I + beta W) on the p scored dimensions, for alpha, beta [B, J]."""
    terms = np.log(alpha[..., None] + beta[..., None] * self.lam[:, None, :]) * self.kept[:, None, :]
    return terms.sum(axis=-1) + (self.p_B - self.rank_B)[:, None] * np.log(alpha)


def oas_llr(x_MxBxD, keep_MxB, valid_BxD, *, shared, offline, sign, floor, offline_shift="std"):
  """Leave-one-out OAS log-likelihood ratios (or offline z-scores) for a block of canaries, [M, B]."""
  M, B, D = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  n_in_B = keep_MxB.sum(axis=0)
  for k in np.unique(n_in_B):
    cols = np.flatnonzero(n_in_B == k)
    # Sort each canary's models so that its k IN models come first.
    order_BxM = np.argsort(~keep_MxB[:, cols].T, axis=1, kind="stable")
    x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD[:, cols], 0, 1), order_BxM[:, :, None], axis=1)
    llr_BxM = _sorted_llr(x_BxMxD, int(k), valid_BxD[cols], shared, offline, floor, offline_shift)
    unsorted = np.empty_like(llr_BxM)
    np.put_along_axis(unsorted, order_BxM, llr_BxM, axis=1)
    out_MxB[:, cols] = sign * unsorted.T if offline else unsorted.T
  return out_MxB


def _sorted_llr(x_BxMxD, k, valid_BxD, shared, offline, floor, offline_shift="std"):
  """Scores for canaries whose first k models are IN and the rest OUT; [B, M] in that order."""
  B, M, D = x_BxMxD.shape
  p_B = valid_BxD.sum(axis=1).astype(np.float64)
  is_in = np.arange(M) < k
  mean_in = x_BxMxD[:, :k].mean(axis=1)
  mean_out = x_BxMxD[:, k:].mean(axis=1)
  z_BxMxD = x_BxMxD - np.where(is_in[None, :, None], mean_in[:, None], mean_out[:, None])
  delta_BxD = mean_in - mean_out
  zz_BxM = (z_BxMxD**2).sum(axis=2)
  zd_BxM = np.einsum("bmd,bd->bm", z_BxMxD, delta_BxD)
  dd_B = (delta_BxD**2).sum(axis=1)
  n_own = np.where(is_in, k, M - k).astype(np.float64)
  c_M = n_own / (n_own - 1.0)
  # Residual of each target to the OTHER class mean: x - mean_other = z + s * delta (s = +1 for IN).
  s_M = np.where(is_in, 1.0, -1.0)
  oth_dot_oth = zz_BxM + 2 * s_M * zd_BxM + dd_B[:, None]

  if offline:
    return _offline(z_BxMxD, zz_BxM, delta_BxD, k, valid_BxD, floor, offline_shift)

  if shared:
    fit = _Fit(z_BxMxD, p_B)
    pz = fit.project(z_BxMxD)  # [B, M, R]
    p_delta = fit.project(delta_BxD[:, None, :])  # [B, 1, R]
    alpha, beta = fit.loo_params(pz, zz_BxM, c_M[None], M - 1.0, floor)
    gamma = beta * c_M
    dad = fit.bilinear(pz, pz, zz_BxM, alpha, beta)
    s = 1.0 - gamma * dad
    quad_own = c_M**2 * dad / s
    p_oth = pz + s_M[None, :, None] * p_delta
    rad = fit.bilinear(p_oth, pz, zz_BxM + s_M * zd_BxM, alpha, beta)
    quad_oth = fit.bilinear(p_oth, p_oth, oth_dot_oth, alpha, beta) + gamma * rad**2 / s
    # Shared covariance: the log-determinants cancel.
    return -0.5 * s_M * (quad_own - quad_oth)

  own_q, own_ld, oth_q, oth_ld = (np.empty((B, M)) for _ in range(4))
  for cls, oth, sign_oth in ((slice(0, k), slice(k, M), 1.0), (slice(k, M), slice(0, k), -1.0)):
    fit = _Fit(z_BxMxD[:, cls], p_B)
    n = fit.n
    c = n / (n - 1.0)
    # Targets of this class: their own row is removed (downdate), residual c * z.
    pz = fit.project(z_BxMxD[:, cls])
    zz = zz_BxM[:, cls]
    alpha, beta = fit.loo_params(pz, zz, c, n - 1.0, floor)
    dad = fit.bilinear(pz, pz, zz, alpha, beta)
    s = 1.0 - beta * c * dad
    own_q[:, cls] = c**2 * dad / s
    own_ld[:, cls] = fit.logdet(alpha, beta) + np.log(s)
    # Targets of the other class: the full fit, residual x - mean_this = z_target - sign_oth * delta.
    alpha_f, beta_f = (v[:, None] for v in fit.params(float(n), fit.trace_B, fit.fro2_B, floor))
    pr = fit.project(z_BxMxD[:, oth]) - sign_oth * fit.project(delta_BxD[:, None, :])
    oth_q[:, oth] = fit.bilinear(pr, pr, oth_dot_oth[:, oth], alpha_f, beta_f)
    oth_ld[:, oth] = fit.logdet(alpha_f, beta_f)
  return -0.5 * s_M * ((own_q + own_ld) - (oth_q + oth_ld))


def _offline(z_BxMxD, zz_BxM, delta_BxD, k, valid_BxD, floor, shift):
  """One-sided OUT-only score: GLS z-score u^T S^-1 r / sqrt(u^T S^-1 u) of a shift along u.

  u = 1 on the scored positions (shift "uniform") or u = sqrt(diag S) (shift "std", scale-free); for an OUT target
  S is its leave-one-out OUT fit, so u depends on the target: diag(W') = diag(W) - c z^2.
  """
  B, M, D = z_BxMxD.shape
  valid = valid_BxD.astype(np.float64)
  p_B = valid.sum(axis=1)
  out = slice(k, M)
  z_out = z_BxMxD[:, out]
  fit = _Fit(z_out, p_B)
  n = fit.n
  c = n / (n - 1.0)
  score = np.empty((B, M))

  def direction(alpha, beta, diag_w):  # [B, J, D]
    if shift == "uniform":
      return np.broadcast_to(valid[:, None, :], diag_w.shape[:1] + alpha.shape[1:] + valid.shape[1:])
    return np.sqrt(alpha[..., None] + beta[..., None] * np.maximum(diag_w, 0.0)) * valid[:, None, :]

  diag_w_BxD = (z_out**2).sum(axis=1)
  # OUT targets: own row removed; residual c * z.
  pz = fit.project(z_out)
  zz = zz_BxM[:, out]
  alpha, beta = fit.loo_params(pz, zz, c, n - 1.0, floor)
  gamma = beta * c
  u = direction(alpha, beta, diag_w_BxD[:, None, :] - c * z_out**2)
  p_u = fit.project(u)
  dad = fit.bilinear(pz, pz, zz, alpha, beta)
  s = 1.0 - gamma * dad
  u_d = fit.bilinear(p_u, pz, (u * z_out).sum(axis=2), alpha, beta)
  u_u = fit.bilinear(p_u, p_u, (u * u).sum(axis=2), alpha, beta) + gamma * u_d**2 / s
  score[:, out] = c * (u_d + gamma * u_d * dad / s) / np.sqrt(u_u)
  # IN targets: the full OUT fit; residual z + delta.
  alpha_f, beta_f = (v[:, None] for v in fit.params(float(n), fit.trace_B, fit.fro2_B, floor))
  u = direction(alpha_f, beta_f, diag_w_BxD[:, None, :])
  p_u = fit.project(u)
  r = z_BxMxD[:, :k] + delta_BxD[:, None, :]
  pr = fit.project(r)
  u_r = fit.bilinear(p_u, pr, (u * r).sum(axis=2), alpha_f, beta_f)
  u_u = fit.bilinear(p_u, p_u, (u * u).sum(axis=2), alpha_f, beta_f)
  score[:, :k] = u_r / np.sqrt(u_u)
  return score
