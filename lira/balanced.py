"""Balanced leave-one-out in closed form: both classes fitted on the same number of shadow models (docs/conventions.md).

Plain leave-one-out fits the target's own class on one model fewer than the other, which biases scores towards
"non-member" when models are few. Here, for target m on a canary with n_own models in m's class (m included) and
n_oth in the other, each class keeps L = min(n_own - 1, n_oth) models: m itself is removed, and the class with more
models left drops the ones that follow m in cyclic model order (m + 1, m + 2, ... mod M), so the choice is
reproducible, needs no seed, and spreads the dropped models evenly. With LiRA's balanced keep matrix (every canary
IN for M/2 models) each class loses exactly one row: m from its own class, the first model of the other class after
m from the other.

Nothing is refitted. Removing a set S of s rows (centred rows z_S, their sum g) from a class that keeps L = n - s
rows moves its mean by -g / L and its scatter to
  W' = W - Z_S^T C Z_S,   C = I_s + 1 1^T / L,
a rank-s downdate (s = 1: plain leave-one-out's W - n/(n-1) z z^T). The diagonal estimators read diag(W') off it
directly; OAS solves with alpha' I + beta' W' by Woodbury on the class's one eigendecomposition (lira/woodbury.py);
the scores of targets fitted without their removed rows are lira/balanced_removal.py's.
A shared fit removes both classes' sets from the pooled scatter at once (C block-diagonal). Canaries whose counts
are unequal (a keep matrix of one's own) drop more rows from the larger class: the same formulas with a larger s,
as long as a class drops no more rows than it keeps (the downdate then cancels at most half its scatter); beyond
that the kept rows are fitted directly (`_kept_scores`; OAS in their L x L Gram space, woodbury.Kept). With M/2
models per class, class-wise fits take each target's other-class fit from its partner's own leave-one-out fit
(`_classwise_paired`).

`sorted_balanced` is written against the Python array API (numpy or jax.numpy, no in-place updates): the numpy
backend runs it here (`balanced_llr`; `balanced_llr_variants` sorts and centres a block once for several variants),
the jax backend jits this one copy (lira/loo_jax.py).
"""

import numpy as np
from array_api_compat import array_namespace

from lira import balanced_removal
from lira import gaussian
from lira import gram
from lira import woodbury


def removal_counts(k, M):
  """(s_own, s_oth, L) for IN targets and for OUT targets of canaries with k IN models of M."""
  counts = []
  for n_own, n_oth in ((k, M - k), (M - k, k)):
    L = min(n_own - 1, n_oth)
    counts.append((n_own - L, n_oth - L, L))
  return tuple(counts)


def first_after(order_BxM, k):
  """For canaries sorted IN-first (each class in ascending model id, lira.gram.sorted_groups): per target, the
  position in the OTHER class of the first of its models after the target in cyclic order, [B, M] int32 (array
  API; k a number, a traced scalar, or one count per canary [B] in the jax backend's padded programs).

  The i-th model of its class with id m has m - i models of the other class below it, so that many come before it.
  """
  xp = array_namespace(order_BxM)
  i_M = xp.asarray(np.arange(order_BxM.shape[1]), dtype=xp.int32)
  k = xp.asarray(k, dtype=xp.int32)
  k = k[:, None] if k.ndim == 1 else k  # [B, 1]: a count per canary
  return xp.astype(order_BxM - xp.where(i_M < k, i_M, i_M - k), xp.int32)


def centred(x_BxMxD, k):
  """(z_BxMxD, delta_BxD, diag_w) of sorted rows: each row centred by its class mean, the gap mean_IN - mean_OUT,
  and each class's diag(W) = sum of squared centred rows ({True: IN, False: OUT}, [B, D])."""
  xp = array_namespace(x_BxMxD)
  M = x_BxMxD.shape[1]
  mean_in = xp.mean(x_BxMxD[:, :k], axis=1)
  mean_out = xp.mean(x_BxMxD[:, k:], axis=1)
  if isinstance(x_BxMxD, np.ndarray):  # in place of the where below: one pass, the same bits
    z_BxMxD = np.empty_like(x_BxMxD)
    np.subtract(x_BxMxD[:, :k], mean_in[:, None], out=z_BxMxD[:, :k])
    np.subtract(x_BxMxD[:, k:], mean_out[:, None], out=z_BxMxD[:, k:])
  else:
    is_in = xp.asarray(np.arange(M) < k)
    z_BxMxD = x_BxMxD - xp.where(is_in[None, :, None], mean_in[:, None], mean_out[:, None])
  diag_w = {True: xp.sum(z_BxMxD[:, :k] ** 2, axis=1), False: xp.sum(z_BxMxD[:, k:] ** 2, axis=1)}
  return z_BxMxD, mean_in - mean_out, diag_w


