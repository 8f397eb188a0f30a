"""Removals of per-target row sets from a fit, streamed one row (or one pair of rows) at a time: the cost follows each
block's own removal counts, not the static bound of the program's buffers (lira/balanced_padded.py).

Balanced leave-one-out (lira/balanced.py) removes from a fit, per target, s rows of one class or of each (a set of
1-2 rows at LiRA's half/half split, about |M - 2k| + 1 rows at IN count k). lira.balanced_removal gathers every
target's rows at once ([B, J, S, D]), so a program's cost and memory follow its static S. Here a program holds
buffers for the largest S of the run, and loops whose trip counts are values (the block's largest s) read one row
per step, so one program serves every count and a block of canaries near half pays for the rows it removes:

- `window_sums`: per target, the sum g of each removed set, and the sum of squares of its rows (the diagonal
  estimators' downdate, sum z^2 + g^2 / L, and offline std's diag(W'));
- `Stream`: OAS with the set removed. trace(W') and ||W'||_F^2 (OAS's alpha', beta') from C = I + blocks of
  1 1^T / L: trace(C G_S) with G_S = Z_S Z_S^T, tr(C Z_S W Z_S^T) with Z_S W Z_S^T in the fit's eigenbasis, and
  tr(C G_S C G_S) = tr(G_S^2) + 2 / L sum_b |G_S 1_b|^2 + 1 / L^2 sum_bc (1_b^T G_S 1_c)^2 (a pass over the rows
  for the sums g_b, then one over pairs for tr(G_S^2), whose outer loop gives G_S 1_b = Z_S g_b). Then Woodbury as
  lira/woodbury.py writes it:
    u^T S'^-1 v = u^T A^-1 v + beta' h_u^T K^-1 h_v,   h_u = Z_S A^-1 u,   K = C^-1 - beta' Z_S A^-1 Z_S^T,
    logdet S' = logdet A + logdet C + logdet K,   C^-1 = I - blocks of 1 1^T / (L + s_b),
  with K = F F^T formed and factored row by row in one pass over the pairs of rows (rows beyond a target's own s
  are the identity's), so that h_u^T K^-1 h_v = (F^-1 h_u) . (F^-1 h_v) by forward substitution alone and the work
  follows the block's rows, not the buffers' S x S. The vectors scored (residuals, offline directions) are explicit
  per target: the removed rows enter them only through g.

Array API with two loop helpers (`fori`, `put`): lax.fori_loop and dynamic updates on jax, Python loops on numpy.
Shapes: B canaries, N slots (rows), J targets, S the static bound of a target's removed rows, R eigenvectors.
"""

import numpy as np
from array_api_compat import array_namespace

from lira import balanced_removal


def _is_numpy(a):
  return isinstance(a, np.ndarray)


def fori(n, body, carry, like):
  """body(i, carry) for i in range(n): lax.fori_loop on jax (n may be traced), a Python loop on numpy."""
  if _is_numpy(like):
    for i in range(int(n)):
      carry = body(i, carry)
    return carry
  import jax
  return jax.lax.fori_loop(0, n, body, carry)


def put(buf, i, value, axis):
  """buf with index i of `axis` set to value (value lacks that axis)."""
  if _is_numpy(buf):
    out = buf.copy()
    idx = [slice(None)] * buf.ndim
    idx[axis] = int(i)
    out[tuple(idx)] = value
    return out
  import jax
  return jax.lax.dynamic_update_index_in_dim(buf, value, i, axis)


def _index(a, i, axis):
  """a's index i along `axis` (i a number or, on jax, a traced scalar), that axis dropped."""
  if _is_numpy(a):
    return np.take(a, int(i), axis=axis)
  import jax
  return jax.lax.dynamic_index_in_dim(a, i, axis=axis, keepdims=False)


def rows(a_BxNxX, idx_BxJ):
  """a[b, idx[b, j]]: [B, J, X] (lira.balanced_removal.gather of one row per target)."""
  return balanced_removal.gather(a_BxNxX, idx_BxJ[:, :, None])[:, :, 0]


