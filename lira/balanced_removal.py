"""The scores of one class's targets, each fitted without its set of removed rows (balanced leave-one-out,
lira/balanced.py; the jax backend's padded programs, lira/balanced_padded.py).

Removing a set S of s rows (centred rows z_S, their sum g) from a class that keeps L rows moves its mean by -g / L
and its scatter to W' = W - Z_S^T C Z_S with C = I_s + 1 1^T / L. The diagonal estimators read diag(W') off it
(`removal_scores`' diagonal branch); OAS forms every score from the class's one eigendecomposition by Woodbury
(lira/woodbury.py, `woodbury.Removal`) over a small per-target basis: the removed rows, then the target, the gap
between the class means or an offline direction, as the variant needs. A shared fit removes both classes' sets from
the pooled scatter at once (C block-diagonal). The removed rows are cyclic windows of each class's sorted rows
(`Windows`): their sums, dot products and sum(C Z_S W Z_S^T) come from the class's rows (shifted adds, a band of its
Gram matrix) instead of each target's gathered rows.

Array API (numpy or jax.numpy, no in-place updates); L is a number, or a traced scalar in padded programs.
"""

import functools

import numpy as np
from array_api_compat import array_namespace

from lira import gaussian
from lira import gram
from lira import woodbury


def gather(rows_BxnxX, idx):
  """rows_BxnxX[b, idx[b, j, t]] -> [B, J, s, X]; idx is [B, J, s] (per canary)."""
  if isinstance(rows_BxnxX, np.ndarray):  # whole rows by flat index: numpy copies each row at once
    B, n, X = rows_BxnxX.shape
    return np.take(rows_BxnxX.reshape(B * n, X), np.asarray(idx) + n * np.arange(B)[:, None, None], axis=0)
  xp = array_namespace(rows_BxnxX)
  B = rows_BxnxX.shape[0]
  return rows_BxnxX[xp.arange(B)[:, None, None], idx]


def floor_variance(xp, valid_BxD, floor, all_valid):
  """var -> the floored variance; unscored positions (zero residuals) get variance 1 so they add nothing."""
  def floored(var):
    return xp.maximum(var, floor) if all_valid else xp.where(valid_BxD[:, None, :], xp.maximum(var, floor), 1.0)
  return floored