def sorted_balanced(x_BxMxD, k, first_BxM, valid_BxD, *, oas, shared, offline, floor, offline_shift="std",
                    centring=None, sums=None):
  """Balanced leave-one-out scores [B, M] (llr, or the offline z without the statistic's member sign) of canaries
  whose first k models are IN.

  Rows are sorted IN-first, each class in ascending model id; first_BxM from `first_after`. oas: the OAS model
  (D > 1), else the diagonal one (univariate features have D = 1). k is static (shapes depend on it; the jax
  backend's programs for a traced k: lira/balanced_padded.py). centring: `centred(x_BxMxD, k)` when already computed
  (variants scored on the same rows share it). sums: a dict that variants scored on the same rows share, in which
  the removed windows' sums (the diagonal fits' downdates) are kept once made.
  """
  xp = array_namespace(x_BxMxD)
  B, M, D = x_BxMxD.shape
  z_BxMxD, delta_BxD, diag_w = centred(x_BxMxD, k) if centring is None else centring
  fitted = balanced_removal.oas_fits(z_BxMxD, k, delta_BxD, valid_BxD, shared) if oas else None
  all_valid = isinstance(valid_BxD, np.ndarray) and bool(valid_BxD.all())  # numpy, no mask: skip the where
  floored = balanced_removal.floor_variance(xp, valid_BxD, floor, all_valid)

  if not shared and not offline and 2 * k == M:
    return _classwise_paired(z_BxMxD, delta_BxD, k, first_BxM, diag_w, floored,
                             fitted[:4] + (floor,) if oas else None)

  scores = []
  for target_in, (s_own, s_oth, L) in zip((True, False), removal_counts(k, M)):
    n_own = k if target_in else M - k
    own_at, oth_at = (0, k) if target_in else (k, 0)  # where each class's rows start
    if max(s_own, s_oth) > L:  # more rows dropped than kept: fit the kept rows directly (no cancelling downdate)
      kept_own = own_at + (np.arange(n_own)[:, None] + s_own + np.arange(L)[None]) % n_own
      kept_oth = oth_at + (first_BxM[:, own_at:own_at + n_own, None] + s_oth
                           + xp.asarray(np.arange(L, dtype=np.int32))) % (M - n_own)
      K_own = z_BxMxD[:, kept_own]  # [B, J, L, D]
      K_oth = balanced_removal.gather(z_BxMxD, kept_oth)
      scores.append(_kept_scores(K_own, K_oth, z_BxMxD[:, own_at:own_at + n_own],
                                 (1.0 if target_in else -1.0) * delta_BxD[:, None, :], valid_BxD, target_in,
                                 oas=oas, shared=shared, offline=offline, floor=floor, offline_shift=offline_shift))
      continue
    # Rows removed per target: the target and the next s_own - 1 of its class (cyclically), then the first s_oth of
    # the other class after it.
    windows = balanced_removal.Windows(own_at, n_own, s_own, oth_at, M - n_own, s_oth,
                                       first_BxM[:, own_at:own_at + n_own])
    scores.append(balanced_removal.removal_scores(
        z_BxMxD, delta_BxD, diag_w, fitted, target_in, windows, float(L), valid_BxD, floored, oas=oas, shared=shared,
        offline=offline, floor=floor, offline_shift=offline_shift, sums=sums))
  return xp.concat(scores, axis=1)