class Sets:
  """Per target, one or two sets of rows removed: set b holds s_b rows (s_b a number or a traced scalar, the same
  for every target of the block's canary), its t-th row at slot at_b(t) ([B, J] int). Row t of the union is set 0's
  for t < s_0, then set 1's. trip: a bound on s_0 + s_1 (the loops' count: the block's largest)."""

  def __init__(self, sets, trip):
    self.sets, self.trip = sets, trip

  def at(self, xp, t):
    """(slot [B, J] of union row t, its set (0 or 1), whether it is a removed row at all)."""
    (at0, s0) = self.sets[0]
    if len(self.sets) == 1:
      return at0(t), xp.asarray(0), xp.asarray(t < s0)
    at1, s1 = self.sets[1]
    first = xp.asarray(t < s0)
    later = max(t - s0, 0) if isinstance(t, int) else xp.maximum(t - s0, 0)
    return xp.where(first, at0(t), at1(later)), xp.where(first, 0, 1), xp.asarray(t < s0 + s1)


def window_sums(z_BxNxD, sets, P_BxNxR=None, lam_BxR=None):
  """([g_b per set] [B, J, D], the sum of squared rows over the union [B, J, D]); with the rows' projections on a
  fit and its eigenvalues, also ([the g_b's projections] [B, J, R], sum_t z_t^T W z_t [B, J])."""
  xp = array_namespace(z_BxNxD)
  dt = z_BxNxD.dtype
  B, _, D = z_BxNxD.shape
  J = sets.sets[0][0](0).shape[-1]
  zero = xp.zeros((B, J, D), dtype=dt)
  projected = P_BxNxR is not None
  zero_p = xp.zeros((B, J, P_BxNxR.shape[-1]), dtype=dt) if projected else None

  def body(t, carry):
    gs, sq, pgs, zwz = carry
    slot, which, real = sets.at(xp, t)
    on = xp.astype(real, dt)
    row = rows(z_BxNxD, slot) * on
    gs = tuple(g + row * xp.astype(which == b, dt) for b, g in enumerate(gs))
    if projected:
      p = rows(P_BxNxR, slot) * on
      pgs = tuple(pg + p * xp.astype(which == b, dt) for b, pg in enumerate(pgs))
      zwz = zwz + xp.sum(p * p * lam_BxR[:, None, :], axis=-1)
    return gs, sq + row * row, pgs, zwz

  carry = (tuple(zero for _ in sets.sets), zero, tuple(zero_p for _ in sets.sets) if projected else (),
           xp.zeros((B, J), dtype=dt) if projected else None)
  gs, sq, pgs, zwz = fori(sets.trip, body, carry, z_BxNxD)
  return (list(gs), sq) + ((list(pgs), zwz) if projected else ())


class Vector:
  """A vector scored per target: (v [B, J|1, D], its projection on the fit [B, J|1, R], its residual outside the
  fit's span [B, J|1, D] or None: `outside`)."""

  def __init__(self, v, p, r=None):
    self.v, self.p, self.r = v, p, r


