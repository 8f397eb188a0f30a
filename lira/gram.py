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
from array_api_compat import array_namespace

from lira.covariance import oas_shrinkage

# Eigenvalues below this fraction of the largest are the null space of the centred rows. In float64 the
# centring's exact zero comes out near 1e-16 of the largest; in float32 near 1e-7 times a few (n eps), so the
# float32 cut sits well above that noise and still keeps directions a thousandth of the largest.
_RANK_RTOL = {"float64": 1e-10, "float32": 1e-5}


# The eigh algorithm of float32 fits on a GPU: "qr" (cuSOLVER's syevd, the algorithm LAPACK runs on a CPU) or None
# (jax's default there: Jacobi iteration, syevj, for matrices of at most 32 rows, as the Gram matrices of a 64-model
# run's classes are). float64 fits keep jax's default (batched Jacobi is accurate there and one kernel per batch).
GPU_FLOAT32_EIGH = "qr"


def eigh(a):
  """xp.linalg.eigh of a batch of symmetric matrices; float32 on a GPU by GPU_FLOAT32_EIGH's algorithm."""
  xp = array_namespace(a)
  if xp.__name__.startswith("jax") and a.dtype == xp.float32 and GPU_FLOAT32_EIGH == "qr":
    import jax
    if jax.default_backend() == "gpu" and hasattr(jax.lax.linalg, "EighImplementation"):  # else jax's own choice
      v, lam = jax.lax.linalg.eigh(a, implementation=jax.lax.linalg.EighImplementation.QR)
      return lam, v
  return xp.linalg.eigh(a)


def _swap(a):
  xp = array_namespace(a)
  return xp.permute_dims(a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))


