"""An OAS fit with a set of rows removed per target, in closed form on the fit's one eigendecomposition.

Removing S rows (centred rows z_S; the class keeps L rows) from a fit on n rows changes its scatter to
  W' = W - Z_S^T C Z_S,   C = I_S + 1 1^T / L   (block-diagonal over classes for a shared fit),
so trace(W') and ||W'||_F^2 follow from Z_S Z_S^T and Z_S W Z_S^T (both S x S), and with them OAS's (alpha', beta').
With A = alpha' I + beta' W (diagonal in the fit's eigenbasis, lira/gram.py), Woodbury gives
  u^T S'^-1 v = u^T A^-1 v + beta' (Z_S A^-1 u)^T E^-1 C (Z_S A^-1 v),   E = I - beta' C Z_S A^-1 Z_S^T,
  logdet S'   = logdet A + logdet E.
Every vector scored is a combination of a few per-target vectors U = [z_S, then others: the target, the class-mean
gap, an offline direction], so all forms come from one Q x Q matrix H = U^T A^-1 U per target: residuals are
coefficient vectors over U, and no D-length vector is formed per target beyond U itself.

Array API (numpy or jax.numpy, no in-place updates); shapes: B canaries, J targets, Q basis vectors, R eigenvectors.
"""

import numpy as np
from array_api_compat import array_namespace

from lira import gram
from lira.covariance import oas_shrinkage


MATMUL_ROWS = 3  # batched matmul once both sides have this many rows (below it, broadcast sums)
STACK_ROWS = 6  # numpy: H of a basis up to this size as one product of the stacked parts (beyond, per part pair)


def pairs(a_BxJxQxX, b_BxJxPxX):
  """sum_x a[..., i, x] b[..., j, x]: [B, J, Q, P]. Where Q or P is below MATMUL_ROWS (LiRA's half/half split removes
  1-2 rows), vecdot over broadcast pairs (numpy's batched matmul of tiny matrices is its slowest case; XLA fuses the
  sum); from there on batched matmul (a count away from half removes up to M / 2 rows: at 30 x 30 pairs of 16
  positions numpy's matmul is 3x faster)."""
  if min(a_BxJxQxX.shape[-2], b_BxJxPxX.shape[-2]) >= MATMUL_ROWS:
    xp = array_namespace(a_BxJxQxX, b_BxJxPxX)
    return xp.matmul(a_BxJxQxX, xp.swapaxes(b_BxJxPxX, -1, -2))
  return gram._dot_last(a_BxJxQxX[..., :, None, :], b_BxJxPxX[..., None, :, :])


def _mm(a_SxS, b_BxJxSxP):
  """a @ b for a small constant a: a broadcast sum for S < MATMUL_ROWS, batched matmul from there on (numpy's
  broadcast sum forms a [B, J, S, S, P] product: 583 ms against 16 ms for matmul at S = P = 30; on XLA's CPU backend
  matmul made OAS at 28-30 removed rows 2.4x faster)."""
  xp = array_namespace(b_BxJxSxP)
  if a_SxS.shape[-1] >= MATMUL_ROWS:
    return xp.matmul(a_SxS, b_BxJxSxP)
  return xp.sum(a_SxS[..., :, :, None] * b_BxJxSxP[..., None, :, :], axis=-2)


def small_solve(E, b):
  """E^-1 b for batches of s x s systems E [..., s, s], b [..., s] (s <= 2 written out: the usual sizes)."""
  xp = array_namespace(E)
  s = E.shape[-1]
  if s == 0:
    return b
  if s == 1:
    return b / E[..., 0]
  if s == 2:
    a, bb, c, d = E[..., 0, 0], E[..., 0, 1], E[..., 1, 0], E[..., 1, 1]
    det = a * d - bb * c
    return xp.stack([(d * b[..., 0] - bb * b[..., 1]) / det, (a * b[..., 1] - c * b[..., 0]) / det], axis=-1)
  return xp.linalg.solve(E, b[..., None])[..., 0]


