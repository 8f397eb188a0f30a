"""OAS leave-one-out scores in the Gram space of the shadow rows (no T x T matrix is formed).

For a fit on n centred rows Z (scatter W = Z^T Z, Gram G = Z Z^T = U diag(lam) U^T), OAS gives
Sigma = alpha I + beta W with alpha = rho * mu and beta = (1 - rho) / n, and the OAS statistics need
only trace(W) = trace(G) and ||W||_F^2 = ||G||_F^2. With V = Z^T U lam^-1/2 (orthonormal columns),
  u^T (alpha I + beta W)^-1 v = sum_k (V^T u)_k (V^T v)_k / (alpha + beta lam_k)
                               + (u.v - sum_k (V^T u)_k (V^T v)_k) / alpha,
  logdet(alpha I + beta W)     = sum_k log(alpha + beta lam_k) + (p - rank) log alpha,
and V^T v = lam^-1/2 U^T (Z v) needs only the inner products Z v. Removing the target's row z from
the fit (W' = W - c z z^T) is a rank-one downdate handled by Sherman-Morrison and the matrix
determinant lemma, so one eigendecomposition per canary and class serves all M targets.
"""

import numpy as np

# Gram eigenvalues below this fraction of the largest are the null space of the centred rows.
_RANK_RTOL = 1e-10


class _Fit:
  """Eigen-decomposed Gram matrix of one class (or the shared pool) for a batch of canaries."""

  def __init__(self, gram_BxRxR, p_B):
    lam, self.u = np.linalg.eigh(gram_BxRxR)
    kept = lam > _RANK_RTOL * np.maximum(lam[:, -1:], np.finfo(np.float64).tiny)
    self.lam = np.where(kept, lam, 0.0)
    self.kept = kept
    self.rank_B = kept.sum(axis=1)
    self.sqrt = np.sqrt(self.lam)
    self.isqrt = np.where(kept, 1.0 / np.where(kept, self.sqrt, 1.0), 0.0)
    self.trace_B = np.trace(gram_BxRxR, axis1=1, axis2=2)
    self.fro2_B = (gram_BxRxR**2).sum(axis=(1, 2))
    self.n = gram_BxRxR.shape[1]
    self.p_B = p_B

  def project_rows(self):
    """V^T z_i for every row i of the fit: U_i * sqrt(lam); [B, R(rows), R(components)]."""
    return self.u * self.sqrt[:, None, :]

  def project(self, zv_BxRxJ):
    """V^T v for J vectors given their inner products with the rows (Z v): [B, J, R]."""
    return np.einsum("brk,brj->bjk", self.u, zv_BxRxJ) * self.isqrt[:, None, :]

  def params(self, n, trace, fro2, floor):
    """OAS (alpha, beta) exactly as sklearn's formula, from n rows, trace(W) and ||W||_F^2; ridge floored."""
    p = self.p_B[:, None] if np.ndim(trace) == 2 else self.p_B
    mu = trace / (n * p)
    a = fro2 / (n * n * p * p)
    num = a + mu**2
    den = (n + 1.0) * (a - mu**2 / p)
    # den >= 0 in exact arithmetic; p == 1 (den == 0) means no shrinkage is needed, rho = 1 gives S too.
    rho = np.where(den > 0, np.minimum(num / np.where(den > 0, den, 1.0), 1.0), 1.0)
    rho = np.where(p == 1, 1.0, rho)
    return np.maximum(rho * mu, floor), (1.0 - rho) / n

  def bilinear(self, pu, pv, uv, alpha, beta):
    """u^T (alpha I + beta W)^-1 v for projections pu, pv [B, J, R], dot products uv and alpha, beta [B, J]."""
    w = self.kept[:, None, :] / (alpha[..., None] + beta[..., None] * self.lam[:, None, :])
    inspan = (pu * pv * w).sum(axis=-1)
    resid = uv - (pu * pv * self.kept[:, None, :]).sum(axis=-1)
    resid = np.where((self.rank_B >= self.p_B)[:, None], 0.0, resid)
    return inspan + resid / alpha

  def logdet(self, alpha, beta):
    """logdet(alpha I + beta W) on the p scored dimensions, for alpha, beta [B, J]."""
    terms = np.log(alpha[..., None] + beta[..., None] * self.lam[:, None, :]) * self.kept[:, None, :]
    return terms.sum(axis=-1) + (self.p_B - self.rank_B)[:, None] * np.log(alpha)