class Fit:
  """Eigenbasis of the scatter of one class (or the shared pool) for a batch of canaries (array API: numpy or jax)."""

  def __init__(self, z_BxnxD, p_B, n=None):
    """n: the class's row count when z_BxnxD carries zero rows beyond it (pair() pads two classes to one shape)."""
    xp = self.xp = array_namespace(z_BxnxD)
    rows, D = z_BxnxD.shape[1:]
    dtype = z_BxnxD.dtype
    rtol = _RANK_RTOL["float64" if dtype == xp.float64 else "float32"]
    tiny = xp.finfo(dtype).smallest_normal
    if rows < D:  # Gram space: eigh of n x n (zero rows add zero eigenvalues, cut as null space below)
      gram = z_BxnxD @ _swap(z_BxnxD)
      lam, u = eigh(gram)
      kept = lam > rtol * xp.maximum(lam[:, -1:], tiny)
      isqrt = xp.where(kept, 1.0 / xp.sqrt(xp.where(kept, lam, 1.0)), 0.0)
      self.v = _swap(z_BxnxD) @ (u * isqrt[:, None, :])  # [B, D, n]
    else:  # position space: eigh of D x D
      gram = _swap(z_BxnxD) @ z_BxnxD
      lam, self.v = eigh(gram)
      kept = lam > rtol * xp.maximum(lam[:, -1:], tiny)
    self.lam = xp.where(kept, lam, 0.0)
    self.kept = xp.astype(kept, dtype)
    self.all_kept = _all_true(kept)
    self.rank_B = xp.sum(self.kept, axis=1)
    self.trace_B = xp.sum(xp.linalg.diagonal(gram), axis=1)
    self.fro2_B = xp.sum(gram**2, axis=(1, 2))
    self.n = rows if n is None else n
    self.p_B = p_B

  @classmethod
  def pair(cls, za_BxaxD, zb_BxbxD, p_B):
    """Fits of two classes of one batch of canaries from ONE batched eigh: rows zero-padded to max(a, b), stacked.

    One call instead of two is one kernel launch on an accelerator; on XLA's CPU backend it also keeps two LAPACK
    eigh calls from running concurrently, which deadlocked jaxlib 0.10.2's small intra-op pool (2 cores).
    """
    xp = array_namespace(za_BxaxD)
    B, a, D = za_BxaxD.shape
    b = zb_BxbxD.shape[1]
    rows = max(a, b)

    def padded(z, n):
      return z if n == rows else xp.concat([z, xp.zeros((B, rows - n, D), dtype=z.dtype)], axis=1)

    both = cls(xp.concat([padded(za_BxaxD, a), padded(zb_BxbxD, b)], axis=0), xp.concat([p_B, p_B]))
    return both._half(slice(0, B), a), both._half(slice(B, 2 * B), b)

  def _half(self, batch, n):
    half = object.__new__(type(self))
    half.xp, half.n = self.xp, n
    for name in ("v", "lam", "kept", "rank_B", "trace_B", "fro2_B", "p_B"):
      setattr(half, name, getattr(self, name)[batch])
    half.all_kept = self.all_kept or _all_true(half.kept)
    return half

  def project(self, vectors_BxJxD):
    """V^T v for J vectors per canary: [B, J, R]."""
    pv = vectors_BxJxD @ self.v
    return pv if self.all_kept else pv * self.kept[:, None, :]

  def params(self, n, trace, fro2, floor):
    """OAS (alpha, beta) exactly as sklearn's formula, from n rows, trace(W) and ||W||_F^2; ridge floored."""
    p = self.p_B[:, None] if trace.ndim == 2 else self.p_B
    # S = W / n: mu = trace(S) / p = trace(W) / (n p) and mean(S**2) = ||W||_F^2 / (n^2 p^2).
    mu = trace / (n * p)
    rho = oas_shrinkage(mu, fro2 / (n * n * p * p), n, p)
    return self.xp.maximum(rho * mu, floor), (1.0 - rho) / n

  def loo_params(self, pz_BxJxR, zz_BxJ, c, n_after, floor):
    """OAS (alpha, beta) after removing row z_j (W' = W - c z z^T): trace and ||W||_F^2 downdated."""
    zwz = _dot_last(pz_BxJxR * pz_BxJxR, self.lam[:, None, :])  # z^T W z (z lies in the span of the rows)
    trace = self.trace_B[:, None] - c * zz_BxJ
    fro2 = self.fro2_B[:, None] - 2 * c * zwz + c**2 * zz_BxJ**2
    return self.params(n_after, trace, fro2, floor)

  def denominator(self, alpha, beta):
    """alpha + beta lam_k [B, J, R] for alpha, beta [B, J]: the eigenvalues of alpha I + beta W, shared by bilinear and
    logdet calls with the same (alpha, beta) (a division or log over [B, M, R] is a large share of a block's work)."""
    return alpha[..., None] + beta[..., None] * self.lam[:, None, :]

  def weights(self, denom):
    """kept / (alpha + beta lam_k): the eigenbasis weights of (alpha I + beta W)^-1, [B, J, R]."""
    return 1.0 / denom if self.all_kept else self.kept[:, None, :] / denom

  @property
  def needs_residuals(self):
    """Whether forms take the part outside the span from residual vectors (`residual`): in float32 where some
    canary's rows do not span its scored positions (always, on a device: traced values). For a vector in or near
    the span, such as the fit's own rows, that part formed as |v|^2 - |V^T v|^2 cancels to rounding, about
    |v|^2 eps, and is divided by a small alpha: in float32 about 1e-3 of a score at M = 64, T = 128; in float64
    1e-12 of one, below what the project promises, so float64 keeps the cheaper dot products."""
    if self.lam.dtype != self.xp.float32:
      return False
    return not (isinstance(self.rank_B, np.ndarray) and bool(np.all(self.rank_B >= self.p_B)))

  def residual(self, v_BxJxD, pv_BxJxR):
    """v minus its part in the kept eigenvectors' span (pv: `project(v)`), as a vector: [B, J, D] (or [B, J, q, D]);
    None in float64 (see `needs_residuals`)."""
    if self.lam.dtype != self.xp.float32:
      return None
    vt = _swap(self.v)
    while vt.ndim < pv_BxJxR.ndim:
      vt = vt[:, None]
    return v_BxJxD - pv_BxJxR @ vt

  def bilinear(self, pu, pv, uv, alpha, beta, w=None, residuals=None):
    """u^T (alpha I + beta W)^-1 v for projections pu, pv [B, J, R], dot products uv and alpha, beta [B, J];
    w: weights(denominator(alpha, beta)) when already computed. residuals: two vectors whose dot product is the
    part outside the span, used in place of uv when neither is None: (`residual(u, pu)`, `residual(v, pv)`), or
    (u, `residual(v, pv)`) as a residual is orthogonal to the span."""
    xp = self.xp
    w = self.weights(self.denominator(alpha, beta)) if w is None else w
    inspan = _dot_last(pu * w, pv)
    exact = residuals is not None and all(r is not None for r in residuals)
    resid = _dot_last(*residuals) if exact else uv - _dot_last(pu, pv)
    resid = xp.where((self.rank_B >= self.p_B)[:, None], 0.0, resid)
    return inspan + resid / alpha

  def logdet(self, alpha, beta, denom=None):
    """logdet(alpha I + beta W) on the p scored dimensions, for alpha, beta [B, J]."""
    xp = self.xp
    denom = self.denominator(alpha, beta) if denom is None else denom
    terms = xp.log(denom) if self.all_kept else xp.log(denom) * self.kept[:, None, :]
    return xp.sum(terms, axis=-1) + (self.p_B - self.rank_B)[:, None] * xp.log(alpha)