def small_logdet(E):
  """log det E for batches of s x s matrices with a positive determinant."""
  xp = array_namespace(E)
  s = E.shape[-1]
  if s == 0:
    return xp.zeros(E.shape[:-2], dtype=E.dtype)
  if s == 1:
    return xp.log(E[..., 0, 0])
  if s == 2:
    return xp.log(E[..., 0, 0] * E[..., 1, 1] - E[..., 0, 1] * E[..., 1, 0])
  return xp.linalg.slogdet(E)[1]


def lapack_deadlocks(a):
  """Whether the solves of `a`'s computation avoid LAPACK: jax arrays where jax's backend is the CPU (XLA's CPU
  backend runs the LAPACK calls of independent operations concurrently in one batch pool, and two batched LU calls
  deadlocked it, jaxlib 0.10.2 on 2 cores). Elsewhere (numpy; GPUs and TPUs) solves and log-determinants beyond two
  rows are LAPACK's (or the device's solver)."""
  if isinstance(a, np.ndarray):
    return False
  import jax
  return jax.default_backend() == "cpu"


def cholesky(K):
  """(F, log det K) for batches of symmetric positive definite jax arrays K [..., s, s], F lower triangular with
  F F^T = K, without a LAPACK call (`lapack_deadlocks`: the only place it runs): a loop over the s columns
  (lax.fori_loop, so a program holds one column's operations whatever s: a program of 28-30 removed rows compiles in
  3-5 s on a 2-core CPU, against 19-27 s with the columns written out; BENCHMARKS.md)."""
  import jax
  import jax.numpy as jnp
  s = K.shape[-1]
  rows = jnp.arange(s)

  def column(j, carry):
    F, logdet = carry
    F_j = jax.lax.dynamic_index_in_dim(F, j, axis=-2)  # row j, [..., 1, s]
    v = jax.lax.dynamic_index_in_dim(K, j, axis=-1, keepdims=False) - jnp.sum(F * F_j, axis=-1)  # less earlier columns
    d = jnp.sqrt(jax.lax.dynamic_index_in_dim(v, j, axis=-1, keepdims=False))
    F = jax.lax.dynamic_update_index_in_dim(F, jnp.where(rows >= j, v / d[..., None], 0.0), j, axis=-1)
    return F, logdet + 2.0 * jnp.log(d)

  return jax.lax.fori_loop(0, s, column,
                           (jnp.zeros_like(K), jnp.zeros(K.shape[:-2], dtype=K.dtype)))


def cholesky_solve(F, b):
  """K^-1 b for K = F F^T (`cholesky`) and b [..., s]: forward then backward substitution, a loop over the rows."""
  import jax
  import jax.numpy as jnp
  s = F.shape[-1]

  def at(x, j, axis=-1):
    return jax.lax.dynamic_index_in_dim(x, j, axis=axis, keepdims=False)

  def forward(j, w):  # F w = b
    F_j = at(F, j, -2)
    return jax.lax.dynamic_update_index_in_dim(w, (at(b, j) - jnp.sum(F_j * w, axis=-1)) / at(F_j, j), j, axis=-1)

  def backward(i, y):  # F^T y = w
    j = s - 1 - i
    F_j = at(F, j)  # column j
    return jax.lax.dynamic_update_index_in_dim(y, (at(w, j) - jnp.sum(F_j * y, axis=-1)) / at(F_j, j), j, axis=-1)

  w = jax.lax.fori_loop(0, s, forward, jnp.zeros_like(b))
  return jax.lax.fori_loop(0, s, backward, jnp.zeros_like(b))


def removal_inverse(xp, dtype, sizes, L):
  """(C^-1, log det C) of removal_matrix(sizes, L) in closed form, L a number or a traced scalar: per block of s
  rows (I + 1 1^T / L)^-1 = I - 1 1^T / (L + s) and det = 1 + s / L."""
  S = sum(sizes)
  inv = xp.asarray(np.eye(S), dtype=dtype)
  logdet = xp.zeros((), dtype=dtype)
  at = 0
  for s in sizes:
    block = np.zeros((S, S))
    block[at:at + s, at:at + s] = 1.0
    inv = inv - xp.asarray(block, dtype=dtype) / (L + s)
    logdet = logdet + xp.log(xp.asarray(1.0 + s / L, dtype=dtype)) if s else logdet
    at += s
  return inv, logdet


