"""LiRA against separate target models: every canary's Gaussians fitted on all M shadow models (Carlini et al. 2022).

The auditor's setting: shadow models from a run folder, and the per-token losses of the same canaries on K target
models trained elsewhere. Per canary, the IN and OUT Gaussians come from all M shadows (no model is left out), and
each target's vector s is scored as log N(s | mu_IN, Sigma_IN) - log N(s | mu_OUT, Sigma_OUT), or offline with the
OUT Gaussian alone, exactly as lira.leave_one_out scores a shadow model against the other M - 1 (docs/conventions.md,
"Gaussian fits"). OAS uses the same eigenbasis of the shadow rows as leave-one-out (lira/gram.py), so no T x T matrix
is formed.
"""

import numpy as np
from tqdm.auto import tqdm

from lira import gram
from lira import loo
from lira.covariance import VAR_FLOOR
from lira.errors import InputError
from lira.transforms import check_losses, member_sign


def check_counts(keep_MxN, shared, offline):
  """Shadow models per class each canary needs: 2 IN and 2 OUT (a variance needs 2 rows); shared 1 and 1, 3 in all."""
  n_in_N = keep_MxN.sum(axis=0)
  n_out_N = keep_MxN.shape[0] - n_in_N
  if offline:
    bad_N, need = n_out_N < 2, "at least 2 OUT shadow models"
  elif shared:
    bad_N, need = (n_in_N < 1) | (n_out_N < 1) | (n_in_N + n_out_N < 3), "at least 1 IN, 1 OUT and 3 shadow models"
  else:
    bad_N, need = (n_in_N < 2) | (n_out_N < 2), "at least 2 IN and 2 OUT shadow models"
  if bad_N.any():
    n = int(np.flatnonzero(bad_N)[0])
    raise InputError(f"canary {n} has {n_in_N[n]} IN and {n_out_N[n]} OUT shadow models; scoring targets needs "
                     f"{need} ({int(bad_N.sum())} canaries affected)")


def _diag_block(x_MxBxD, keep_MxB, t_KxBxD, valid_BxD, shared, offline, sign, floor, global_var, shift):
  """Univariate / independent target scores [K, B] from the full shadow fits."""
  n_in_B, n_out_B, mean_in, mean_out, z = loo._class_stats(x_MxBxD, keep_MxB)
  z2 = z * z
  scat_in = np.einsum("mb,mbd->bd", keep_MxB.astype(np.float64), z2)
  scat_out = z2.sum(axis=0) - scat_in

  def floored(var_BxD):  # unscored positions (zero residuals) get variance 1 so they add nothing
    return np.where(valid_BxD, np.maximum(var_BxD, floor), 1.0)

  if global_var is not None:
    var_in, var_out = (np.where(valid_BxD, v, 1.0) for v in global_var)
  elif shared:
    var_in = var_out = floored((scat_in + scat_out) / (n_in_B + n_out_B)[:, None])
  else:
    var_in, var_out = floored(scat_in / n_in_B[:, None]), floored(scat_out / n_out_B[:, None])
  r_in, r_out = t_KxBxD - mean_in, t_KxBxD - mean_out
  if offline:
    return loo._offline_diag(r_out, np.broadcast_to(var_out, r_out.shape), valid_BxD, sign, shift)
  q_in = (r_in**2 / var_in).sum(axis=2) + np.log(var_in).sum(axis=1)
  q_out = (r_out**2 / var_out).sum(axis=2) + np.log(var_out).sum(axis=1)
  return -0.5 * (q_in - q_out)


def _oas_block(x_MxBxD, keep_MxB, t_KxBxD, valid_BxD, shared, offline, sign, floor, shift):
  """OAS target scores [K, B]: per canary and class, OAS (alpha I + beta W) in the eigenbasis of the shadow rows."""
  K, B, _ = t_KxBxD.shape
  out_KxB = np.empty((K, B))
  n_in_B = keep_MxB.sum(axis=0)
  for k in np.unique(n_in_B):  # canaries with the same IN count share the row split
    cols = np.flatnonzero(n_in_B == k)
    order_BxM = np.argsort(~keep_MxB[:, cols].T, axis=1, kind="stable")  # IN models first
    x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD[:, cols], 0, 1), order_BxM[:, :, None], axis=1)
    t_BxKxD = np.moveaxis(t_KxBxD[:, cols], 0, 1)
    out_KxB[:, cols] = _sorted_oas(x_BxMxD, int(k), t_BxKxD, valid_BxD[cols], shared, offline, sign, floor,
                                   shift).T
  return out_KxB