def _all_true(kept):
  """Whether every eigenvector is kept (numpy: the multiplications by `kept` are then skipped, which changes no bit;
  traced jax values: False)."""
  return isinstance(kept, np.ndarray) and bool(kept.all())


def _dot_last(a, b):
  """sum(a * b, axis=-1): numpy's vecdot reads both once without the product array; XLA fuses the plain form."""
  if isinstance(a, np.ndarray):
    return np.vecdot(a, b)
  xp = array_namespace(a)
  return xp.sum(a * b, axis=-1)


def sorted_groups(keep_MxB):
  """Canaries grouped by IN count k: [(k, cols, order_BxM)], order putting each canary's IN models first (host)."""
  n_in_B = keep_MxB.sum(axis=0)
  groups = []
  for k in np.unique(n_in_B):
    cols = np.flatnonzero(n_in_B == k)
    groups.append((int(k), cols, np.argsort(~keep_MxB[:, cols].T, axis=1, kind="stable")))
  return groups


def loo_oas(x_MxBxD, keep_MxB, valid_BxD, *, shared, offline, sign, floor, offline_shift="std"):
  """Leave-one-out OAS log-likelihood ratios (or offline z-scores) for a block of canaries, [M, B]."""
  M, B, D = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  for k, cols, order_BxM in sorted_groups(keep_MxB):
    x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD[:, cols], 0, 1), order_BxM[:, :, None], axis=1)
    llr_BxM = sorted_loo(x_BxMxD, k, valid_BxD[cols], shared, offline, floor, offline_shift)
    unsorted = np.empty_like(llr_BxM)
    np.put_along_axis(unsorted, order_BxM, llr_BxM, axis=1)
    out_MxB[:, cols] = sign * unsorted.T if offline else unsorted.T
  return out_MxB