def oas_llr(x_MxBxD, keep_MxB, valid_BxD, *, shared, offline, sign, floor):
  """Leave-one-out OAS log-likelihood ratios (or offline z-scores) for a block of canaries, [M, B]."""
  M, B, D = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  n_in_B = keep_MxB.sum(axis=0)
  for k in np.unique(n_in_B):
    cols = np.flatnonzero(n_in_B == k)
    # Sort each canary's models so that its k IN models come first.
    order_BxM = np.argsort(~keep_MxB[:, cols].T, axis=1, kind="stable")
    x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD[:, cols], 0, 1), order_BxM[:, :, None], axis=1)
    llr_BxM = _sorted_llr(x_BxMxD, int(k), valid_BxD[cols].sum(axis=1).astype(np.float64), shared, offline, floor)
    unsorted = np.empty_like(llr_BxM)
    np.put_along_axis(unsorted, order_BxM, llr_BxM, axis=1)
    out_MxB[:, cols] = sign * unsorted.T if offline else unsorted.T
  return out_MxB


def _sorted_llr(x_BxMxD, k, p_B, shared, offline, floor):
  """Scores for canaries whose first k models are IN and the rest OUT; [B, M] in that order."""
  B, M, D = x_BxMxD.shape
  is_in = np.arange(M) < k
  mean_in = x_BxMxD[:, :k].mean(axis=1)
  mean_out = x_BxMxD[:, k:].mean(axis=1)
  z_BxMxD = x_BxMxD - np.where(is_in[None, :, None], mean_in[:, None], mean_out[:, None])
  delta_BxD = mean_in - mean_out
  h_BxMxM = z_BxMxD @ np.swapaxes(z_BxMxD, 1, 2)
  zd_BxM = np.einsum("bmd,bd->bm", z_BxMxD, delta_BxD)
  dd_B = (delta_BxD**2).sum(axis=1)
  h_diag = np.einsum("bmm->bm", h_BxMxM)
  n_own = np.where(is_in, k, M - k).astype(np.float64)
  c_M = n_own / (n_own - 1.0)
  # Residual of each target to the OTHER class mean: x - mean_other = z -/+ delta (IN: z + delta).
  s_M = np.where(is_in, 1.0, -1.0)
  oth_dot_oth = h_diag + 2 * s_M * zd_BxM + dd_B[:, None]

  if offline:
    return _offline(h_BxMxM, z_BxMxD, zd_BxM, delta_BxD, k, p_B, floor)

  if shared:
    fit = _Fit(h_BxMxM, p_B)
    pd = fit.project_rows()  # [B, M, R]
    p_delta = fit.project(zd_BxM[:, :, None])  # [B, 1, R]
    alpha, beta = _loo_params(fit, h_BxMxM, h_diag, c_M[None], M - 1.0, floor)
    gamma = beta * c_M
    dad = fit.bilinear(pd, pd, h_diag, alpha, beta)
    s = 1.0 - gamma * dad
    quad_own = c_M**2 * dad / s
    p_oth = pd + s_M[None, :, None] * p_delta
    rad = fit.bilinear(p_oth, pd, h_diag + s_M * zd_BxM, alpha, beta)
    quad_oth = fit.bilinear(p_oth, p_oth, oth_dot_oth, alpha, beta) + gamma * rad**2 / s
    # Shared covariance: the log-determinants cancel.
    return np.where(is_in, -0.5 * (quad_own - quad_oth), -0.5 * (quad_oth - quad_own))

  own_q, own_ld, oth_q, oth_ld = (np.empty((B, M)) for _ in range(4))
  for cls_rows, oth_rows, sign_oth in ((slice(0, k), slice(k, M), 1.0), (slice(k, M), slice(0, k), -1.0)):
    h_cls = h_BxMxM[:, cls_rows, cls_rows]
    fit = _Fit(h_cls, p_B)
    n = h_cls.shape[1]
    c = n / (n - 1.0)
    hd = h_diag[:, cls_rows]
    # Targets of this class: their own row is removed (downdate), residual c * z.
    pd = fit.project_rows()
    alpha, beta = _loo_params(fit, h_cls, hd, c, n - 1.0, floor)
    dad = fit.bilinear(pd, pd, hd, alpha, beta)
    s = 1.0 - beta * c * dad
    own_q[:, cls_rows] = c**2 * dad / s
    own_ld[:, cls_rows] = fit.logdet(alpha, beta) + np.log(s)
    # Targets of the other class: the full fit, residual z_target + (mean_their_class - mean_this_class).
    alpha_f, beta_f = fit.params(float(n), fit.trace_B, fit.fro2_B, floor)
    alpha_f, beta_f = alpha_f[:, None], beta_f[:, None]
    # For targets of the other class, mean_their - mean_this = -sign_oth * delta... (delta = in - out).
    zr = h_BxMxM[:, cls_rows, oth_rows] - sign_oth * zd_BxM[:, cls_rows][:, :, None]
    pr = fit.project(zr)
    rr = oth_dot_oth[:, oth_rows]
    oth_q[:, oth_rows] = fit.bilinear(pr, pr, rr, alpha_f, beta_f)
    oth_ld[:, oth_rows] = fit.logdet(alpha_f, beta_f)
  logpdf_own = -0.5 * (own_q + own_ld)
  logpdf_oth = -0.5 * (oth_q + oth_ld)
  return np.where(is_in, logpdf_own - logpdf_oth, logpdf_oth - logpdf_own)


