"""The scores of one class's targets, each fitted without its set of removed rows (balanced leave-one-out,
lira/balanced.py; the jax backend's padded programs, lira/balanced_padded.py).

Removing a set S of s rows (centred rows z_S, their sum g) from a class that keeps L rows moves its mean by -g / L
and its scatter to W' = W - Z_S^T C Z_S with C = I_s + 1 1^T / L. The diagonal estimators read diag(W') off it
(`removal_scores`' diagonal branch); OAS forms every score from the class's one eigendecomposition by Woodbury
(lira/woodbury.py, `woodbury.Removal`) over a small per-target basis: the removed rows, then the target, the gap
between the class means or an offline direction, as the variant needs. A shared fit removes both classes' sets from
the pooled scatter at once (C block-diagonal).

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


def removal_scores(z_BxNxD, delta_BxD, diag_w, fitted, target_in, idx_BxJxS, sizes, L, row_mask_S, valid_BxD,
                   floored, *, oas, shared, offline, floor, offline_shift):
  """Scores [B, J] of the J targets of one class, each fitted without its removed rows idx_BxJxS (positions in
  z_BxNxD: s_own of its own class, the target first, then s_oth of the other; sizes = (s_own, s_oth)), both classes
  left with L rows. fitted: `oas_fits` (OAS). row_mask_S: None, or [S] with 0 for removal slots beyond a count's own
  (padded programs, lira/balanced_padded.py: those rows are zeroed, so their coefficients add nothing); L may then
  be a traced scalar."""
  xp = array_namespace(z_BxNxD)
  dt = z_BxNxD.dtype
  s_own, s_oth = sizes
  Z = gather(z_BxNxD, idx_BxJxS)  # [B, J, S, D]
  if row_mask_S is not None:
    Z = Z * row_mask_S[:, None]
  Z_own, Z_oth = Z[:, :, :s_own], Z[:, :, s_own:]
  z_t = Z_own[:, :, 0]
  # Residuals of the target to each class mean after the removal: (x - mean) + g / L.
  if not oas:
    c = (L + 1.0) / L
    g_own, g_oth = _row_sum(Z_own), _row_sum(Z_oth)
    r_oth = z_t + (1.0 if target_in else -1.0) * delta_BxD[:, None, :]
    r_oth = r_oth if s_oth == 0 else r_oth + g_oth / L
    if s_own == 1:  # the target alone: r_own = c z_t, and it removes c z_t^2 from diag(W)
      zt2 = z_t * z_t
      removed_own, rr_own = zt2 * c, zt2 * (c * c)
    else:
      r_own = z_t + g_own / L
      removed_own, rr_own = _removed_diag(Z_own, g_own, L), r_own * r_own
    removed_oth = _removed_diag(Z_oth, g_oth, L)
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
    if row_mask_S is not None:
      P = P * row_mask_S[:, None]
      Rr = None if Rr is None else Rr * row_mask_S[:, None]
    P_own, P_oth = P[:, :, :s_own], P[:, :, s_own:]
    R_own, R_oth = (None, None) if Rr is None else (Rr[:, :, :s_own], Rr[:, :, s_own:])
    coef = functools.partial(coefficients, xp, dt, L)
    c_own = coef((1, 1.0, 1.0), (s_own - 1, 0.0, 1.0))  # r_own over the own removed rows (target first)
    delta_b = delta_BxD[:, None, :]  # [B, 1, D]: the gap between the class means, the same for every target
    if offline:  # the OUT fit; basis: its removed rows, [the target, the gap,] the offline direction
      fit = fits[False]
      if target_in:
        Zs, Ps, Rs, s = Z_oth, P_oth, R_oth, s_oth
        extra = [(z_t, fit.project(z_t)), (delta_b, proj_delta[False])]
        r = coef((s_oth, 0.0, 1.0), (2, 1.0, 0.0), (1, 0.0, 0.0))
      else:
        Zs, Ps, Rs, s, extra, r = Z_own, P_own, R_own, s_own, [], coef((1, 1.0, 1.0), (s_own - 1, 0.0, 1.0),
                                                                        (1, 0.0, 0.0))
      G_S = woodbury.pairs(Zs, Zs)
      rem = _removal(fit, Ps, G_S, (s,), L, L, floor)
      u = _offline_direction(rem, diag_w[False], Zs, L, valid_BxD, offline_shift)
      rem.basis(_parts([(Zs, Ps, Rs)] + extra + [u]))
      e_u = coef((r.shape[0] - 1, 0.0, 0.0), (1, 1.0, 0.0))
      return rem.form(e_u, r) / xp.sqrt(rem.form(e_u, e_u))
    sgn = 1.0 if target_in else -1.0
    if shared:  # basis: own removed rows, other removed rows, the gap between the class means
      G_S = woodbury.pairs(Z, Z)
      rem = _removal(fits[None], P, G_S, (s_own, s_oth), L, 2.0 * L, floor)
      rem.basis(_parts([(Z, P, Rr), (delta_b, proj_delta[None])]))
      a_own = coef((1, 1.0, 1.0), (s_own - 1, 0.0, 1.0), (s_oth + 1, 0.0, 0.0))
      a_oth = coef((1, 1.0, 0.0), (s_own - 1, 0.0, 0.0), (s_oth, 0.0, 1.0), (1, sgn, 0.0))
      q_own, q_oth = rem.form(a_own, a_own), rem.form(a_oth, a_oth)  # logdets cancel
    else:  # own fit: basis its removed rows; other fit: its removed rows, the target, the gap
      G_own, G_oth = woodbury.pairs(Z_own, Z_own), woodbury.pairs(Z_oth, Z_oth)
      own = _removal(fits[target_in], P_own, G_own, (s_own,), L, L, floor)
      own.basis([(Z_own, P_own, R_own)])
      fit = fits[not target_in]
      oth = _removal(fit, P_oth, G_oth, (s_oth,), L, L, floor)
      oth.basis(_parts([(Z_oth, P_oth, R_oth), (z_t, fit.project(z_t)), (delta_b, proj_delta[not target_in])]))
      a_oth = coef((s_oth, 0.0, 1.0), (1, 1.0, 0.0), (1, sgn, 0.0))
      q_own = own.form(c_own, c_own) + own.logdet()
      q_oth = oth.form(a_oth, a_oth) + oth.logdet()
  own_minus_oth = -0.5 * (q_own - q_oth)
  return own_minus_oth if target_in else -own_minus_oth


def _row_sum(Z_BxJxSxD):
  """g = the sum of each target's removed rows, [B, J, D] (None when none are removed)."""
  s = Z_BxJxSxD.shape[2]
  if s == 0:
    return None
  return Z_BxJxSxD[:, :, 0] if s == 1 else array_namespace(Z_BxJxSxD).sum(Z_BxJxSxD, axis=2)