def sorted_loo(x_BxMxD, k, valid_BxD, shared, offline, floor, offline_shift="std", slots=None):
  """Scores for canaries whose first k models are IN and the rest OUT; [B, M] in that order.

  Array API (numpy or jax.numpy, no in-place updates): the jax backend jits this one copy, k static, or, with
  slots = (n_in, n_out, models), k a traced scalar: the rows laid out as n_in IN slots (k real) then n_out OUT
  slots (models - k real), rows of zeros in the others (`padded_loo`), scores [B, n_in + n_out] per slot.
  """
  xp = array_namespace(x_BxMxD)
  dt = x_BxMxD.dtype
  B, M, D = x_BxMxD.shape
  p_B = xp.sum(xp.astype(valid_BxD, dt), axis=1)
  if slots is None:
    n_in_slots, n = k, {True: k, False: M - k}
    is_in = xp.asarray(np.arange(M) < k)
    mean_in = xp.mean(x_BxMxD[:, :k], axis=1)
    mean_out = xp.mean(x_BxMxD[:, k:], axis=1)
    real = None
  else:
    n_in_slots, n_out_slots, models = slots
    kk = xp.astype(k, dt)
    n = {True: kk, False: models - kk}
    is_in, real, _ = slot_rows(xp, n_in_slots, n_out_slots, models, k)
    real = xp.astype(real, dt)
    x_BxMxD = x_BxMxD * real[None, :, None]
    mean_in = xp.sum(x_BxMxD[:, :n_in_slots], axis=1) / n[True]
    mean_out = xp.sum(x_BxMxD[:, n_in_slots:], axis=1) / n[False]
  k = n_in_slots  # from here on, the IN rows are the first k (slots)
  z_BxMxD = x_BxMxD - xp.where(is_in[None, :, None], mean_in[:, None], mean_out[:, None])
  if real is not None:
    z_BxMxD = z_BxMxD * real[None, :, None]
  delta_BxD = mean_in - mean_out
  zz_BxM = _dot_last(z_BxMxD, z_BxMxD)
  zd_BxM = _dot_last(z_BxMxD, delta_BxD[:, None, :])
  dd_B = xp.sum(delta_BxD**2, axis=1)
  if real is None:
    n_own = np.where(np.arange(M) < k, k, M - k).astype(np.float64)
    c_M = xp.asarray(n_own / (n_own - 1.0), dtype=dt)
  else:
    n_own = xp.where(is_in, n[True], n[False])
    c_M = n_own / (n_own - 1.0)
  # Residual of each target to the OTHER class mean: x - mean_other = z + s * delta (s = +1 for IN).
  s_M = xp.asarray(np.where(np.arange(M) < k, 1.0, -1.0), dtype=dt)
  oth_dot_oth = zz_BxM + 2 * s_M * zd_BxM + dd_B[:, None]

  if offline:
    return _offline(z_BxMxD, zz_BxM, delta_BxD, k, valid_BxD, floor, offline_shift, n_out=n[False])

  if shared:
    fit = Fit(z_BxMxD, p_B)
    pz = fit.project(z_BxMxD)  # [B, M, R]
    p_delta = fit.project(delta_BxD[:, None, :])  # [B, 1, R]
    alpha, beta = fit.loo_params(pz, zz_BxM, c_M[None], n[True] + n[False] - 1.0, floor)
    gamma = beta * c_M
    w = fit.weights(fit.denominator(alpha, beta))
    rz = fit.residual(z_BxMxD, pz)
    dad = fit.bilinear(pz, pz, zz_BxM, alpha, beta, w, residuals=(rz, rz))
    s = 1.0 - gamma * dad
    quad_own = c_M**2 * dad / s
    p_oth = pz + s_M[None, :, None] * p_delta
    r_oth = None if rz is None else rz + s_M[None, :, None] * fit.residual(delta_BxD[:, None, :], p_delta)
    rad = fit.bilinear(p_oth, pz, zz_BxM + s_M * zd_BxM, alpha, beta, w, residuals=(r_oth, rz))
    quad_oth = fit.bilinear(p_oth, p_oth, oth_dot_oth, alpha, beta, w, residuals=(r_oth, r_oth)) + gamma * rad**2 / s
    # Shared covariance: the log-determinants cancel.
    return -0.5 * s_M * (quad_own - quad_oth)

  def class_terms(fit, cls, oth, sign_oth):
    """(own quadratic, own logdet) of this class's targets and (quadratic, logdet) of the other class's targets."""
    n = fit.n
    c = n / (n - 1.0)
    # Targets of this class: their own row is removed (downdate), residual c * z.
    pz = fit.project(z_BxMxD[:, cls])
    zz = zz_BxM[:, cls]
    alpha, beta = fit.loo_params(pz, zz, c, n - 1.0, floor)
    denom = fit.denominator(alpha, beta)
    rz = fit.residual(z_BxMxD[:, cls], pz)
    dad = fit.bilinear(pz, pz, zz, alpha, beta, fit.weights(denom), residuals=(rz, rz))
    s = 1.0 - beta * c * dad
    own = c**2 * dad / s + fit.logdet(alpha, beta, denom) + xp.log(s)
    # Targets of the other class: the full fit, residual x - mean_this = z_target - sign_oth * delta.
    alpha_f, beta_f = (v[:, None] for v in fit.params(n * 1.0, fit.trace_B, fit.fro2_B, floor))
    # (the other class's rows are far from this fit's span: u.u - |pu|^2 does not cancel there)
    pr = fit.project(z_BxMxD[:, oth]) - sign_oth * fit.project(delta_BxD[:, None, :])
    other = fit.bilinear(pr, pr, oth_dot_oth[:, oth], alpha_f, beta_f) + fit.logdet(alpha_f, beta_f)
    return own, other

  fit_in, fit_out = Fit.pair(z_BxMxD[:, :k], z_BxMxD[:, k:], p_B)
  fit_in.n, fit_out.n = n[True], n[False]  # the real rows (zero rows beyond them in padded slots)
  own_in, oth_out = class_terms(fit_in, slice(0, k), slice(k, M), 1.0)  # IN fit: IN targets' own, OUT targets' other
  own_out, oth_in = class_terms(fit_out, slice(k, M), slice(0, k), -1.0)
  own = xp.concat([own_in, own_out], axis=1)
  other = xp.concat([oth_in, oth_out], axis=1)
  return -0.5 * s_M * (own - other)


