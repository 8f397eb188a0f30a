"""Balanced leave-one-out in closed form: both classes fitted on the same number of shadow models (docs/conventions.md).

Plain leave-one-out fits the target's own class on one model fewer than the other, which biases scores towards
"non-member" when models are few. Here, for target m on a canary with n_own models in m's class (m included) and
n_oth in the other, each class keeps L = min(n_own - 1, n_oth) models: m itself is removed, and the class with more
models left drops the ones that follow m in cyclic model order (m + 1, m + 2, ... mod M), so the choice is
reproducible, needs no seed, and spreads the dropped models evenly. With LiRA's balanced keep matrix (every canary
IN for M/2 models) each class loses exactly one row: m from its own class, the first model of the other class after
m from the other.

Nothing is refitted. Removing a set S of s rows (centred rows z_S, their sum g) from a class of n rows moves its
mean by -g / (n - s) and its scatter to
  W' = W - Z_S^T C Z_S,   C = I_s + 1 1^T / (n - s),
a rank-s downdate (s = 1: the plain leave-one-out's W - n/(n-1) z z^T). The diagonal estimators read diag(W') off
it directly. OAS needs trace(W') and ||W'||_F^2 (from Z_S Z_S^T and Z_S W Z_S^T, both s x s), then solves with
alpha' I + beta' W' by Woodbury on the class's one eigendecomposition (lira/gram.py):
  u^T S'^-1 v = u^T A^-1 v + beta' a_u^T E^-1 C a_v,   logdet S' = logdet A + logdet E,
with A = alpha' I + beta' W, a_u = Z_S A^-1 u and E = I - beta' C Z_S A^-1 Z_S^T. A shared fit removes both classes'
sets from the pooled scatter at once (C block-diagonal). Canaries whose counts are unequal (a keep matrix of one's
own) drop more rows from the larger class: the same formulas with a larger s.

`sorted_balanced` is written against the Python array API (numpy or jax.numpy, no in-place updates): the numpy
backend runs it here (`balanced_llr`), the jax backend jits this one copy (lira/loo_jax.py).
"""

import numpy as np
from array_api_compat import array_namespace

from lira import gaussian
from lira import gram


def removal_counts(k, M):
  """(s_own, s_oth, L) for IN targets and for OUT targets of canaries with k IN models of M."""
  counts = []
  for n_own, n_oth in ((k, M - k), (M - k, k)):
    L = min(n_own - 1, n_oth)
    counts.append((n_own - L, n_oth - L, L))
  return tuple(counts)


def first_after(order_BxM, k):
  """For canaries sorted IN-first (each class in ascending model id, lira.gram.sorted_groups): per target, the
  position in the OTHER class of the first of its models after the target in cyclic order, [B, M] int32.

  The i-th model of its class with id m has m - i models of the other class below it, so that many come before it.
  """
  M = order_BxM.shape[1]
  pos_M = np.concatenate([np.arange(k), np.arange(M - k)])
  return (order_BxM - pos_M[None]).astype(np.int32)


def _swap(a):
  return gram._swap(a)


def _gather(rows_BxnxX, idx):
  """rows_BxnxX[b, idx[b, j, t]] -> [B, J, s, X]; idx is [B, J, s] (per canary)."""
  xp = array_namespace(rows_BxnxX)
  B = rows_BxnxX.shape[0]
  return rows_BxnxX[xp.arange(B)[:, None, None], idx]


def _small_solve(E, b):
  """E^-1 b for batches of s x s systems E [..., s, s], b [..., s] (s = 1, 2 written out; they are the usual ones)."""
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


def _small_logdet(E):
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


def _pairs(a_BxJxSxX, b_BxJxSxX):
  """sum_x a[..., i, x] b[..., j, x]: [B, J, S, S] (vecdot over broadcast pairs; batched matmul of 1 x 1 or 2 x 2
  blocks is numpy's slowest case)."""
  return gram._dot_last(a_BxJxSxX[..., :, None, :], b_BxJxSxX[..., None, :, :])


def _mm(a_SxS, b_BxJxSxS):
  """a @ b for small S (broadcast sum; see _pairs)."""
  xp = array_namespace(b_BxJxSxS)
  return xp.sum(a_SxS[..., :, :, None] * b_BxJxSxS[..., None, :, :], axis=-2)