class Windows:
  """Each target's removed rows, as cyclic windows of the sorted rows (lira.balanced.sorted_balanced): of its own
  class (rows own_at.. own_at + n_own), the target j and the next s_own - 1; of the other class (oth_at.. oth_at +
  n_oth), s_oth from first_BxJ[b, j] (a position in that class) on."""

  def __init__(self, own_at, n_own, s_own, oth_at, n_oth, s_oth, first_BxJ):
    self.own = (own_at, n_own, s_own)
    self.oth = (oth_at, n_oth, s_oth)
    self.first_BxJ = first_BxJ
    self.sizes = (s_own, s_oth)

  def idx(self):
    """Positions in the sorted rows, [B, J, s_own + s_oth] (own rows first)."""
    xp = array_namespace(self.first_BxJ)
    (own_at, n_own, s_own), (oth_at, n_oth, s_oth) = self.own, self.oth
    own_idx = own_at + (np.arange(n_own)[:, None] + np.arange(s_own)[None]) % n_own
    oth_idx = oth_at + (self.first_BxJ[..., None] + xp.asarray(np.arange(s_oth, dtype=np.int32))) % n_oth
    return xp.concat([xp.broadcast_to(xp.asarray(own_idx, dtype=oth_idx.dtype), oth_idx.shape[:2] + (s_own,)),
                      oth_idx], axis=2)

  def sums(self, z_BxNxD, own):
    """(g, sum of squares) of the own (own=True) or the other class's window rows, [B, J, D] each (None, None when
    the window is empty)."""
    xp = array_namespace(z_BxNxD)
    s = (self.own if own else self.oth)[2]
    if not s:
      return None, None
    if not _shifted(s, z_BxNxD):  # the few rows (or narrow rows) gathered once
      Z = gather(z_BxNxD, self.idx()[:, :, :s] if own else self.idx()[:, :, self.sizes[0]:])
      return _row_sum(Z), (Z[:, :, 0] ** 2 if s == 1 else xp.sum(Z * Z, axis=2))
    return self.row_sums(z_BxNxD, own), self.row_sums(z_BxNxD * z_BxNxD, own)

  def row_sums(self, x_BxNxX, own):
    """The sum of each target's window rows of x (own or the other class's), [B, J, X], or None when the window is
    empty: shifted adds over the class's rows (`_shifted`), else a sum of the J x s rows gathered."""
    at, n, s = self.own if own else self.oth
    if not s:
      return None
    if not _shifted(s, x_BxNxX):
      return _row_sum(gather(x_BxNxX, self.idx()[:, :, :s] if own else self.idx()[:, :, self.sizes[0]:]))
    x = x_BxNxX[:, at:at + n]
    if own:  # windows start at j = 0.. J - 1
      return _window_sums(x, s, n)
    # the windows from every start 0.. n, then each target's (whole rows, `gather`)
    return gather(_window_sums(x, s, n + 1), self.first_BxJ[..., None])[:, :, 0]

  def gram(self, z_BxNxD, own):
    """Z_S Z_S^T of the own (own=True) or the other class's window, [B, J, s, s]: each entry a dot product from the
    class's band z_i . z_(i+o) (o < s, cyclic), s x n dot products per canary where a product per target takes
    J x s^2."""
    xp = array_namespace(z_BxNxD)
    at, n, s = self.own if own else self.oth
    B, J = self.first_BxJ.shape
    if s < woodbury.MATMUL_ROWS:
      Z = gather(z_BxNxD, self.idx()[:, :, :s] if own else self.idx()[:, :, self.sizes[0]:])
      return woodbury.pairs(Z, Z)
    z = z_BxNxD[:, at:at + n]
    ext = xp.concat([z, z[:, :s - 1]], axis=1)
    band = xp.stack([gram._dot_last(z, ext[:, o:o + n]) for o in range(s)], axis=-1)  # [B, n, s]
    band = xp.reshape(xp.concat([band, band[:, :s]], axis=1), (B, (n + s) * s))  # rows n.. n + s: rows 0.. s again
    a = np.arange(s)
    entry = np.minimum(a[:, None], a[None]) * s + np.abs(a[:, None] - a[None])  # [s, s]: (row offset, diagonal)
    if own:  # windows start at j: the same entries for every canary
      flat = (np.arange(J)[:, None, None] * s + entry).reshape(-1)
      return xp.reshape(xp.take(band, xp.asarray(flat, dtype=xp.int32), axis=1), (B, J, s, s))
    flat = xp.reshape(xp.astype(self.first_BxJ, xp.int32)[..., None, None] * s + xp.asarray(entry, dtype=xp.int32),
                      (B, J * s * s))
    return xp.reshape(xp.take_along_axis(band, flat, axis=1), (B, J, s, s))


def _shifted(s, x_BxNxX):
  """Whether window sums of s rows of x take s shifted adds over the class's rows (each a pass over n rows) rather
  than a gather of every target's s rows: from 3 rows of 8 entries or more (narrower rows: per-call overhead)."""
  return s >= woodbury.MATMUL_ROWS and x_BxNxX.shape[-1] >= 8


def _window_sums(rows_BxnxD, s, count):
  """sum_{o < s} rows[(p + o) % n] for the first `count` starts p (count <= n + 1), [B, count, D]: s shifted adds."""
  xp = array_namespace(rows_BxnxD)
  ext = xp.concat([rows_BxnxD, rows_BxnxD[:, :s]], axis=1)
  out = ext[:, :count]
  for o in range(1, s):
    out = out + ext[:, o:o + count]
  return out