def _kept_scores(K_own, K_oth, z_t, gap, valid_BxD, target_in, *, oas, shared, offline, floor, offline_shift):
  """Scores [B, J] of targets z_t [B, J, D] from each class's kept rows K [B, J, L, D] (rows centred by their class
  means over all models; gap: the target's offset to the other class, +-delta), fitted directly."""
  xp = array_namespace(z_t)
  valid = xp.astype(valid_BxD, z_t.dtype)
  m_own, m_oth = xp.mean(K_own, axis=2), xp.mean(K_oth, axis=2)
  r_own, r_oth = z_t - m_own, z_t + gap - m_oth
  Kc_own, Kc_oth = K_own - m_own[:, :, None], K_oth - m_oth[:, :, None]
  p_B = xp.sum(valid, axis=1)
  if offline:  # the OUT class: the own one for OUT targets
    Kc, r = (Kc_oth, r_oth) if target_in else (Kc_own, r_own)
    if not oas:
      var = xp.where(valid_BxD[:, None, :], xp.maximum(xp.mean(Kc * Kc, axis=2), floor), 1.0)
      return gaussian.offline_z(r, var, valid_BxD, 1.0, offline_shift, model_axis=1)
    fit = woodbury.Kept(Kc, p_B, floor)
    if offline_shift == "uniform":
      u = xp.broadcast_to(valid[:, None, :], r.shape)
    else:
      u = xp.sqrt(fit.alpha[..., None] + fit.beta[..., None] * xp.sum(Kc * Kc, axis=2)) * valid[:, None, :]
    return fit.bilinear(u, r) / xp.sqrt(fit.bilinear(u, u))
  if not oas:
    def var(Kc):
      return xp.where(valid_BxD[:, None, :], xp.maximum(xp.mean(Kc * Kc, axis=2), floor), 1.0)
    if shared:
      v = var(xp.concat([Kc_own, Kc_oth], axis=2))
      q_own, q_oth = xp.sum(r_own * r_own / v, axis=2), xp.sum(r_oth * r_oth / v, axis=2)
    else:
      v_own, v_oth = var(Kc_own), var(Kc_oth)
      q_own = xp.sum(r_own * r_own / v_own + xp.log(v_own), axis=2)
      q_oth = xp.sum(r_oth * r_oth / v_oth + xp.log(v_oth), axis=2)
  elif shared:
    fit = woodbury.Kept(xp.concat([Kc_own, Kc_oth], axis=2), p_B, floor)
    q_own, q_oth = fit.bilinear(r_own, r_own), fit.bilinear(r_oth, r_oth)  # logdets cancel
  else:
    own, oth = woodbury.Kept(Kc_own, p_B, floor), woodbury.Kept(Kc_oth, p_B, floor)
    q_own = own.bilinear(r_own, r_own) + own.logdet()
    q_oth = oth.bilinear(r_oth, r_oth) + oth.logdet()
  own_minus_oth = -0.5 * (q_own - q_oth)
  return own_minus_oth if target_in else -own_minus_oth


def _classwise_paired(z_BxMxD, delta_BxD, k, first_BxM, diag_w, floored, oas):
  """Class-wise scores [B, M] when both classes have k = M/2 models (LiRA's balanced keep matrix): every target
  loses one row from each class, so target m's fit of the other class (without its partner p, the first model of
  that class after m) is p's own leave-one-out fit. Each class's leave-one-out fits are made once and the other
  class's targets take their partners' (`Removal.take`)."""
  xp = array_namespace(z_BxMxD)
  B, M, _ = z_BxMxD.shape
  L = k - 1.0
  c = k / L
  rows = {True: slice(0, k), False: slice(k, M)}
  b = xp.arange(B)[:, None]
  partner = {g: first_BxM[:, rows[g]] % k for g in (True, False)}  # in the other class, [B, k]
  q_own, own = {}, {}
  for g in (True, False):
    z_g = z_BxMxD[:, rows[g]]
    if oas is None:
      zt2 = z_g * z_g
      var = floored((diag_w[g][:, None] - c * zt2) / L)  # each row's leave-one-out variances, [B, k, D]
      logdet = xp.sum(xp.log(var), axis=2)
      q_own[g], own[g] = (c * c) * xp.sum(zt2 / var, axis=2) + logdet, (var, logdet)
    else:
      fits, P_BxMxR, R_BxMxD, proj_delta, floor = oas
      P_g = P_BxMxR[:, rows[g]][:, :, None]
      R_g = None if R_BxMxD is None else R_BxMxD[:, rows[g]][:, :, None]
      zz = xp.sum(z_g * z_g, axis=2)[..., None, None]
      rem = woodbury.Removal(fits[g], P_g, zz, woodbury.removal_matrix((1,), L), L, floor)
      rem.basis([(z_g[:, :, None], P_g, R_g), (delta_BxD[:, None, None], proj_delta[g][:, :, None])])
      e = balanced_removal.coefficients(xp, z_BxMxD.dtype, L, (1, c, 0.0), (1, 0.0, 0.0))
      q_own[g], own[g] = rem.form(e, e) + rem.logdet(), rem
  scores = []
  for g in (True, False):
    o, idx, sgn = not g, partner[g], (1.0 if g else -1.0)
    z_t, z_p = z_BxMxD[:, rows[g]], z_BxMxD[:, rows[o]][b, idx]
    if oas is None:
      var_p, logdet_p = own[o][0][b, idx], own[o][1][b, idx]
      r = z_t + (sgn * delta_BxD[:, None, :] + z_p / L)
      q_oth = xp.sum(r * r / var_p, axis=2) + logdet_p
    else:
      fits, P_BxMxR, R_BxMxD, proj_delta, _ = oas
      oth = own[o].take(idx)
      P_p = P_BxMxR[:, rows[o]][b, idx][:, :, None]
      R_p = None if R_BxMxD is None else R_BxMxD[:, rows[o]][b, idx][:, :, None]
      oth.extend([(z_p[:, :, None], P_p, R_p), (delta_BxD[:, None, None], proj_delta[o][:, :, None])],
                 [(z_t[:, :, None], fits[o].project(z_t)[:, :, None])])
      # r = z_p / L + sgn delta + z_t
      a = balanced_removal.coefficients(xp, z_BxMxD.dtype, L, (1, 0.0, 1.0), (1, sgn, 0.0), (1, 1.0, 0.0))
      q_oth = oth.form(a, a) + oth.logdet()
    own_minus_oth = -0.5 * (q_own[g] - q_oth)
    scores.append(own_minus_oth if g else -own_minus_oth)
  return xp.concat(scores, axis=1)