def _sorted_oas(x_BxMxD, k, t_BxKxD, valid_BxD, shared, offline, sign, floor, shift):
  """Scores [B, K] of K targets for canaries whose first k shadow models are IN."""
  p_B = valid_BxD.sum(axis=1).astype(np.float64)
  means = x_BxMxD[:, :k].mean(axis=1), x_BxMxD[:, k:].mean(axis=1)
  is_in = (np.arange(x_BxMxD.shape[1]) < k)[None, :, None]
  z_BxMxD = x_BxMxD - np.where(is_in, means[0][:, None], means[1][:, None])
  rows = {"in": z_BxMxD[:, :k], "out": z_BxMxD[:, k:]}
  if shared:
    fit = gram._Fit(z_BxMxD, p_B)
    fits = {"in": fit, "out": fit}
  else:
    fits = {c: gram._Fit(rows[c], p_B) for c in (("out",) if offline else ("in", "out"))}

  def full_params(fit):
    return tuple(v[:, None] for v in fit.params(float(fit.n), fit.trace_B, fit.fro2_B, floor))

  if offline:
    fit = fits["out"]
    alpha, beta = full_params(fit)
    r_BxKxD = t_BxKxD - means[1][:, None]
    u_Bx1xD = valid_BxD[:, None, :].astype(np.float64)  # the shift direction (lira.gram._offline)
    if shift == "std":
      u_Bx1xD = u_Bx1xD * np.sqrt(alpha[..., None] + beta[..., None] * (rows["out"] ** 2).sum(axis=1)[:, None])
    p_u, p_r = fit.project(u_Bx1xD), fit.project(r_BxKxD)
    u_r = fit.bilinear(p_u, p_r, (u_Bx1xD * r_BxKxD).sum(axis=2), alpha, beta)
    u_u = fit.bilinear(p_u, p_u, (u_Bx1xD**2).sum(axis=2), alpha, beta)
    return sign * u_r / np.sqrt(u_u)
  q = {}
  for c, mean in zip(("in", "out"), means):
    fit = fits[c]
    alpha, beta = full_params(fit)
    r_BxKxD = t_BxKxD - mean[:, None]
    p_r = fit.project(r_BxKxD)
    q[c] = fit.bilinear(p_r, p_r, (r_BxKxD**2).sum(axis=2), alpha, beta)
    if not shared:  # a shared covariance's log-determinant cancels
      q[c] = q[c] + fit.logdet(alpha, beta)
  return -0.5 * (q["in"] - q["out"])


def _global_variance(features, blocks, keep_MxN, shared):
  """LiRA's fixed variance from all shadows: one pooled variance per class (shared: one), each canary centred."""
  scat, count = np.zeros(2), np.zeros(2)
  for blk in blocks:
    x_MxBxD, _, valid_BxD = features(blk)
    keep_MxB = keep_MxN[:, blk]
    n_in_B, n_out_B, _, _, z = loo._class_stats(x_MxBxD, keep_MxB)
    z2_MxB = np.where(valid_BxD[None], z**2, 0.0).sum(axis=2)
    p_B = valid_BxD.sum(axis=1)
    scat += ((keep_MxB * z2_MxB).sum(), (~keep_MxB * z2_MxB).sum())
    count += ((n_in_B * p_B).sum(), (n_out_B * p_B).sum())
  if shared:
    return (scat.sum() / count.sum(),) * 2
  return scat[0] / count[0], scat[1] / count[1]


def score_targets(shadow_loss_MxNxT, shadow_keep_MxN, target_loss_KxNxT, *, covariance, shared, reduction=None,
                  statistic="logit", mask_NxT=None, offline=False, offline_shift="std", fix_variance=False,
                  var_floor=VAR_FLOOR, block_size=None, progress=False):
  """LiRA scores llr_KxN (float64, higher = member) of K target models' canary losses, fitted on all M shadows.

  target_loss_KxNxT holds the same N canaries' per-token losses on each target ([N, T] is one target). Settings as
  lira.leave_one_out: covariance "univariate" | "independent" | "oas", shared or class-wise, a length reduction, the
  statistic, offline (OUT Gaussian alone, one-sided, along offline_shift) and fix_variance (one pooled variance per class). The shadow
  arrays and the targets are checked before any scoring; a bad target loss names the target, canary and position.
  """
  loo._check_settings(covariance, shared, offline, fix_variance, statistic, offline_shift)
  loo.check_arrays(shadow_loss_MxNxT, shadow_keep_MxN, mask_NxT, reduction)
  target = target_loss_KxNxT if np.ndim(target_loss_KxNxT) == 3 else np.asarray(target_loss_KxNxT)[None]
  M, N, T = np.shape(shadow_loss_MxNxT)
  if np.ndim(target) != 3 or target.shape[1:] != (N, T):
    raise InputError(f"target losses must be shaped [K, N, T] or [N, T] with N={N} canaries and T={T} positions "
                     f"as the shadow models', got {list(np.shape(target_loss_KxNxT))}")
  try:
    check_losses(target, mask_NxT)
  except InputError as e:
    raise InputError(str(e).replace("loss of model", "loss of target", 1)) from None
  keep_MxN = np.asarray(shadow_keep_MxN, bool)
  check_counts(keep_MxN, shared, offline)
  K = target.shape[0]
  bs = block_size or loo._block_size(M + K, T, covariance)
  blocks = [slice(i, min(i + bs, N)) for i in range(0, N, bs)]

  def features(blk):  # shadows and targets through the same statistic and reduction
    mask = None if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
    both = np.concatenate([np.asarray(shadow_loss_MxNxT[:, blk]), np.asarray(target[:, blk])])
    x, valid = loo._features(both, mask, covariance, reduction, statistic)
    return x[:M], x[M:], valid

  global_var = None
  if fix_variance:
    global_var = tuple(np.maximum(v, var_floor) for v in _global_variance(features, blocks, keep_MxN, shared))
  sign = member_sign(statistic)
  llr_KxN = np.empty((K, N))
  for blk in tqdm(blocks, desc=f"targets {covariance}{' shared' if shared else ''}", disable=not progress,
                  leave=False):
    x_MxBxD, t_KxBxD, valid_BxD = features(blk)
    keep_MxB = keep_MxN[:, blk]
    if covariance == "oas" and x_MxBxD.shape[2] > 1:
      llr_KxN[:, blk] = _oas_block(x_MxBxD, keep_MxB, t_KxBxD, valid_BxD, shared, offline, sign, var_floor,
                                   offline_shift)
    else:
      llr_KxN[:, blk] = _diag_block(x_MxBxD, keep_MxB, t_KxBxD, valid_BxD, shared, offline, sign, var_floor,
                                    global_var, offline_shift)
  bad = ~np.isfinite(llr_KxN)
  if bad.any():
    k, n = (int(i[0]) for i in np.nonzero(bad))
    raise FloatingPointError(f"non-finite score for target {k} on canary {n}; please report this with the data")
  return llr_KxN