def removal_matrix(sizes, L, dtype=np.float64):
  """C for removal blocks of the given sizes from classes left with L rows each: blockdiag(I + 1 1^T / L)."""
  C = np.eye(sum(sizes), dtype=dtype)
  at = 0
  for s in sizes:
    C[at:at + s, at:at + s] += 1.0 / L
    at += s
  return C


def _removal_traces(G_BxJxSxS, sizes, L):
  """(trace(C G_S), trace(C G_S C G_S)) for C = removal_matrix(sizes, L) = I + sum_b 1_b 1_b^T / L, [B, J] each:
  tr(G) + sum_b 1_b^T G 1_b / L and ||G||_F^2 + 2 / L sum_b |G 1_b|^2 + 1 / L^2 sum_bc (1_b^T G 1_c)^2 (G
  symmetric), from row sums instead of the S x S x S product C G."""
  xp = array_namespace(G_BxJxSxS)
  trace = xp.sum(xp.linalg.diagonal(G_BxJxSxS), axis=-1)
  fro2 = xp.sum(G_BxJxSxS * G_BxJxSxS, axis=(-2, -1))
  cols, at = [], 0  # G 1_b per nonempty block b, [B, J, S]
  for s in sizes:
    if s:
      cols.append(xp.sum(G_BxJxSxS[..., at:at + s], axis=-1))
    at += s
  sums, at = [], 0  # 1_b^T G 1_c
  for s in sizes:
    if s:
      sums.append([xp.sum(col[..., at:at + s], axis=-1) for col in cols])
    at += s
  for b, col in enumerate(cols):
    trace = trace + sums[b][b] / L
    fro2 = fro2 + (2.0 / L) * xp.sum(col * col, axis=-1) + sum(x * x for x in sums[b]) / (L * L)
  return trace, fro2


def _with_residuals(parts):
  """Basis parts as (vectors, projections, residuals or None)."""
  return [tuple(part) + (None,) * (3 - len(part)) for part in parts]