class Stream:
  """`fit` (a lira.gram.Fit of centred rows z_BxNxD, projections P_BxNxR, residuals R_BxNxD or None) with each
  target's `sets` of rows removed, the classes left with L rows each (n_after rows in the fit: L, or 2L pooled).

  Construction makes two passes over the removed rows (their sums; the pairs for tr(G_S^2)) and sets OAS's alpha',
  beta'; `forms` makes the third (K, its factor and the vectors' h together); `logdet` needs `forms` first."""

  def __init__(self, fit, z_BxNxD, P_BxNxR, R_BxNxD, sets, L, n_after, floor, S):
    xp = self.xp = fit.xp
    dt = z_BxNxD.dtype
    self.fit, self.z, self.P, self.R, self.sets, self.L, self.S = fit, z_BxNxD, P_BxNxR, R_BxNxD, sets, L, S
    lam = fit.lam[:, None, :]
    B, J = sets.sets[0][0](0).shape
    # each set's sum g and its projection, the squared rows, and sum_t z_t^T W z_t
    self.gs, self.sq, self.pgs, zwz_diag = window_sums(z_BxNxD, sets, P_BxNxR, fit.lam)

    def pairs(a, acc):  # tr(G_S^2) = sum over pairs (a, b) of (z_a . z_b)^2, and sum_b |G_S 1_b|^2; G_S's rows
      tr_g2, tr_eg2, G = acc
      slot_a, _, real_a = sets.at(xp, a)
      z_a = rows(z_BxNxD, slot_a) * xp.astype(real_a, dt)

      def inner(b, acc):
        tr, row = acc
        slot_b, _, real_b = sets.at(xp, b)
        g = xp.sum(z_a * rows(z_BxNxD, slot_b), axis=-1) * xp.astype(real_b, dt)
        return tr + xp.where(b == a, 1.0, 2.0) * g * g, row if S == 0 else put(row, b, g, axis=-1)
      tr_g2, row = fori(a + 1, inner, (tr_g2, xp.zeros((B, J, S), dtype=dt)), z_BxNxD)
      G = G if S == 0 else put(G, a, row, axis=-2)
      return tr_g2, tr_eg2 + sum(xp.sum(z_a * g, axis=-1) ** 2 for g in self.gs), G

    # G_S (its lower triangle) is kept for K's entries outside the fit's span, z_a . z_b - p_a . p_b: read there
    # instead of each row pair's D-length rows read again (without residuals; float32 reads the residuals)
    tr_g2, tr_eg2, self.G = fori(sets.trip, pairs, (xp.zeros((B, J), dtype=dt),) * 2
                                 + (xp.zeros((B, J, S, S), dtype=dt),), z_BxNxD)
    gg = [[xp.sum(gb * gc, axis=-1) for gc in self.gs] for gb in self.gs]
    trace = fit.trace_B[:, None] - (xp.sum(self.sq, axis=-1) + sum(gg[b][b] for b in range(len(self.gs))) / L)
    zwz = zwz_diag + sum(xp.sum(pg * pg * lam, axis=-1) for pg in self.pgs) / L
    fro2 = (fit.fro2_B[:, None] - 2.0 * zwz + tr_g2 + (2.0 / L) * tr_eg2
            + sum(x * x for row in gg for x in row) / (L * L))
    self.alpha, self.beta = fit.params(n_after, trace, fro2, floor)  # [B, J]
    self.denom = fit.denominator(self.alpha, self.beta)
    self.w = fit.weights(self.denom)  # [B, J, R]
    self.full_rank = (fit.rank_B >= fit.p_B)[:, None]
    self.logdet_C = sum(xp.log(1.0 + xp.astype(s, dt) / L) for _, s in sets.sets)
    self.logdet_K = None

  def _factor_and_h(self, vectors):
    """[w_x per vector]: w_x = F^-1 h_x with h_x = Z_S A^-1 x, where F F^T = K = C^-1 - beta' Z_S A^-1 Z_S^T (the
    identity's rows beyond each target's own rows), in one pass over the row pairs: row a of K is formed and at once
    turned into row a of its Cholesky factor F (each entry needs the finished rows above it), then w_x's entry a
    (forward substitution). So h_u^T K^-1 h_v = w_u . w_v, log det K = 2 sum log F_aa, and the work follows the
    block's rows (trip), never the S x S of the buffers beyond them."""
    xp, sets, S, L = self.xp, self.sets, self.S, self.L
    dt = self.z.dtype
    B, J = self.alpha.shape
    sizes = [xp.astype(s, dt) for _, s in sets.sets]

    def k_entry(a, b, va, pw_a, which_a, real_a, same_row, G_a):
      """K[a, b] for b <= a (the identity's where row a or b is beyond the target's own rows); G_a: G_S's row a."""
      slot_b, which_b, real_b = sets.at(xp, b)
      if self.R is None:  # z_a . z_b from G_S
        p_b = va.p if same_row else rows(self.P, slot_b)
        outside = xp.where(self.full_rank, 0.0, _index(G_a, b, axis=-1) - xp.sum(va.p * p_b, axis=-1)) / self.alpha
        h = xp.sum(pw_a * p_b, axis=-1) + outside
      else:
        vb = va if same_row else self._row_vector(slot_b)
        h = xp.sum(pw_a * vb.p, axis=-1) + self._outside(va, vb)
      same = 1.0 if same_row else xp.astype(which_a == which_b, dt)
      size = sizes[0] if len(sizes) == 1 else xp.where(which_a == 0, sizes[0], sizes[1])
      k = (1.0 if same_row else 0.0) - same / (L + size) - self.beta * h
      return xp.where(real_a & real_b, k, 1.0 if same_row else 0.0)

    def f_row(a, carry):
      F, ws, hs, logdet = carry
      slot_a, which_a, real_a = sets.at(xp, a)
      va = self._row_vector(slot_a)
      pw_a = va.p * self.w
      G_a = _index(F, a, axis=-2)  # G_S's row a, not yet overwritten by F's

      def inner(b, carry):  # F[a, b] = (K[a, b] - F[a, :b] . F[b, :b]) / F[b, b]
        row, F = carry
        F_b = _index(F, b, axis=-2)
        k = k_entry(a, b, va, pw_a, which_a, real_a, False, G_a)
        return put(row, b, (k - xp.sum(row * F_b, axis=-1)) / _index(F_b, b, axis=-1), axis=-1), F

      row, F = fori(a, inner, (xp.zeros((B, J, S), dtype=dt), F), self.z)
      d = xp.sqrt(k_entry(a, a, va, pw_a, which_a, real_a, True, G_a) - xp.sum(row * row, axis=-1))
      row = put(row, a, d, axis=-1)
      on = xp.astype(real_a, dt)
      hs = tuple(put(h, a, (xp.sum(pw_a * x.p, axis=-1) + self._outside(va, x)) * on, axis=-1)
                 for h, x in zip(hs, vectors))
      ws = tuple(put(w, a, (_index(h, a, axis=-1) - xp.sum(row * w, axis=-1)) / d, axis=-1) for w, h in zip(ws, hs))
      return put(F, a, row, axis=-2), ws, hs, logdet + 2.0 * xp.log(d)

    # F's rows overwrite G_S's in one buffer: row a of G_S is read just before row a of F is written there
    zeros = tuple(xp.zeros((B, J, S), dtype=dt) for _ in vectors)
    _, ws, _, self.logdet_K = fori(sets.trip, f_row, (self.G, zeros, zeros, xp.zeros((B, J), dtype=dt)), self.z)
    return list(ws)

  def _row_vector(self, slot):
    """The fit's row at `slot` as a Vector."""
    return Vector(rows(self.z, slot), rows(self.P, slot), None if self.R is None else rows(self.R, slot))

  def _outside(self, u, v):
    """(u . v outside the fit's span) / alpha' where some canary's rows do not span its positions, [B, J]."""
    xp = self.xp
    if u.r is None and v.r is None:  # float64: |u . v - pu . pv| is rounding for vectors in or near the span
      g = xp.sum(u.v * v.v, axis=-1) - xp.sum(u.p * v.p, axis=-1)
    else:  # a residual is orthogonal to the span: one of them is enough
      g = xp.sum((u.v if u.r is None else u.r) * (v.v if v.r is None else v.r), axis=-1)
    return xp.where(self.full_rank, 0.0, g) / self.alpha

  def vector(self, v, p):
    """A Vector of v [B, J, D] with projection p, its residual where the fit needs residuals (float32)."""
    return Vector(v, p, self.fit.residual(v, p) if self.fit.needs_residuals else None)

  def forms(self, pairs):
    """u^T S'^-1 v per target for pairs [(u, v)] of Vectors: [[B, J] per pair]."""
    xp = self.xp
    vectors = []
    for u, v in pairs:
      for x in (u, v):
        if not any(x is y for y in vectors):
          vectors.append(x)
    if self.S == 0:  # no target of the program removes a row from this fit
      B, J = self.alpha.shape
      ws = [xp.zeros((B, J, 0), dtype=self.z.dtype) for _ in vectors]
      self.logdet_K = xp.zeros((B, J), dtype=self.z.dtype)
    else:
      ws = self._factor_and_h(vectors)
    out = []
    for u, v in pairs:
      iu = next(i for i, x in enumerate(vectors) if x is u)
      iv = next(i for i, x in enumerate(vectors) if x is v)
      base = xp.sum(u.p * self.w * v.p, axis=-1) + self._outside(u, v)
      out.append(base + self.beta * xp.sum(ws[iu] * ws[iv], axis=-1))  # h_u^T K^-1 h_v
    return out

  def logdet(self):
    """logdet S' per target, [B, J] (after `forms`, which factors K)."""
    return self.fit.logdet(self.alpha, self.beta, self.denom) + self.logdet_C + self.logdet_K