def oas_fits(z_BxNxD, n_in, delta_BxD, valid_BxD, shared):
  """The OAS fits of centred rows whose first n_in are the IN class (rows of zeros add nothing to a fit):
  (fits, P_BxNxR, R_BxNxD, proj_delta) with fits {None: pooled} (shared) or {True: IN, False: OUT}, each row's
  projection on its fit's eigenbasis, its residual outside the span (None unless the fits need residuals) and the
  gap's projection per fit ([B, 1, R])."""
  xp = array_namespace(z_BxNxD)
  p_B = xp.sum(xp.astype(valid_BxD, z_BxNxD.dtype), axis=1)
  if shared:
    pooled = gram.Fit(z_BxNxD, p_B)
    P_BxNxR = pooled.project(z_BxNxD)
    R_BxNxD = pooled.residual(z_BxNxD, P_BxNxR) if pooled.needs_residuals else None
    return {None: pooled}, P_BxNxR, R_BxNxD, {None: pooled.project(delta_BxD[:, None, :])}
  # each row projected on its own class's eigenbasis (one batched eigh for both: Fit.pair)
  z_in, z_out = z_BxNxD[:, :n_in], z_BxNxD[:, n_in:]
  fits = dict(zip((True, False), gram.Fit.pair(z_in, z_out, p_B)))
  P_BxNxR = xp.concat([fits[True].project(z_in), fits[False].project(z_out)], axis=1)
  # each row's residual outside its class's span (woodbury.Removal.basis), once per block
  R_BxNxD = None if not (fits[True].needs_residuals or fits[False].needs_residuals) else xp.concat(
      [fits[True].residual(z_in, P_BxNxR[:, :n_in]), fits[False].residual(z_out, P_BxNxR[:, n_in:])], axis=1)
  return fits, P_BxNxR, R_BxNxD, {c: fits[c].project(delta_BxD[:, None, :]) for c in (True, False)}