class _Downdated:
  """An OAS fit (lira.gram.Fit) with, per target, a set of rows removed: S' = alpha' I + beta' (W - Z_S^T C Z_S)."""

  def __init__(self, fit, Z_BxJxSxD, P_BxJxSxR, C_SxS, n_after, floor):
    xp = self.xp = fit.xp
    self.fit, self.Z, self.P, self.C = fit, Z_BxJxSxD, P_BxJxSxR, C_SxS
    G = _pairs(Z_BxJxSxD, Z_BxJxSxD)
    ZWZ = _pairs(P_BxJxSxR * fit.lam[:, None, None, :], P_BxJxSxR)
    CG = _mm(C_SxS, G)
    trace = fit.trace_B[:, None] - xp.sum(C_SxS * G, axis=(-2, -1))
    fro2 = fit.fro2_B[:, None] - 2.0 * xp.sum(C_SxS * ZWZ, axis=(-2, -1)) + xp.sum(CG * _swap(CG), axis=(-2, -1))
    self.alpha, self.beta = fit.params(n_after, trace, fro2, floor)  # [B, J]
    self.denom = fit.denominator(self.alpha, self.beta)
    self.w = fit.weights(self.denom)  # [B, J, R]
    self.full_rank = (fit.rank_B >= fit.p_B)[:, None]
    self.Pw = P_BxJxSxR * self.w[:, :, None, :]
    resid = xp.where(self.full_rank[..., None, None], 0.0, G - _pairs(P_BxJxSxR, P_BxJxSxR))
    K = _pairs(self.Pw, P_BxJxSxR) + resid / self.alpha[..., None, None]  # Z_S A^-1 Z_S^T, [B, J, S, S]
    S = C_SxS.shape[0]
    self.E = xp.eye(S, dtype=G.dtype) - self.beta[..., None, None] * _mm(C_SxS, K)

  def logdet(self):
    """logdet S' per target, [B, J]."""
    return self.fit.logdet(self.alpha, self.beta, self.denom) + _small_logdet(self.E)

  def _a(self, v_BxJxD, pv_BxJxR):
    """Z_S A^-1 v per target, [B, J, S], for vectors v and their projections pv."""
    xp = self.xp
    inspan = gram._dot_last(self.Pw, pv_BxJxR[:, :, None, :])
    resid = gram._dot_last(self.Z, v_BxJxD[:, :, None, :]) - gram._dot_last(self.P, pv_BxJxR[:, :, None, :])
    return inspan + xp.where(self.full_rank[..., None], 0.0, resid) / self.alpha[..., None]

  def project(self, v_BxJxD):
    return self.fit.project(v_BxJxD)

  def bilinear(self, u_BxJxD, pu, v_BxJxD, pv):
    """u^T S'^-1 v per target, [B, J], for vectors u, v [B, J, D] and their projections."""
    xp = self.xp
    base = self.fit.bilinear(pu, pv, gram._dot_last(u_BxJxD, v_BxJxD), self.alpha, self.beta, self.w)
    a_u = self._a(u_BxJxD, pu)
    a_v = a_u if v_BxJxD is u_BxJxD else self._a(v_BxJxD, pv)
    y = _small_solve(self.E, xp.sum(self.C * a_v[..., None, :], axis=-1))  # E^-1 C a_v
    return base + self.beta * xp.sum(a_u * y, axis=-1)


def _removal_matrix(sizes, L, dtype):
  """C for removal blocks of the given sizes from classes left with L rows each: blockdiag(I + 1 1^T / L)."""
  S = sum(sizes)
  C = np.eye(S)
  at = 0
  for s in sizes:
    C[at:at + s, at:at + s] += 1.0 / L
    at += s
  return C.astype(dtype)