def balanced_llr(x_MxBxD, keep_MxB, valid_BxD, scoring):
  """Balanced leave-one-out scores [M, B] of a block of canaries (features as lira.gaussian.features computes them)."""
  return _balanced_groups(x_MxBxD, keep_MxB, valid_BxD, [scoring], position_features=False)[0]


def balanced_llr_variants(x_MxBxD, keep_MxB, valid_BxD, scorings):
  """balanced_llr of several scorings (differing in covariance and shared) on one block's position features
  (lira.gaussian.position_features; the univariate ones take their mean): [llr_MxB per scoring]. The rows are sorted
  and centred once for all of them."""
  return _balanced_groups(x_MxBxD, keep_MxB, valid_BxD, scorings, position_features=True)


def _balanced_groups(x_MxBxD, keep_MxB, valid_BxD, scorings, position_features):
  """numpy driver: canaries grouped by IN count, models sorted IN-first, `sorted_balanced` per group and scoring."""
  M, B, _ = x_MxBxD.shape
  outs = [np.empty((M, B)) for _ in scorings]
  for k, cols, order_BxM in gram.sorted_groups(keep_MxB):
    # x_BxMxD[b, j] = x_MxCxD[order_BxM[b, j], b], each row taken whole (take_along_axis indexes every element)
    x_MxCxD = np.ascontiguousarray(x_MxBxD if len(cols) == B else np.take(x_MxBxD, cols, axis=1))
    C, D = x_MxCxD.shape[1:]
    x_BxMxD = np.take(x_MxCxD.reshape(M * C, D), order_BxM * C + np.arange(C)[:, None], axis=0)
    first_BxM = first_after(order_BxM, k)
    rows = {}  # features -> (x, valid, centring), made once per kind of features
    for out_MxB, scoring in zip(outs, scorings):
      uni = position_features and scoring.covariance == "univariate"
      if uni not in rows:
        x, valid = x_BxMxD, valid_BxD[cols]
        if uni:  # each model's mean over the valid positions (lira.gaussian.univariate)
          x = (x.sum(axis=2) / valid.sum(axis=1)[:, None])[:, :, None]
          valid = np.ones((len(cols), 1), bool)
        rows[uni] = (x, valid, centred(x, k), {})
      x, valid, centring, sums = rows[uni]
      llr_BxM = sorted_balanced(x, k, first_BxM, valid, oas=scoring.covariance == "oas" and x.shape[2] > 1,
                                shared=scoring.shared, offline=scoring.offline, floor=scoring.var_floor,
                                offline_shift=scoring.offline_shift, centring=centring, sums=sums)
      unsorted = np.empty_like(llr_BxM)
      np.put_along_axis(unsorted, order_BxM, llr_BxM, axis=1)
      out_MxB[:, cols] = scoring.sign * unsorted.T if scoring.offline else unsorted.T
  return outs