def removal_scores(z_BxNxD, delta_BxD, diag_w, fitted, target_in, windows, L, valid_BxD, floored, *, oas, shared,
                   offline, floor, offline_shift, sums=None):
  """Scores [B, J] of the J targets of one class, each fitted without its removed rows (`Windows` of z_BxNxD's
  rows: s_own of its own class, the target first, then s_oth of the other), both classes left with L rows (a
  number). fitted: `oas_fits` (OAS). sums: a dict shared by variants scored on the same rows, keeping the windows'
  sums by target class (the class-wise and the shared diagonal fits remove the same rows)."""
  xp = array_namespace(z_BxNxD)
  dt = z_BxNxD.dtype
  s_own, s_oth = windows.sizes
  idx_BxJxS = windows.idx()
  own_at, n_own, _ = windows.own
  z_t = z_BxNxD[:, own_at:own_at + n_own]  # the targets' own rows, [B, J, D]
  # The removed rows themselves where a target removes fewer than 3 (LiRA's half/half split: one from each class;
  # every sum and dot product from them) or OAS works outside the fits' span; else the windows' sums, dot products
  # and projections take their place.
  few = s_own + s_oth < woodbury.MATMUL_ROWS
  cached = (not oas or offline) and sums is not None and target_in in sums  # the windows' sums, made by a variant
  Z = gather(z_BxNxD, idx_BxJxS) if (few and (oas or not cached)) or (oas and not _spanned(fitted[0])) else None
  Z_own, Z_oth = (None, None) if Z is None else (Z[:, :, :s_own], Z[:, :, s_own:])
  if cached:
    (g_own, sq_own), (g_oth, sq_oth) = sums[target_in]
  elif not oas or offline:  # the windows' sums: the diagonal estimators' downdates, offline std's diag(W')
    (g_own, sq_own), (g_oth, sq_oth) = ((_row_sum(X), _row_sum(X * X) if X.shape[2] > 1 else None)
                                        for X in (Z_own, Z_oth)) if few else \
        (windows.sums(z_BxNxD, True), windows.sums(z_BxNxD, False))
    if sums is not None:
      sums[target_in] = ((g_own, sq_own), (g_oth, sq_oth))

  def window_gram(own):  # G_S of the own or the other class's window
    X = Z_own if own else Z_oth
    return woodbury.pairs(X, X) if few else windows.gram(z_BxNxD, own)
  # Residuals of the target to each class mean after the removal: (x - mean) + g / L.
  if not oas:
    c = (L + 1.0) / L
    r_oth = z_t + (1.0 if target_in else -1.0) * delta_BxD[:, None, :]
    r_oth = r_oth if s_oth == 0 else r_oth + g_oth / L
    if s_own == 1:  # the target alone: r_own = c z_t, and it removes c z_t^2 from diag(W)
      zt2 = z_t * z_t
      removed_own, rr_own = zt2 * c, zt2 * (c * c)
    else:
      r_own = z_t + g_own / L
      removed_own, rr_own = _removed_diag(sq_own, g_own, L), r_own * r_own
    removed_oth = _removed_diag(sq_oth, g_oth, L)
    if offline:  # the OUT fit: the own one for OUT targets, the other one for IN targets
      r, scat = (r_oth, diag_w[False][:, None] - removed_oth) if target_in else \
          (z_t * c if s_own == 1 else r_own, diag_w[False][:, None] - removed_own)
      return gaussian.offline_z(r, floored(scat / L), valid_BxD, 1.0, offline_shift, model_axis=1)
    rr_oth = r_oth * r_oth
    if shared:  # unscored positions: zero residuals, so the floor there adds nothing
      inv_var = (2.0 * L) / xp.maximum((diag_w[True] + diag_w[False])[:, None] - (removed_own + removed_oth),
                                       2.0 * L * floor)
      q_own = xp.sum(rr_own * inv_var, axis=2)
      q_oth = xp.sum(rr_oth * inv_var, axis=2)  # the same covariance for both classes: logdets cancel
    else:
      var_own = floored((diag_w[target_in][:, None] - removed_own) / L)
      var_oth = floored((diag_w[not target_in][:, None] - removed_oth) / L)
      q_own = xp.sum(rr_own / var_own + xp.log(var_own), axis=2)
      q_oth = xp.sum(rr_oth / var_oth + xp.log(var_oth), axis=2)
  else:
    fits, P_BxNxR, R_BxNxD, proj_delta = fitted
    P = gather(P_BxNxR, idx_BxJxS)
    Rr = None if R_BxNxD is None else gather(R_BxNxD, idx_BxJxS)
    P_own, P_oth = P[:, :, :s_own], P[:, :, s_own:]
    R_own, R_oth = (None, None) if Rr is None else (Rr[:, :, :s_own], Rr[:, :, s_own:])
    # sum(C * Z_S W Z_S^T) from the windows' sums, where a removal has 3 rows or more
    zwz = _windows_zwz(fits, P_BxNxR, windows, target_in, L) \
        if max(s_own, s_oth, s_own + s_oth if shared else 0) >= woodbury.MATMUL_ROWS else None
    coef = functools.partial(coefficients, xp, dt, L)
    c_own = coef((1, 1.0, 1.0), (s_own - 1, 0.0, 1.0))  # r_own over the own removed rows (target first)
    delta_b = delta_BxD[:, None, :]  # [B, 1, D]: the gap between the class means, the same for every target
    if offline:  # the OUT fit; basis: its removed rows, [the target, the gap,] the offline direction
      fit = fits[False]
      if target_in:
        Zs, Ps, Rs, sums, s = Z_oth, P_oth, R_oth, (sq_oth, g_oth), s_oth
        extra = [(z_t, fit.project(z_t)), (delta_b, proj_delta[False])]
        r = coef((s_oth, 0.0, 1.0), (2, 1.0, 0.0), (1, 0.0, 0.0))
      else:
        Zs, Ps, Rs, sums, s = Z_own, P_own, R_own, (sq_own, g_own), s_own
        extra, r = [], coef((1, 1.0, 1.0), (s_own - 1, 0.0, 1.0), (1, 0.0, 0.0))
      G_S = window_gram(not target_in)
      rem = _removal(fit, Ps, G_S, (s,), L, L, floor, None if zwz is None else zwz[not target_in])
      u = _offline_direction(rem, diag_w[False], sums, L, valid_BxD, offline_shift)
      rem.basis(_parts([(Zs, Ps, Rs)] + extra + [u]))
      e_u = coef((r.shape[0] - 1, 0.0, 0.0), (1, 1.0, 0.0))
      num, den = rem.forms([(e_u, r), (e_u, e_u)])
      return num / xp.sqrt(den)
    sgn = 1.0 if target_in else -1.0
    if shared:  # basis: own removed rows, other removed rows, the gap between the class means
      G_S = woodbury.pairs(Z, Z) if few else \
          _shared_gram(z_BxNxD, windows, (P_own, P_oth) if Z is None else (Z_own, Z_oth))
      rem = _removal(fits[None], P, G_S, (s_own, s_oth), L, 2.0 * L, floor,
                     None if zwz is None else zwz[True] + zwz[False])
      rem.basis(_parts([(Z, P, Rr), (delta_b, proj_delta[None])]))
      a_own = coef((1, 1.0, 1.0), (s_own - 1, 0.0, 1.0), (s_oth + 1, 0.0, 0.0))
      a_oth = coef((1, 1.0, 0.0), (s_own - 1, 0.0, 0.0), (s_oth, 0.0, 1.0), (1, sgn, 0.0))
      q_own, q_oth = rem.forms([(a_own, a_own), (a_oth, a_oth)])  # logdets cancel
    else:  # own fit: basis its removed rows; other fit: its removed rows, the target, the gap
      G_own, G_oth = window_gram(True), window_gram(False)
      own = _removal(fits[target_in], P_own, G_own, (s_own,), L, L, floor, None if zwz is None else zwz[True])
      own.basis([(Z_own, P_own, R_own)])
      fit = fits[not target_in]
      oth = _removal(fit, P_oth, G_oth, (s_oth,), L, L, floor, None if zwz is None else zwz[False])
      oth.basis(_parts([(Z_oth, P_oth, R_oth), (z_t, fit.project(z_t)), (delta_b, proj_delta[not target_in])]))
      a_oth = coef((s_oth, 0.0, 1.0), (1, 1.0, 0.0), (1, sgn, 0.0))
      q_own = own.form(c_own, c_own) + own.logdet()
      q_oth = oth.form(a_oth, a_oth) + oth.logdet()
  own_minus_oth = -0.5 * (q_own - q_oth)
  return own_minus_oth if target_in else -own_minus_oth