def _offline(z_BxMxD, zz_BxM, delta_BxD, k, valid_BxD, floor, shift, n_out=None):
  """One-sided OUT-only score: GLS z-score u^T S^-1 r / sqrt(u^T S^-1 u) of a shift along u.

  u = 1 on the scored positions (shift "uniform") or u = sqrt(diag S) (shift "std", scale-free); for an OUT target
  S is its leave-one-out OUT fit, so u depends on the target: diag(W') = diag(W) - c z^2.
  """
  xp = array_namespace(z_BxMxD)
  B, M, D = z_BxMxD.shape
  valid = xp.astype(valid_BxD, z_BxMxD.dtype)
  p_B = xp.sum(valid, axis=1)
  out = slice(k, M)
  z_out = z_BxMxD[:, out]
  fit = Fit(z_out, p_B, n=n_out)
  n = fit.n
  c = n / (n - 1.0)

  def direction(alpha, beta, diag_w):  # [B, J, D]
    if shift == "uniform":
      return xp.broadcast_to(valid[:, None, :], diag_w.shape[:1] + alpha.shape[1:] + valid.shape[1:])
    return xp.sqrt(alpha[..., None] + beta[..., None] * xp.maximum(diag_w, 0.0)) * valid[:, None, :]

  diag_w_BxD = xp.sum(z_out**2, axis=1)
  # OUT targets: own row removed; residual c * z.
  pz = fit.project(z_out)
  zz = zz_BxM[:, out]
  alpha, beta = fit.loo_params(pz, zz, c, n - 1.0, floor)
  gamma = beta * c
  u = direction(alpha, beta, diag_w_BxD[:, None, :] - c * z_out**2)
  p_u = fit.project(u)
  rz = fit.residual(z_out, pz)  # the OUT targets are rows of the fit; u is not
  dad = fit.bilinear(pz, pz, zz, alpha, beta, residuals=(rz, rz))
  s = 1.0 - gamma * dad
  u_d = fit.bilinear(p_u, pz, xp.sum(u * z_out, axis=2), alpha, beta, residuals=(u, rz))
  u_u = fit.bilinear(p_u, p_u, xp.sum(u * u, axis=2), alpha, beta) + gamma * u_d**2 / s
  score_out = c * (u_d + gamma * u_d * dad / s) / xp.sqrt(u_u)
  # IN targets: the full OUT fit; residual z + delta.
  alpha_f, beta_f = (v[:, None] for v in fit.params(n * 1.0, fit.trace_B, fit.fro2_B, floor))
  u = direction(alpha_f, beta_f, diag_w_BxD[:, None, :])
  p_u = fit.project(u)
  r = z_BxMxD[:, :k] + delta_BxD[:, None, :]
  pr = fit.project(r)
  u_r = fit.bilinear(p_u, pr, xp.sum(u * r, axis=2), alpha_f, beta_f)
  u_u = fit.bilinear(p_u, p_u, xp.sum(u * u, axis=2), alpha_f, beta_f)
  return xp.concat([u_r / xp.sqrt(u_u), score_out], axis=1)


def slot_rows(xp, n_in, n_out, models, k):
  """The slot layout of a traced IN count k (lira/balanced_padded.py): n_in IN slots then n_out OUT slots; per slot
  (whether it is an IN slot, whether it holds a row, the sorted row it holds: 0 where it holds none)."""
  slot = np.arange(n_in + n_out)
  in_slot = xp.asarray(slot < n_in)
  pos = xp.asarray(np.where(slot < n_in, slot, slot - n_in), dtype=xp.int32)
  real = pos < xp.where(in_slot, k, models - k)
  return in_slot, real, xp.where(real, xp.where(in_slot, pos, k + pos), 0)


def slots_to_sorted(xp, scores_BxN, n_in, models, k):
  """Scores per slot back in the sorted order [B, models]: sorted row i is IN slot i, or OUT slot i - k."""
  i_M = xp.asarray(np.arange(models), dtype=xp.int32)
  return xp.take(scores_BxN, xp.where(i_M < k, i_M, n_in + i_M - k), axis=1)


def padded_loo(x_BxMxD, k, valid_BxD, lay, **options):
  """sorted_loo of canaries whose first k models are IN, k a traced scalar, in the slots of `lay` (a
  lira.balanced_padded.Layout: n_in IN then n_out OUT slots): scores [B, M] in the sorted order. options:
  sorted_loo's shared, offline, floor, offline_shift."""
  xp = array_namespace(x_BxMxD)
  kk = xp.asarray(k, dtype=xp.int32)
  _, _, src = slot_rows(xp, lay.n_in, lay.n_out, lay.M, kk)
  scores = sorted_loo(xp.take(x_BxMxD, src, axis=1), kk, valid_BxD, slots=(lay.n_in, lay.n_out, lay.M), **options)
  return slots_to_sorted(xp, scores, lay.n_in, lay.M, kk)