class Removal:
  """`fit` (a lira.gram.Fit) with, per target, its first S basis rows removed (C: removal_matrix; n_after rows left).

  P_S, G_S: the removed rows' projections [B, J, S, R] and their dot products [B, J, S, S]. (alpha, beta) are the
  downdated OAS parameters [B, J]; call `basis` with the full basis before `form`.
  """

  def __init__(self, fit, P_S, G_S, C_SxS, n_after, floor, inverse=None, blocks=None):
    """inverse: (C^-1, log det C) (`removal_inverse`); with it, jax on a CPU solves with more than two removed rows by
    a Cholesky factorisation of the symmetric positive definite K = C^-1 - beta' Z_S A^-1 Z_S^T (E = C K), without
    LAPACK (`lapack_deadlocks`); numpy with `blocks` factors K by LAPACK's Cholesky (`forms`); elsewhere E is solved
    by LAPACK or the device's solver. blocks: (sizes, L, c_zwz) when C is
    removal_matrix(sizes, L), with sum(C * Z_S W Z_S^T) [B, J] when known (lira.balanced_removal._windows_zwz) or
    None: the traces then come from G_S's row sums, and that sum is not formed from the S x S product."""
    xp = self.xp = fit.xp
    self.fit, self.S = fit, C_SxS.shape[0]
    self.C = xp.asarray(C_SxS, dtype=fit.lam.dtype)
    self.inverse = inverse if self.S > 2 and lapack_deadlocks(fit.lam) else None
    self.F = self.K = None
    # numpy beyond two rows: LAPACK's Cholesky of K (below), bordered by the vectors a form needs
    self.bordered = removal_inverse(np, fit.lam.dtype, *blocks[:2]) \
        if self.S > 2 and blocks is not None and isinstance(fit.lam, np.ndarray) else None
    if self.S:
      c_zwz = blocks[2] if blocks is not None and blocks[2] is not None else \
          xp.sum(self.C * pairs(P_S * fit.lam[:, None, None, :], P_S), axis=(-2, -1))
      if blocks is not None and self.S >= MATMUL_ROWS:
        c_g, cgcg = _removal_traces(G_S, *blocks[:2])
      else:
        CG = _mm(self.C, G_S)
        c_g, cgcg = xp.sum(self.C * G_S, axis=(-2, -1)), xp.sum(CG * gram._swap(CG), axis=(-2, -1))
      trace = fit.trace_B[:, None] - c_g
      fro2 = fit.fro2_B[:, None] - 2.0 * c_zwz + cgcg
    else:
      trace = xp.broadcast_to(fit.trace_B[:, None], P_S.shape[:2])
      fro2 = xp.broadcast_to(fit.fro2_B[:, None], P_S.shape[:2])
    self.alpha, self.beta = fit.params(n_after, trace, fro2, floor)  # [B, J]
    self._logdet = None
    self.denom = fit.denominator(self.alpha, self.beta)
    self.w = fit.weights(self.denom)  # kept / (alpha + beta lam), [B, J, R]
    self.full_rank = (fit.rank_B >= fit.p_B)[:, None, None, None]
    # numpy: skip the outside-the-span terms when no canary has any (n >= D, the usual case at large M)
    self.spanned = isinstance(self.full_rank, np.ndarray) and bool(np.all(self.full_rank))

  def _block(self, part_i, weighted_i, part_j):
    """v_i^T A^-1 v_j for two basis parts (`_with_residuals`: vectors, projections, residuals or None, each
    [B, J|1, q, X]; weighted_i = p_i * w)."""
    (v_i, p_i, r_i), (v_j, p_j, r_j) = part_i, part_j
    xp = self.xp
    h = pairs(weighted_i, p_j)
    if not self.spanned:  # the part of the vectors outside the rows' span, where A^-1 is 1 / alpha
      if r_i is not None or r_j is not None:  # a residual is orthogonal to the span: one of them is enough
        g = pairs(v_i if r_i is None else r_i, v_j if r_j is None else r_j)
      else:
        g = pairs(v_i, v_j) - pairs(p_i, p_j)
      h = h + xp.where(self.full_rank, 0.0, g) / self.alpha[..., None, None]
    return xp.broadcast_to(h, self.alpha.shape + h.shape[2:])

  def basis(self, parts):
    """Set the basis U: parts [(vectors, projections)], each [B, J|1, q, D] and [B, J|1, q, R] (J = 1: the same for
    every target), the first part the S removed rows. A part of the fit's own rows is (rows, projections,
    residuals) with their `lira.gram.Fit.residual` (None unless `fit.needs_residuals`): for vectors in the span the part
    outside it, |v|^2 - |V^T v|^2, would cancel to rounding (about |v|^2 eps) divided by a small alpha; far from
    the span it does not cancel."""
    self.H = self._grown(None, [], _with_residuals(parts))
    S = self.S
    if self.bordered is not None:  # K = C^-1 - beta' H_SS, factored with the vectors of `forms`
      self.K = self.bordered[0] - self.beta[..., None, None] * self.H[..., :S, :S]
      return self
    if self.inverse is not None:  # E = C K, K = C^-1 - beta' H_SS: E^-1 C h = K^-1 h, log det E = log det C + log det K
      self.F, logdet_K = cholesky(self.inverse[0] - self.beta[..., None, None] * self.H[..., :S, :S])
      self.logdet_E = self.inverse[1] + logdet_K
      return self
    self.E = self.xp.eye(S, dtype=self.H.dtype) - self.beta[..., None, None] * _mm(self.C, self.H[..., :S, :S])
    return self

  def extend(self, old_parts, new_parts):
    """Add the vectors new_parts to the basis; old_parts: the basis so far, as these targets see it."""
    self.H = self._grown(self.H, _with_residuals(old_parts), _with_residuals(new_parts))
    return self

  def _grown(self, H, old_parts, new_parts):
    """H of the basis old_parts + new_parts (`_with_residuals`), given H of old_parts (None if there are none)."""
    xp = self.xp
    if H is None and self.spanned and MATMUL_ROWS <= sum(p.shape[-2] for _, p, _ in new_parts) <= STACK_ROWS:
      # numpy, every vector in the span, a small basis: one product U^T A^-1 U of the stacked projections
      shape = self.w.shape[:2]
      U = xp.concat([xp.broadcast_to(p, shape + p.shape[2:]) for _, p, _ in new_parts], axis=-2)  # [B, J, Q, R]
      return xp.matmul(U * self.w[:, :, None, :], gram._swap(U))
    weighted = [p * self.w[:, :, None, :] for _, p, _ in new_parts]
    n = len(new_parts)
    blocks = [[None] * n for _ in range(n)]
    for i in range(n):
      for j in range(i, n):
        blocks[i][j] = self._block(new_parts[i], weighted[i], new_parts[j])
      for j in range(i):
        blocks[i][j] = gram._swap(blocks[j][i])
    new = xp.concat([xp.concat(row, axis=-1) for row in blocks], axis=-2)
    if H is None:
      return new
    X = xp.concat([xp.concat([self._block(new_parts[i], weighted[i], old) for old in old_parts], axis=-1)
                   for i in range(n)], axis=-2)  # new^T A^-1 old, [B, J, Qn, Qo]
    return xp.concat([xp.concat([H, gram._swap(X)], axis=-1), xp.concat([X, new], axis=-1)], axis=-2)

  def take(self, idx_BxJ):
    """This removal as other targets see it: target j of canary b gets this removal's target idx[b, j] (its
    log-determinant taken too: a basis extended later leaves it unchanged)."""
    xp = self.xp
    out = object.__new__(Removal)
    out.xp, out.fit, out.S, out.C, out.full_rank, out.spanned, out.inverse, out.bordered = (
        self.xp, self.fit, self.S, self.C, self.full_rank, self.spanned, self.inverse, self.bordered)
    b = xp.arange(idx_BxJ.shape[0])[:, None]
    out.F = out.K = None
    solver = ("F", "logdet_E") if self.F is not None else ("K",) if self.K is not None else ("E",)
    for name in ("alpha", "beta", "w", "H") + solver:
      setattr(out, name, getattr(self, name)[b, idx_BxJ])
    out.denom, out._logdet = None, self.logdet()[b, idx_BxJ]
    return out

  def form(self, a, b):
    """a^T S'^-1 b per target, [B, J], for coefficient vectors over the basis (constants [Q] or arrays [B, J, Q])."""
    return self.forms([(a, b)])[0]

  def forms(self, pairs_ab):
    """[a^T S'^-1 b per target, [B, J]] for pairs (a, b) of coefficient vectors (`form`), with one factorisation."""
    xp = self.xp
    vecs = []  # the distinct coefficient vectors, by identity
    for ab in pairs_ab:
      for v in ab:
        if not any(v is u for u in vecs):
          vecs.append(v)
    Hv = [xp.sum(self.H * v[..., None, :], axis=-1) for v in vecs]  # [B, J, Q] each
    pos = [[next(i for i, u in enumerate(vecs) if u is v) for v in ab] for ab in pairs_ab]
    outs = [xp.sum(a * Hv[j], axis=-1) for (a, _), (_, j) in zip(pairs_ab, pos)]
    if not self.S:
      return outs
    S = self.S
    if self.K is not None:
      y = self._bordered_solve([h[..., :S] for h in Hv])
      if y is not None:  # beta' h_a^T K^-1 h_b = beta' (F^-1 h_a) . (F^-1 h_b)
        return [o + self.beta * xp.sum(y[..., i, :] * y[..., j, :], axis=-1) for o, (i, j) in zip(outs, pos)]
    ys = {}
    for o_at, (i, j) in enumerate(pos):
      if j not in ys:
        ys[j] = self._solve(Hv[j])
      outs[o_at] = outs[o_at] + self.beta * xp.sum(Hv[i][..., :S] * ys[j], axis=-1)
    return outs

  def _solve(self, Hb):
    """E^-1 C (Z_S A^-1 b) from Hb = U^T A^-1 b, [B, J, S]."""
    xp, S = self.xp, self.S
    if self.F is not None:
      return cholesky_solve(self.F, Hb[..., :S])  # = K^-1 (Z_S A^-1 b)
    if self.K is not None:
      return np.linalg.solve(self.K, Hb[..., :S, None])[..., 0]  # E^-1 C = K^-1
    return small_solve(self.E, xp.sum(self.C * Hb[..., None, :S], axis=-1))

  def _bordered_solve(self, h_list):
    """Rows F^-1 h [B, J, m, S] for K = F F^T (numpy), from one LAPACK Cholesky of K bordered by the m vectors h
    [B, J, S] and t I: its last m rows are (F^-1 h)^T whatever t, and t = 1e200 keeps the border positive definite
    (1e200 - |F^-1 h|^2 rounds to 1e200). Sets log det K from the same factor. None where K is not numerically
    positive definite (then LU solves, as for `logdet`)."""
    S, m = self.S, len(h_list)
    Hm = np.stack(h_list, axis=-1)  # [B, J, S, m]
    t = np.broadcast_to(1e200 * np.eye(m), Hm.shape[:-2] + (m, m))
    A = np.concatenate([np.concatenate([self.K, Hm], axis=-1),
                        np.concatenate([np.swapaxes(Hm, -1, -2), t], axis=-1)], axis=-2)
    try:
      F = np.linalg.cholesky(A)
    except np.linalg.LinAlgError:
      return None
    if self._logdet is None:
      self._set_logdet_K(2.0 * np.sum(np.log(np.diagonal(F[..., :S, :S], axis1=-2, axis2=-1)), axis=-1))
    return F[..., S:, :S]

  def _set_logdet_K(self, logdet_K):
    self._logdet = self.fit.logdet(self.alpha, self.beta, self.denom) + self.bordered[1] + logdet_K

  def logdet(self):
    """logdet S' per target, [B, J] (computed once)."""
    if self._logdet is None and self.K is not None:  # log det E = log det C + log det K
      self._set_logdet_K(np.linalg.slogdet(self.K)[1])
    if self._logdet is None:
      logdet_E = self.logdet_E if self.F is not None else small_logdet(self.E)
      self._logdet = self.fit.logdet(self.alpha, self.beta, self.denom) + logdet_E
    return self._logdet