def _spanned(fits):
  """Whether every fit spans all scored positions (numpy; n >= D, the usual case at large M): vectors then enter
  woodbury.Removal only through their projections."""
  return all(isinstance(f.rank_B, np.ndarray) and bool(np.all(f.rank_B >= f.p_B)) for f in fits.values())


def _shared_gram(z_BxNxD, windows, rows):
  """G_S of both windows, [B, J, S, S]; rows: (own, other) removed rows or, in the fit's span, their projections
  (the same dot products) for the cross block, which one of the two sides keeps small (balanced counts remove the
  target alone from its class, or nothing from the other)."""
  xp = array_namespace(z_BxNxD)
  s_own, s_oth = windows.sizes
  if not s_oth:
    return windows.gram(z_BxNxD, own=True)
  X = woodbury.pairs(*rows)  # [B, J, s_own, s_oth]
  return xp.concat([xp.concat([windows.gram(z_BxNxD, own=True), X], axis=-1),
                    xp.concat([gram._swap(X), windows.gram(z_BxNxD, own=False)], axis=-1)], axis=-2)


def _row_sum(Z_BxJxSxD):
  """g = the sum of each target's removed rows, [B, J, D] (None when none are removed)."""
  s = Z_BxJxSxD.shape[2]
  if s == 0:
    return None
  return Z_BxJxSxD[:, :, 0] if s == 1 else array_namespace(Z_BxJxSxD).sum(Z_BxJxSxD, axis=2)


def _removed_diag(sq_BxJxD, g_BxJxD, L):
  """diag(Z_S^T C Z_S) = sum of squared removed rows + g^2 / L: what the removal takes off diag(W), [B, J, D] (0
  when nothing is removed; sq None: one row, whose square is g^2)."""
  if g_BxJxD is None:
    return 0.0
  if sq_BxJxD is None:
    return g_BxJxD * g_BxJxD * ((L + 1.0) / L)
  return sq_BxJxD + g_BxJxD * g_BxJxD / L