def _loo_params(fit, h_fit, h_diag, c, n_after, floor):
  """OAS (alpha, beta) of a fit after removing each of its rows j: trace and ||W||_F^2 downdated."""
  dwd = (h_fit**2).sum(axis=1)  # z_j^T W z_j = sum_i G_ij^2
  trace = fit.trace_B[:, None] - c * h_diag
  fro2 = fit.fro2_B[:, None] - 2 * c * dwd + c**2 * h_diag**2
  return fit.params(n_after, trace, fro2, floor)


def _offline(h_BxMxM, z_BxMxD, zd_BxM, delta_BxD, k, p_B, floor):
  """One-sided OUT-only score: GLS z-score of a uniform shift, 1^T S^-1 r / sqrt(1^T S^-1 1)."""
  B, M, _ = z_BxMxD.shape
  out = slice(k, M)
  h_out = h_BxMxM[:, out, out]
  fit = _Fit(h_out, p_B)
  n = M - k
  c = n / (n - 1.0)
  z1_BxM = z_BxMxD.sum(axis=2)
  p_one = fit.project(z1_BxM[:, out, None])  # [B, 1, R]
  score = np.empty((B, M))
  # OUT targets: own row removed; residual c * z.
  hd = np.einsum("bmm->bm", h_out)
  pd = fit.project_rows()
  alpha, beta = _loo_params(fit, h_out, hd, c, n - 1.0, floor)
  gamma = beta * c
  dad = fit.bilinear(pd, pd, hd, alpha, beta)
  s = 1.0 - gamma * dad
  one_d = fit.bilinear(np.broadcast_to(p_one, pd.shape), pd, z1_BxM[:, out], alpha, beta)
  one_one = fit.bilinear(p_one, p_one, p_B[:, None], alpha, beta) + gamma * one_d**2 / s
  one_r = c * (one_d + gamma * one_d * dad / s)
  score[:, out] = one_r / np.sqrt(one_one)
  # IN targets: the full OUT fit; residual z + delta.
  alpha_f, beta_f = fit.params(float(n), fit.trace_B, fit.fro2_B, floor)
  alpha_f, beta_f = alpha_f[:, None], beta_f[:, None]
  zr = h_BxMxM[:, out, :k] + zd_BxM[:, out][:, :, None]
  pr = fit.project(zr)
  one_r = fit.bilinear(np.broadcast_to(p_one, pr.shape), pr, z1_BxM[:, :k] + delta_BxD.sum(axis=1)[:, None],
                       alpha_f, beta_f)
  one_one = fit.bilinear(p_one, p_one, p_B[:, None], alpha_f, beta_f)
  score[:, :k] = one_r / np.sqrt(one_one)
  return score