class Kept:
  """An OAS fit made directly on each target's L kept rows (centred: Kc [B, J, L, D]), solved in their L x L Gram
  space: S = alpha I + beta Kc^T Kc, S^-1 = (I - beta Kc^T (alpha I + beta Kc Kc^T)^-1 Kc) / alpha. Used where a
  class drops more rows than it keeps (a downdate would cancel most of its scatter, which float32 cannot afford)."""

  def __init__(self, Kc_BxJxLxD, p_B, floor):
    xp = self.xp = array_namespace(Kc_BxJxLxD)
    self.Kc, L = Kc_BxJxLxD, Kc_BxJxLxD.shape[2]
    G = pairs(Kc_BxJxLxD, Kc_BxJxLxD)
    p = p_B[:, None]
    trace, fro2 = xp.sum(xp.linalg.diagonal(G), axis=-1), xp.sum(G * G, axis=(-2, -1))
    mu = trace / (L * p)
    rho = oas_shrinkage(mu, fro2 / (L * L * p * p), float(L), p)
    self.alpha, self.beta = xp.maximum(rho * mu, floor), (1.0 - rho) / L  # as lira.gram.Fit.params, n = L
    self.A = self.alpha[..., None, None] * xp.eye(L, dtype=G.dtype) + self.beta[..., None, None] * G
    self.extra_logdet = (p - L) * xp.log(self.alpha)
    # jax on a CPU factors A (symmetric positive definite) without LAPACK beyond two rows (`lapack_deadlocks`)
    self.F = None
    if L > 2 and lapack_deadlocks(G):
      self.F, self.logdet_A = cholesky(self.A)

  def bilinear(self, u_BxJxD, v_BxJxD):
    """u^T S^-1 v per target, [B, J]."""
    xp = self.xp
    Ku = gram._dot_last(self.Kc, u_BxJxD[:, :, None, :])
    Kv = Ku if v_BxJxD is u_BxJxD else gram._dot_last(self.Kc, v_BxJxD[:, :, None, :])
    y = small_solve(self.A, Kv) if self.F is None else cholesky_solve(self.F, Kv)
    return (gram._dot_last(u_BxJxD, v_BxJxD) - self.beta * xp.sum(Ku * y, axis=-1)) / self.alpha

  def logdet(self):
    """logdet S on the p scored positions, [B, J]."""
    return (small_logdet(self.A) if self.F is None else self.logdet_A) + self.extra_logdet