def coefficients(xp, dt, L, *runs):
  """A coefficient vector over a basis U (a residual as a combination of the basis vectors), as an array: runs of
  (count, a, b), each `count` entries a + b / L (L a number, or a traced scalar in padded programs)."""
  a = np.concatenate([np.full(n, v) for n, v, _ in runs]) if runs else np.zeros(0)
  b = np.concatenate([np.full(n, v) for n, _, v in runs]) if runs else np.zeros(0)
  if isinstance(L, (int, float)):
    return xp.asarray(a + b / L, dtype=dt)
  return xp.asarray(a, dtype=dt) + xp.asarray(b, dtype=dt) / L


def _windows_zwz(fits, P_BxNxR, windows, target_in, L):
  """{own: sum(C_b * Z_b W Z_b^T)} of the own class's window (own=True) and the other class's, each on its fit (the
  pooled one, or its class's), [B, J] (0.0 for an empty window): sum_i z_i^T W z_i + g^T W g / L in the fit's
  eigenbasis, from window sums of the rows' z^T W z and projections (no pass over each target's gathered rows)."""
  out = {}
  for own in (True, False):
    g = windows.row_sums(P_BxNxR, own)
    if g is None:
      out[own] = 0.0
      continue
    lam = (fits[None] if None in fits else fits[target_in if own else not target_in]).lam[:, None, :]
    zwz_BxN = gram._dot_last(P_BxNxR * P_BxNxR, lam)  # each row's z^T W z on this window's fit
    out[own] = windows.row_sums(zwz_BxN[..., None], own)[..., 0] + gram._dot_last(g * g, lam) / L
  return out


def _removal(fit, P_S, G_S, sizes, L, n_after, floor, c_zwz=None):
  """woodbury.Removal of blocks of `sizes` rows from classes left with L rows each (L a number, or a traced scalar:
  C = I + blocks of 1 / L); with more than two rows on jax's CPU backend, C's closed-form inverse for its Cholesky
  solve (woodbury.lapack_deadlocks). c_zwz: sum(C * Z_S W Z_S^T) [B, J] (`_windows_zwz`), or None."""
  xp, dt = fit.xp, fit.lam.dtype
  if isinstance(L, (int, float)):
    C = woodbury.removal_matrix(sizes, L)
  else:
    ones = woodbury.removal_matrix(sizes, 1.0) - np.eye(sum(sizes))
    C = xp.asarray(np.eye(sum(sizes)), dtype=dt) + xp.asarray(ones, dtype=dt) / L
  solve_by_cholesky = sum(sizes) > 2 and woodbury.lapack_deadlocks(P_S)
  inverse = woodbury.removal_inverse(xp, dt, sizes, L) if solve_by_cholesky else None
  return woodbury.Removal(fit, P_S, G_S, C, n_after, floor, inverse=inverse, blocks=(sizes, L, c_zwz))


def _as_rows(a):
  """[B, J|1, X] -> [B, J|1, 1, X]; [B, J, q, X] and None unchanged."""
  return a[:, :, None, :] if a is not None and a.ndim == 3 else a


def _parts(parts):
  """Basis parts with every array as [B, J|1, q, X] ([B, J|1, X] is one vector per target)."""
  return [tuple(_as_rows(a) for a in part) for part in parts]


def _offline_direction(rem, diag_w_BxD, sums, L, valid_BxD, shift):
  """(u, its projection) of the offline test: u = 1 on the scored positions, or sqrt(diag S') per target (std)."""
  xp = rem.xp
  valid = xp.astype(valid_BxD, diag_w_BxD.dtype)[:, None, :]
  if shift == "uniform":
    return valid, rem.fit.project(valid)
  diag = diag_w_BxD[:, None] - _removed_diag(*sums, L)  # diag(W') [B, J, D]
  u = xp.sqrt(rem.alpha[..., None] + rem.beta[..., None] * xp.maximum(diag, 0.0)) * valid
  return u, rem.fit.project(u)