def sorted_balanced(x_BxMxD, k, first_BxM, valid_BxD, *, oas, shared, offline, floor, offline_shift="std"):
  """Balanced leave-one-out scores [B, M] (llr, or the offline z without the statistic's member sign) of canaries
  whose first k models are IN.

  Rows are sorted IN-first, each class in ascending model id; first_BxM from `first_after`. oas: the OAS model
  (D > 1), else the diagonal one (univariate features have D = 1). k is static (shapes depend on it).
  """
  xp = array_namespace(x_BxMxD)
  dt = x_BxMxD.dtype
  B, M, D = x_BxMxD.shape
  mean_in = xp.mean(x_BxMxD[:, :k], axis=1)
  mean_out = xp.mean(x_BxMxD[:, k:], axis=1)
  is_in = xp.asarray(np.arange(M) < k)
  z_BxMxD = x_BxMxD - xp.where(is_in[None, :, None], mean_in[:, None], mean_out[:, None])
  delta_BxD = mean_in - mean_out
  diag_w = {True: xp.sum(z_BxMxD[:, :k] ** 2, axis=1), False: xp.sum(z_BxMxD[:, k:] ** 2, axis=1)}  # diag(W), [B, D]
  if oas:
    p_B = xp.sum(xp.astype(valid_BxD, dt), axis=1)
    if shared:
      pooled = gram.Fit(z_BxMxD, p_B)
      P_BxMxR = pooled.project(z_BxMxD)
      p_delta = pooled.project(delta_BxD[:, None, :])[:, 0][:, None, :]  # [B, 1, R]
    else:  # each row projected on its own class's eigenbasis (one batched eigh for both: Fit.pair)
      fits = dict(zip((True, False), gram.Fit.pair(z_BxMxD[:, :k], z_BxMxD[:, k:], p_B)))
      P_BxMxR = xp.concat([fits[True].project(z_BxMxD[:, :k]), fits[False].project(z_BxMxD[:, k:])], axis=1)

  def floored(var):  # floor; unscored positions (zero residuals) get variance 1 so they add nothing
    return xp.where(valid_BxD[:, None, :], xp.maximum(var, floor), 1.0)

  scores = []
  for target_in, (s_own, s_oth, L) in zip((True, False), removal_counts(k, M)):
    n_own = k if target_in else M - k
    own_at, oth_at = (0, k) if target_in else (k, 0)  # where each class's rows start
    # Rows removed per target, as positions in the sorted rows: the target and the next s_own - 1 of its class
    # (cyclically), then the first s_oth of the other class after it.
    own_idx = own_at + (np.arange(n_own)[:, None] + np.arange(s_own)[None]) % n_own
    oth_idx = oth_at + (first_BxM[:, own_at:own_at + n_own, None] + xp.asarray(np.arange(s_oth, dtype=np.int32))) \
        % (M - n_own)
    idx_BxJxS = xp.concat([xp.broadcast_to(xp.asarray(own_idx, dtype=oth_idx.dtype), oth_idx.shape[:2] + (s_own,)),
                           oth_idx], axis=2)
    Z = _gather(z_BxMxD, idx_BxJxS)  # [B, J, S, D]
    Z_own, Z_oth = Z[:, :, :s_own], Z[:, :, s_own:]
    z_t = Z_own[:, :, 0]
    # Residuals of the target to each class mean after the removal: (x - mean) + g / L.
    g_own, g_oth = _row_sum(Z_own), _row_sum(Z_oth)
    r_own = z_t * ((L + 1.0) / L) if s_own == 1 else z_t + g_own / L
    r_oth = z_t + (1.0 if target_in else -1.0) * delta_BxD[:, None, :]
    r_oth = r_oth if s_oth == 0 else r_oth + g_oth / L
    if not oas:
      if offline:  # the OUT fit: the own one for OUT targets, the other one for IN targets
        r, Zs, g = (r_oth, Z_oth, g_oth) if target_in else (r_own, Z_own, g_own)
        scat = diag_w[False][:, None] - _removed_diag(Zs, g, L)
        scores.append(gaussian.offline_z(r, floored(scat / L), valid_BxD, 1.0, offline_shift, model_axis=1))
        continue
      removed_own, removed_oth = _removed_diag(Z_own, g_own, L), _removed_diag(Z_oth, g_oth, L)
      if shared:
        inv_var = 1.0 / floored(((diag_w[True] + diag_w[False])[:, None] - removed_own - removed_oth) / (2.0 * L))
        q_own = xp.sum(r_own * r_own * inv_var, axis=2)
        q_oth = xp.sum(r_oth * r_oth * inv_var, axis=2)  # the same covariance for both classes: logdets cancel
      else:
        var_own = floored((diag_w[target_in][:, None] - removed_own) / L)
        var_oth = floored((diag_w[not target_in][:, None] - removed_oth) / L)
        q_own = xp.sum(r_own * r_own / var_own + xp.log(var_own), axis=2)
        q_oth = xp.sum(r_oth * r_oth / var_oth + xp.log(var_oth), axis=2)
    else:
      P = _gather(P_BxMxR, idx_BxJxS)
      P_own, P_oth = P[:, :, :s_own], P[:, :, s_own:]
      if offline:
        Zs, Ps, r, s = (Z_oth, P_oth, r_oth, s_oth) if target_in else (Z_own, P_own, r_own, s_own)
        scores.append(_offline(fits[False], diag_w[False], Zs, Ps, r, s, L, valid_BxD, floor, offline_shift))
        continue
      # Projections by linearity where the basis allows: r_own on its own class's (or the pooled) basis.
      p_t, pg_own = P_own[:, :, 0], _row_sum(P_own)
      pr_own = p_t * ((L + 1.0) / L) if s_own == 1 else p_t + pg_own / L
      if shared:
        C = xp.asarray(_removal_matrix((s_own, s_oth), L, _np_dtype(xp, dt)))
        dd = _Downdated(pooled, Z, P, C, 2.0 * L, floor)
        pr_oth = p_t + (1.0 if target_in else -1.0) * p_delta
        pr_oth = pr_oth if s_oth == 0 else pr_oth + _row_sum(P_oth) / L
        q_own, q_oth = _quadratic(dd, r_own, pr_own), _quadratic(dd, r_oth, pr_oth)  # logdets cancel
      else:
        own = _downdated(fits[target_in], Z_own, P_own, s_own, L, floor)
        oth = _downdated(fits[not target_in], Z_oth, P_oth, s_oth, L, floor)
        q_own = _quadratic(own, r_own, pr_own) + own.logdet()
        q_oth = _quadratic(oth, r_oth, oth.project(r_oth)) + oth.logdet()
    own_minus_oth = -0.5 * (q_own - q_oth)
    scores.append(own_minus_oth if target_in else -own_minus_oth)
  return xp.concat(scores, axis=1)


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


