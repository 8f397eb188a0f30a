"""Removals of per-target row sets from a fit, streamed one row (or one pair of rows) at a time: the cost follows each
block's own removal counts, not the static bound of the program's buffers (lira/balanced_padded.py).

Balanced leave-one-out (lira/balanced.py) removes from a fit, per target, s rows of one class or of each (a set of
1-2 rows at LiRA's half/half split, about |M - 2k| + 1 rows at IN count k). lira.balanced_removal gathers every
target's rows at once ([B, J, S, D]), so a program's cost and memory follow its static S. Here a program holds
buffers for the largest S of the run, and loops whose trip counts are values (the block's largest s) read one row
per step, so one program serves every count and a block of canaries near half pays for the rows it removes. Each
removed set is a `Window`: a cyclic run of one class's sorted rows, with a start and a count per target.

- `window_sums`: per target, the sum g of each removed window, and the sum of squares of its rows (the diagonal
  estimators' downdate, sum z^2 + g^2 / L, and offline std's diag(W'));
- `Stream`: OAS with the windows removed. trace(W') and ||W'||_F^2 (OAS's alpha', beta') from C = I + blocks of
  1 1^T / L: trace(C G_S) with G_S = Z_S Z_S^T, tr(C Z_S W Z_S^T) with Z_S W Z_S^T in the fit's eigenbasis, and
  tr(C G_S C G_S) = tr(G_S^2) + 2 / L sum_b |G_S 1_b|^2 + 1 / L^2 sum_bc (1_b^T G_S 1_c)^2. A window's G_S is a
  stretch of its class's band of dot products z_i . z_(i + o), o < s (`Window.band`: one pass over the class's rows
  per offset), so tr(G_S^2) and G_S 1_b = Z_S g_b take one pass over the window's rows, not one per pair. Then
  Woodbury as lira/woodbury.py writes it:
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


def fori(n, body, carry, like, start=0):
  """body(i, carry) for i in range(start, n): lax.fori_loop on jax (n may be traced), a Python loop on numpy."""
  if _is_numpy(like):
    for i in range(start, int(n)):
      carry = body(i, carry)
    return carry
  import jax
  return jax.lax.fori_loop(start, n, body, carry)


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


def _last(x):
  """x with a trailing axis where it has any (a per-target [B, J] mask against [B, J, X] rows)."""
  return x[..., None] if x.ndim else x


def _entries(a_BxN, idx_BxJ):
  """a[b, idx[b, j]]: [B, J]."""
  return array_namespace(a_BxN).take_along_axis(a_BxN, idx_BxJ, axis=1)


class Window:
  """One class's rows removed per target: a cyclic window of the class's sorted rows. The class holds the slots
  at.. at + cap, its first n real (n a number or a traced scalar); target j's window starts at position
  start_BxJ[b, j] of the class and holds s rows (a number or a traced scalar, or per target: any shape that
  broadcasts to [B, J]). trip: a bound on s (the loops' count: the block's largest); S: the static bound of s (the
  buffers')."""

  def __init__(self, at, cap, n, start_BxJ, s, trip, S):
    self.at, self.cap, self.n, self.start, self.s, self.trip, self.S = at, cap, n, start_BxJ, s, trip, S
    xp = array_namespace(start_BxJ)
    self.s_BxJ = xp.broadcast_to(xp.asarray(s), start_BxJ.shape)  # s per target

  def pos(self, t):
    """Each target's t-th window row, as a position in the class, [B, J]."""
    return (self.start + t) % self.n

  def slot(self, t):
    """Each target's t-th window row, as a slot, [B, J]."""
    return self.at + self.pos(t)

  def band(self, z_BxNxD):
    """The class's rows' dot products with the rows o positions after them (cyclically), for o < trip:
    [S, B, cap], band[o, b, i] = z_i . z_(i + o mod n) (zeros for o >= trip and in empty slots). The removed rows'
    dot products G_S[a, a + o] of target j are band[o, (start_j + a) mod n]: trip passes over the class's rows
    instead of one per pair of each target's removed rows (lira.balanced_removal.Windows.gram builds the same band
    for a static count and class size)."""
    xp = array_namespace(z_BxNxD)
    zc = z_BxNxD[:, self.at:self.at + self.cap]
    i = xp.asarray(np.arange(self.cap, dtype=np.int32))

    def body(o, band):
      partner = xp.take(zc, (i + o) % self.n, axis=1)
      return put(band, o, xp.sum(zc * partner, axis=-1), axis=0)
    return fori(self.trip, body, xp.zeros((self.S,) + zc.shape[:2], dtype=zc.dtype), zc)


class Sets:
  """Per target, the rows removed from one fit: one or two `Window`s (two in a pooled fit: the target's own class's,
  then the other's). Row t of the union is window 0's for t < s_0, then window 1's. trip: a bound on s_0 + s_1."""

  def __init__(self, windows, trip):
    self.windows, self.trip = [w for w in windows], trip

  def at(self, xp, t):
    """(slot [B, J] of union row t, its window (0 or 1), whether it is a removed row at all)."""
    w0 = self.windows[0]
    if len(self.windows) == 1:
      return w0.slot(t), xp.asarray(0), xp.asarray(t < w0.s)
    w1 = self.windows[1]
    first = xp.asarray(t < w0.s)
    later = xp.maximum(xp.asarray(t - w0.s), 0)
    return xp.where(first, w0.slot(t), w1.slot(later)), xp.where(first, 0, 1), xp.asarray(t < w0.s + w1.s)

  def shape(self):
    """(B, J): the canaries and targets."""
    return self.windows[0].start.shape


def window_sums(z_BxNxD, sets, P_BxNxR=None, lam_BxR=None):
  """([g_b per window] [B, J, D], the sum of squared rows over the union [B, J, D]); with the rows' projections on a
  fit and its eigenvalues, also ([the g_b's projections] [B, J, R], sum_t z_t^T W z_t [B, J]). The loop starts from
  union row 0's terms (no buffers of zeros to copy in)."""
  xp = array_namespace(z_BxNxD)
  dt = z_BxNxD.dtype
  projected = P_BxNxR is not None

  def terms(t):
    slot, which, real = sets.at(xp, t)
    on = _last(xp.astype(real, dt))
    row = rows(z_BxNxD, slot) * on
    gs = tuple(row * _last(xp.astype(which == b, dt)) for b in range(len(sets.windows)))
    if not projected:
      return gs, row * row, (), None
    p = rows(P_BxNxR, slot) * on
    pgs = tuple(p * _last(xp.astype(which == b, dt)) for b in range(len(sets.windows)))
    return gs, row * row, pgs, xp.sum(p * p * lam_BxR[:, None, :], axis=-1)

  def body(t, carry):
    new = terms(t)
    return (tuple(a + b for a, b in zip(carry[0], new[0])), carry[1] + new[1],
            tuple(a + b for a, b in zip(carry[2], new[2])), carry[3] + new[3] if projected else None)

  gs, sq, pgs, zwz = fori(sets.trip, body, terms(0), z_BxNxD, start=1)
  return (list(gs), sq) + ((list(pgs), zwz) if projected else ())


class Vector:
  """A vector scored per target: (v [B, J|1, D], its projection on the fit [B, J|1, R], its residual outside the
  fit's span [B, J|1, D] or None: `outside`)."""

  def __init__(self, v, p, r=None):
    self.v, self.p, self.r = v, p, r


class Stream:
  """`fit` (a lira.gram.Fit of centred rows z_BxNxD, projections P_BxNxR, residuals R_BxNxD or None) with each
  target's `sets` of rows removed, the classes left with L rows each (n_after rows in the fit: L, or 2L pooled).
  L and n_after: numbers, or per target (broadcasting to [B, J]). Two windows (a pooled fit) remove, per target, at
  most one row of one of them (balanced counts remove the target alone from its class, or nothing from the other:
  lira.balanced.removal_counts).

  Construction makes its passes over the removed rows (their sums; each window's band of dot products and its rows
  for tr(G_S^2); the cross products of two windows) and sets OAS's alpha', beta'; `forms` makes the last (K, its
  factor and the vectors' h together); `logdet` needs `forms` first. S: the static bound of the union's rows."""

  def __init__(self, fit, z_BxNxD, P_BxNxR, R_BxNxD, sets, L, n_after, floor, S, scratch=None):
    xp = self.xp = fit.xp
    dt = z_BxNxD.dtype
    self.fit, self.z, self.P, self.R, self.sets, self.L = fit, z_BxNxD, P_BxNxR, R_BxNxD, sets, L
    # K's factor F [S, B, J, S] starts from `scratch` where given: another stream's finished F (its values are never
    # read: each row is written before it is read), so one buffer of zeros serves a program's streams in turn
    self.S = S if scratch is None or S == 0 else scratch.shape[0]
    self.scratch = scratch
    lam = fit.lam[:, None, :]
    B, J = sets.shape()
    # each window's sum g and its projection, the squared rows, and sum_t z_t^T W z_t
    self.gs, self.sq, self.pgs, zwz_diag = window_sums(z_BxNxD, sets, P_BxNxR, fit.lam)
    # tr(G_S^2) = sum over pairs (a, b) of (z_a . z_b)^2 and sum_b |G_S 1_b|^2 = sum_b sum_a (z_a . g_b)^2: within
    # each window from its band (G_S[a, a + o] = band[o, pos_a]), across the two from the cross products
    self.bands = [None if w.S == 0 else xp.permute_dims(w.band(z_BxNxD), (1, 2, 0)) for w in sets.windows]
    tr_g2 = tr_eg2 = xp.zeros((B, J), dtype=dt)
    for w, band_BxCxS in zip(sets.windows, self.bands):
      if band_BxCxS is not None:
        tr, eg = self._window_pairs(w, band_BxCxS)
        tr_g2, tr_eg2 = tr_g2 + tr, tr_eg2 + eg
    self.cross = None  # ([S_1, B, J], [S_0, B, J]): each window's first row . the other window's rows
    if len(sets.windows) == 2 and all(w.S > 0 for w in sets.windows):
      cross_tr, self.cross = self._cross()
      tr_g2 = tr_g2 + cross_tr
    gg = [[xp.sum(gb * gc, axis=-1) for gc in self.gs] for gb in self.gs]
    trace = fit.trace_B[:, None] - (xp.sum(self.sq, axis=-1) + sum(gg[b][b] for b in range(len(self.gs))) / L)
    zwz = zwz_diag + sum(xp.sum(pg * pg * lam, axis=-1) for pg in self.pgs) / L
    fro2 = (fit.fro2_B[:, None] - 2.0 * zwz + tr_g2 + (2.0 / L) * tr_eg2
            + sum(x * x for row in gg for x in row) / (L * L))
    self.alpha, self.beta = fit.params(n_after, trace, fro2, floor)  # [B, J]
    self.denom = fit.denominator(self.alpha, self.beta)
    self.w = fit.weights(self.denom)  # [B, J, R]
    self.full_rank = (fit.rank_B >= fit.p_B)[:, None]
    self.logdet_C = sum(xp.log(1.0 + xp.astype(w.s, dt) / L) for w in sets.windows)
    self.logdet_K = None

  def _window_pairs(self, win, band_BxCxS):
    """(sum over the window's row pairs of (z_a . z_b)^2, sum over its rows a and the windows b of (z_a . g_b)^2),
    [B, J] each: one pass over the window's rows."""
    xp, z = self.xp, self.z
    dt = z.dtype
    o_S = xp.asarray(np.arange(win.S, dtype=np.int32))
    twice_S = xp.asarray(np.where(np.arange(win.S) == 0, 1.0, 2.0), dtype=dt)

    def body(a, carry):
      tr, eg = carry
      pos = win.pos(a)
      real = a < win.s_BxJ
      g_row = rows(band_BxCxS, pos)  # [B, J, S]: G_S[a, a + o] of the window
      weight = xp.where((o_S < win.s_BxJ[..., None] - a) & real[..., None], twice_S, 0.0)
      z_a = rows(z, win.at + pos) * xp.astype(real, dt)[..., None]
      return tr + xp.sum(weight * g_row * g_row, axis=-1), eg + sum(xp.sum(z_a * g, axis=-1) ** 2 for g in self.gs)
    zero = xp.zeros(win.start.shape, dtype=dt)
    return fori(win.trip, body, (zero, zero), z)

  def _cross(self):
    """(2 sum (z_a . z_b)^2 over the pairs of the two windows' rows, [B, J]; (X01, X10)): X01 [S_1, B, J], the first
    window's first row . the second window's rows, and X10 [S_0, B, J] the other way round. A target removes at
    most one row of one of the windows, so its pairs are those of that row with the other window's rows."""
    xp, z = self.xp, self.z
    dt = z.dtype
    w0, w1 = self.sets.windows
    B, J = w0.start.shape

    def products(first, other):  # first's row 0 . other's rows: ([B, J] sum of squares, [S_other, B, J])
      z0 = rows(z, first.slot(0))

      def body(b, carry):
        tr, X = carry
        x = xp.sum(z0 * rows(z, other.slot(b)), axis=-1) * xp.astype(b < other.s_BxJ, dt)
        return tr + x * x, put(X, b, x, axis=0)
      return fori(other.trip, body, (xp.zeros((B, J), dtype=dt), xp.zeros((other.S, B, J), dtype=dt)), z)
    tr01, X01 = products(w0, w1)
    tr10, X10 = products(w1, w0)
    one0 = w0.s_BxJ <= 1  # the first window holds at most its row 0 (else the second holds one row)
    tr = xp.where(one0, tr01 * xp.astype(w0.s_BxJ > 0, dt), tr10 * xp.astype(w1.s_BxJ > 0, dt))
    return 2.0 * tr, (X01, X10)

  def _pair(self, a, b):
    """z_a . z_b for union rows b <= a, [B, J]: from the bands within a window, the cross products across."""
    xp = self.xp
    win = self.sets.windows

    def in_window(w, band_BxCxS, pos_b):
      o = min(a - b, w.S - 1) if isinstance(a, int) else xp.minimum(a - b, w.S - 1)
      return _entries(_index(band_BxCxS, o, axis=-1), pos_b)
    if len(win) == 1:
      return in_window(win[0], self.bands[0], win[0].pos(b))
    s0 = win[0].s_BxJ
    out = xp.zeros(s0.shape, dtype=self.z.dtype)
    if self.bands[0] is not None:  # both rows in the first window
      out = xp.where(a < s0, in_window(win[0], self.bands[0], win[0].pos(b)), out)
    if self.bands[1] is not None:  # both in the second
      out = xp.where(b >= s0, in_window(win[1], self.bands[1], win[1].pos(xp.maximum(b - s0, 0))), out)
    if self.cross is not None:  # b in the first, a in the second: the first's row 0 (b = 0), or the second's (a = s0)
      X01, X10 = self.cross
      i01 = xp.clip(a - s0, 0, win[1].S - 1)
      x01 = xp.take_along_axis(X01, i01[None], axis=0)[0]
      x10 = _index(X10, min(b, win[0].S - 1) if isinstance(b, int) else xp.minimum(b, win[0].S - 1), axis=0)
      out = xp.where((b < s0) & (a >= s0), xp.where(s0 <= 1, x01, x10), out)
    return out

  def _factor_and_h(self, vectors):
    """[w_x per vector]: w_x = F^-1 h_x with h_x = Z_S A^-1 x, where F F^T = K = C^-1 - beta' Z_S A^-1 Z_S^T (the
    identity's rows beyond each target's own rows), in one pass over the row pairs: row a of K is formed and at once
    turned into row a of its Cholesky factor F (each entry needs the finished rows above it), then w_x's entry a
    (forward substitution). So h_u^T K^-1 h_v = w_u . w_v, log det K = 2 sum log F_aa, and the work follows the
    block's rows (trip), never the S x S of the buffers beyond them. F's rows lie on its leading axis."""
    xp, sets, S, L = self.xp, self.sets, self.S, self.L
    dt = self.z.dtype
    B, J = self.alpha.shape
    sizes = [xp.astype(w.s, dt) for w in sets.windows]
    outside = xp.astype(~self.full_rank, dt) / self.alpha  # [B, J]: 1 / alpha' where the fit does not span

    def k_entry(a, b, c_a, which_a, real_a, va):
      """K[a, b] for b < a (0 where row a or b is beyond the target's own rows); c_a: row a's coefficients on the
      projections."""
      slot_b, which_b, real_b = sets.at(xp, b)
      if self.R is None:  # z_a . z_b from the bands: h = p_a (w - 1 / alpha') p_b + z_a . z_b / alpha'
        h = xp.sum(c_a * rows(self.P, slot_b), axis=-1) + outside * self._pair(a, b)
      else:
        vb = self._row_vector(slot_b)
        h = xp.sum(c_a * vb.p, axis=-1) + self._outside(va, vb)
      same = xp.astype(which_a == which_b, dt)
      size = sizes[0] if len(sizes) == 1 else xp.where(which_a == 0, sizes[0], sizes[1])
      k = -same / (L + size) - self.beta * h
      return xp.where(real_a & real_b, k, 0.0)

    def f_row(a, carry):
      F, ws, logdet = carry
      slot_a, which_a, real_a = sets.at(xp, a)
      va = self._row_vector(slot_a)
      pw_a = va.p * self.w
      c_a = pw_a - va.p * outside[..., None] if self.R is None else pw_a

      def inner(b, row):  # F[a, b] = (K[a, b] - F[a, :b] . F[b, :b]) / F[b, b]
        F_b = _index(F, b, axis=0)
        k = k_entry(a, b, c_a, which_a, real_a, va)
        return put(row, b, (k - xp.sum(row * F_b, axis=-1)) / _index(F_b, b, axis=-1), axis=-1)

      row = fori(a, inner, xp.zeros((B, J, S), dtype=dt), self.z)
      size = sizes[0] if len(sizes) == 1 else xp.where(which_a == 0, sizes[0], sizes[1])
      if self.R is None:  # h_aa = p_a (w - 1 / alpha') p_a + |z_a|^2 / alpha', |z_a|^2 from the bands
        h_aa = xp.sum(c_a * va.p, axis=-1) + outside * self._pair(a, a)
      else:
        h_aa = xp.sum(pw_a * va.p, axis=-1) + self._outside(va, va)
      k_aa = 1.0 - 1.0 / (L + size) - self.beta * h_aa
      d = xp.sqrt(xp.where(real_a, k_aa, 1.0) - xp.sum(row * row, axis=-1))
      row = put(row, a, d, axis=-1)
      on = xp.astype(real_a, dt)

      def h(x):  # h_x's entry a: z_a A^-1 x
        if self.R is None:
          return xp.sum(c_a * x.p, axis=-1) + outside * xp.sum(va.v * x.v, axis=-1)
        return xp.sum(pw_a * x.p, axis=-1) + self._outside(va, x)
      ws = tuple(put(w, a, (h(x) * on - xp.sum(row * w, axis=-1)) / d, axis=-1) for w, x in zip(ws, vectors))
      return put(F, a, row, axis=0), ws, logdet + 2.0 * xp.log(d)

    zeros = tuple(xp.zeros((B, J, S), dtype=dt) for _ in vectors)
    F = xp.zeros((S, B, J, S), dtype=dt) if self.scratch is None else self.scratch
    self.scratch, ws, self.logdet_K = fori(sets.trip, f_row, (F, zeros, xp.zeros((B, J), dtype=dt)), self.z)
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
      if self.R is None:  # u^T A^-1 v = p_u (w - 1 / alpha') p_v + u . v / alpha', 1 / alpha' where not spanned
        outside = xp.astype(~self.full_rank, self.z.dtype) / self.alpha
        base = xp.sum(u.p * (self.w - outside[..., None]) * v.p, axis=-1) + outside * xp.sum(u.v * v.v, axis=-1)
      else:
        base = xp.sum(u.p * self.w * v.p, axis=-1) + self._outside(u, v)
      out.append(base + self.beta * xp.sum(ws[iu] * ws[iv], axis=-1))  # h_u^T K^-1 h_v
    return out

  def logdet(self):
    """logdet S' per target, [B, J] (after `forms`, which factors K)."""
    return self.fit.logdet(self.alpha, self.beta, self.denom) + self.logdet_C + self.logdet_K