def _removed_diag(Z_BxJxSxD, g_BxJxD, L):
  """diag(Z_S^T C Z_S) = sum of squared removed rows + g^2 / L: what the removal takes off diag(W), [B, J, D]."""
  s = Z_BxJxSxD.shape[2]
  if s == 0:
    return 0.0
  if s == 1:
    return g_BxJxD * g_BxJxD * ((L + 1.0) / L)
  return array_namespace(Z_BxJxSxD).sum(Z_BxJxSxD * Z_BxJxSxD, axis=2) + g_BxJxD * g_BxJxD / L


def coefficients(xp, dt, L, *runs):
  """A coefficient vector over a basis U (a residual as a combination of the basis vectors), as an array: runs of
  (count, a, b), each `count` entries a + b / L (L a number, or a traced scalar in padded programs)."""
  a = np.concatenate([np.full(n, v) for n, v, _ in runs]) if runs else np.zeros(0)
  b = np.concatenate([np.full(n, v) for n, _, v in runs]) if runs else np.zeros(0)
  if isinstance(L, (int, float)):
    return xp.asarray(a + b / L, dtype=dt)
  return xp.asarray(a, dtype=dt) + xp.asarray(b, dtype=dt) / L


def _removal(fit, P_S, G_S, sizes, L, n_after, floor):
  """woodbury.Removal of blocks of `sizes` rows from classes left with L rows each (L a number, or a traced scalar:
  C = I + blocks of 1 / L); with more than two rows on jax's CPU backend, C's closed-form inverse for its Cholesky
  solve (woodbury.lapack_deadlocks)."""
  xp, dt = fit.xp, fit.lam.dtype
  if isinstance(L, (int, float)):
    C = woodbury.removal_matrix(sizes, L)
  else:
    ones = woodbury.removal_matrix(sizes, 1.0) - np.eye(sum(sizes))
    C = xp.asarray(np.eye(sum(sizes)), dtype=dt) + xp.asarray(ones, dtype=dt) / L
  solve_by_cholesky = sum(sizes) > 2 and woodbury.lapack_deadlocks(P_S)
  inverse = woodbury.removal_inverse(xp, dt, sizes, L) if solve_by_cholesky else None
  return woodbury.Removal(fit, P_S, G_S, C, n_after, floor, inverse=inverse, blocks=(sizes, L))


def _as_rows(a):
  """[B, J|1, X] -> [B, J|1, 1, X]; [B, J, q, X] and None unchanged."""
  return a[:, :, None, :] if a is not None and a.ndim == 3 else a


def _parts(parts):
  """Basis parts with every array as [B, J|1, q, X] ([B, J|1, X] is one vector per target)."""
  return [tuple(_as_rows(a) for a in part) for part in parts]


def _offline_direction(rem, diag_w_BxD, Z_S, L, valid_BxD, shift):
  """(u, its projection) of the offline test: u = 1 on the scored positions, or sqrt(diag S') per target (std)."""
  xp = rem.xp
  valid = xp.astype(valid_BxD, diag_w_BxD.dtype)[:, None, :]
  if shift == "uniform":
    return valid, rem.fit.project(valid)
  diag = diag_w_BxD[:, None] - _removed_diag(Z_S, _row_sum(Z_S), L)  # diag(W') [B, J, D]
  u = xp.sqrt(rem.alpha[..., None] + rem.beta[..., None] * xp.maximum(diag, 0.0)) * valid
  return u, rem.fit.project(u)