def _np_dtype(xp, dt):
  return np.float64 if dt == xp.float64 else np.float32


def _downdated(fit, Z, P, s, L, floor):
  xp = fit.xp
  dtype = _np_dtype(xp, Z.dtype)
  if s == 0:  # nothing removed: the full fit (Woodbury on an empty set)
    return _Downdated(fit, Z[:, :, :0], P[:, :, :0], xp.asarray(np.eye(0, dtype=dtype)), float(L), floor)
  return _Downdated(fit, Z, P, xp.asarray(_removal_matrix((s,), L, dtype)), float(L), floor)


def _quadratic(dd, r_BxJxD, pr_BxJxR):
  """r^T S'^-1 r per target for residuals r and their projections pr."""
  return dd.bilinear(r_BxJxD, pr_BxJxR, r_BxJxD, pr_BxJxR)


def _offline(fit, diag_w_BxD, Z, P, r, s, L, valid_BxD, floor, shift):
  """GLS z-score u^T S'^-1 r / sqrt(u^T S'^-1 u) (unsigned) under the downdated OUT fit; u = 1 or sqrt(diag S')."""
  xp = fit.xp
  dd = _downdated(fit, Z, P, s, L, floor)
  valid = xp.astype(valid_BxD, r.dtype)[:, None, :]
  if shift == "uniform":
    u = xp.broadcast_to(valid, r.shape)
  else:
    diag = diag_w_BxD[:, None] - _removed_diag(Z, _row_sum(Z), L)  # diag(W') [B, J, D]
    u = xp.sqrt(dd.alpha[..., None] + dd.beta[..., None] * xp.maximum(diag, 0.0)) * valid
  pu, pr = dd.project(u), dd.project(r)
  return dd.bilinear(u, pu, r, pr) / xp.sqrt(dd.bilinear(u, pu, u, pu))


def balanced_llr(x_MxBxD, keep_MxB, valid_BxD, scoring):
  """Balanced leave-one-out scores [M, B] of a block of canaries (features as lira.gaussian.features computes them),
  numpy: canaries grouped by IN count, models sorted IN-first, `sorted_balanced` per group."""
  M, B, D = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  oas = scoring.covariance == "oas" and D > 1
  for k, cols, order_BxM in gram.sorted_groups(keep_MxB):
    x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD[:, cols], 0, 1), order_BxM[:, :, None], axis=1)
    llr_BxM = sorted_balanced(x_BxMxD, k, first_after(order_BxM, k), valid_BxD[cols], oas=oas,
                              shared=scoring.shared, offline=scoring.offline, floor=scoring.var_floor,
                              offline_shift=scoring.offline_shift)
    unsorted = np.empty_like(llr_BxM)
    np.put_along_axis(unsorted, order_BxM, llr_BxM, axis=1)
    out_MxB[:, cols] = scoring.sign * unsorted.T if scoring.offline else unsorted.T
  return out_MxB
