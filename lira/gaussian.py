"""The one place LiRA's Gaussians are fitted and scored (Rossi et al. 2025, Sec. 3.2; docs/conventions.md).

Every scorer's model is this one: plain leave-one-out (lira/loo.py, lira/loo_jax.py), balanced leave-one-out
(lira/balanced.py, its downdates tested equal to `fit_score` on the kept rows) and separate targets
(lira/targets.py). Per canary the vector x (D positions, after the
statistic and the length reduction; D = 1 for univariate) of a target is scored as
  llr = log N(x | mu_IN, S_IN) - log N(x | mu_OUT, S_OUT)
with S diagonal (univariate, independent; floored at var_floor), or OAS (alpha I + beta W, solved in the eigenbasis
of the rows: lira/gram.py); shared fits pool both classes' rows, each centred by its own mean, and their
log-determinants cancel. Offline scoring uses the OUT Gaussian alone: the generalised-least-squares z-score
u^T S^-1 r / sqrt(u^T S^-1 u) of a shift along u (u = 1: "uniform"; u = sqrt(diag S): "std", scale-free), times the
statistic's member sign. LiRA's fixed variance replaces S by one pooled variance per class (shared: one).

Two ways to get the fits:
- `fit_score`: fit on given rows and score given vectors (separate targets).
- `loo_diag` / `gram.loo_oas`: all M targets of a block at once, each target's own row removed in closed form
  (removing row x, centred z, from a class of n rows changes the mean by -z/(n-1), the scatter by -n/(n-1) z z^T,
  and the target's residual to its own class mean becomes n/(n-1) z). Balanced leave-one-out (lira/balanced.py)
  removes a set of rows from each class the same way.
"""

import functools

import numpy as np
from array_api_compat import array_namespace

from lira import gram
from lira.errors import InputError
from lira.transforms import reduce_length, to_statistic


# ---- features: statistic -> reduction -> (univariate: mean) ----

def position_features(loss_MxBxT, mask_BxT, reduction, statistic):
  """Statistic -> reduction as float64 [M, B, D] with invalid positions zeroed, and valid_BxD."""
  given = loss_MxBxT = np.asarray(loss_MxBxT)
  valid_BxT = np.ones(loss_MxBxT.shape[1:], bool) if mask_BxT is None else np.asarray(mask_BxT, bool)
  if mask_BxT is not None:
    loss_MxBxT = np.where(valid_BxT[None], loss_MxBxT, 1.0)
  x_MxBxD, valid_BxD = reduce_length(to_statistic(loss_MxBxT, statistic), loss_MxBxT, reduction, valid_BxT)
  if valid_BxD is None:
    valid_BxD = np.ones(x_MxBxD.shape[1:], bool)
  if x_MxBxD is not given and valid_BxD.all():  # nothing to zero, and a new array: no copy
    return x_MxBxD, valid_BxD
  return np.where(valid_BxD[None], x_MxBxD, 0.0), valid_BxD


def univariate(x_MxBxD, valid_BxD):
  """Univariate features: each model's mean over the valid positions, [M, B, 1]."""
  x_MxBx1 = (x_MxBxD.sum(axis=2) / valid_BxD.sum(axis=1))[:, :, None]
  return x_MxBx1, np.ones(x_MxBx1.shape[1:], bool)


def for_covariance(features, covariance):
  """Position features (x_MxBxD, valid_BxD) as a covariance model reads them: univariate takes their mean."""
  return univariate(*features) if covariance == "univariate" else features


def features(loss_MxBxT, mask_BxT, scoring):
  """The vectors a scoring fits: (x_MxBxD, valid_BxD), float64."""
  return for_covariance(position_features(loss_MxBxT, mask_BxT, scoring.reduction, scoring.statistic),
                        scoring.covariance)


def block_size(M, D, covariance):
  """Canaries per block, about 128 MiB of float64 temporaries. Cache-sized blocks (2 MiB per [M, B, D] temporary)
  were 1.5-2x faster per block alone but 12-20% slower over a whole M = 484 run (BENCHMARKS.md)."""
  per_canary = 8 * (12 * M * D + (8 * M * M if covariance == "oas" else 0))
  return int(max(1, min(4096, 128 * 2**20 // per_canary)))


# ---- class counts ----

def check_counts(keep_MxN, scoring, scorer="leave_one_out", on_undefined="raise"):
  """Canaries whose fits are undefined: a mean needs 1 row per class, a variance 2 (shared: 3 in all).

  scorer "leave_one_out" removes the target's row from its class first (worst case over targets), and balanced
  counts keep L = min(n_own - 1, n_other) rows per class; "targets" fits on every shadow row. Raises InputError naming
  the first such canary, or with on_undefined="nan" returns the [N] mask of them.
  """
  n_in_N = keep_MxN.sum(axis=0)
  n_out_N = keep_MxN.shape[0] - n_in_N
  targets = scorer == "targets"
  r = 0 if targets else 1
  if not targets and scoring.balance_counts:
    bad_N = np.minimum(np.minimum(n_in_N - 1, n_out_N), np.minimum(n_out_N - 1, n_in_N)) < 2
    need = "at least 3 IN and 3 OUT models (2 per class left after balancing)"
  elif scoring.offline:
    bad_N = n_out_N - r < 2
    need = "at least 2 OUT shadow models" if targets else "at least 3 OUT models (2 left after removing an OUT target)"
  elif scoring.shared:
    bad_N = (n_in_N - r < 1) | (n_out_N - r < 1) | (n_in_N + n_out_N - r < 3)
    need = "at least 1 IN, 1 OUT and 3 shadow models" if targets else "at least 2 IN and 2 OUT models"
  else:
    bad_N = (n_in_N - r < 2) | (n_out_N - r < 2)
    need = ("at least 2 IN and 2 OUT shadow models" if targets
            else "at least 3 IN and 3 OUT models (2 left after removing a target)")
  if bad_N.any() and on_undefined == "raise":
    n = int(np.flatnonzero(bad_N)[0])
    models, what = ("shadow models", "scoring targets") if targets else ("models", "leave-one-out")
    raise InputError(f"canary {n} has {n_in_N[n]} IN and {n_out_N[n]} OUT {models}; {what} needs {need} "
                     f"({int(bad_N.sum())} canaries affected)")
  return bad_N


# ---- diagonal fits ----

def class_stats(x_MxBxD, keep_MxB, model_axis=0):
  """Per canary: counts, class means, target-centred rows z (by the target's own class).

  model_axis: 0 for [M, B, D] rows (numpy), 1 for [B, M, D] (the jax backend: XLA's CPU backend reduces over a
  leading axis several times slower than over a middle one); keep is [M, B] or [B, M] to match.
  """
  xp = array_namespace(x_MxBxD)
  e = functools.partial(xp.expand_dims, axis=model_axis)  # per-canary [B, ...] -> broadcastable against the rows
  w_in = xp.astype(keep_MxB, x_MxBxD.dtype)
  n_in_B = xp.sum(w_in, axis=model_axis)
  n_out_B = keep_MxB.shape[model_axis] - n_in_B
  sum_in_BxD = xp.sum(w_in[:, :, None] * x_MxBxD, axis=model_axis)
  mean_in_BxD = sum_in_BxD / xp.maximum(n_in_B, 1)[:, None]
  mean_out_BxD = (xp.sum(x_MxBxD, axis=model_axis) - sum_in_BxD) / xp.maximum(n_out_B, 1)[:, None]
  z_MxBxD = x_MxBxD - xp.where(keep_MxB[:, :, None], e(mean_in_BxD), e(mean_out_BxD))
  return n_in_B, n_out_B, mean_in_BxD, mean_out_BxD, z_MxBxD


def offline_z(r_MxBxD, var_MxBxD, valid_BxD, sign, shift, model_axis=0):
  """One-sided OUT-only score with a diagonal covariance: GLS z-score of the shift direction u (docs, "Offline").

  uniform (u = 1): sum(r / var) / sqrt(sum(1 / var)); std (u = sqrt(var)): sum(r / sqrt(var)) / sqrt(p), the
  per-position z-scores summed and scaled to unit variance, which no rescaling of a position changes.
  """
  xp = array_namespace(r_MxBxD)
  p_B = xp.sum(xp.astype(valid_BxD, r_MxBxD.dtype), axis=1)
  if shift == "std":
    return sign * xp.sum(r_MxBxD / xp.sqrt(var_MxBxD), axis=2) / xp.expand_dims(xp.sqrt(p_B), axis=model_axis)
  one = xp.expand_dims(xp.astype(valid_BxD, r_MxBxD.dtype), axis=model_axis)
  return sign * xp.sum(r_MxBxD / var_MxBxD, axis=2) / xp.sqrt(xp.sum(one / var_MxBxD, axis=2))


def loo_diag(x_MxBxD, keep_MxB, valid_BxD, shared, offline, sign, floor, global_var, offline_shift="std",
             model_axis=0):
  """Univariate / independent leave-one-out scores for one block of canaries ([M, B]); few passes over [M, B, D].

  Written against the array API (numpy or jax.numpy; no in-place updates) so both backends run this one copy.
  model_axis=1 takes [B, M, D] rows and [B, M] keep and returns [B, M] (see class_stats).
  """
  xp = array_namespace(x_MxBxD)
  e = functools.partial(xp.expand_dims, axis=model_axis)  # per-canary [B, ...] -> broadcastable against the rows
  n_in_B, n_out_B, mean_in, mean_out, z = class_stats(x_MxBxD, keep_MxB, model_axis)
  kin = keep_MxB[:, :, None]
  z2 = z * z
  scat_in_BxD = xp.sum(xp.astype(kin, z.dtype) * z2, axis=model_axis)
  scat_out_BxD = xp.sum(z2, axis=model_axis) - scat_in_BxD
  del z2
  n_own_MxB = xp.where(keep_MxB, e(n_in_B), e(n_out_B))
  c = (n_own_MxB / (n_own_MxB - 1.0))[:, :, None]
  s = xp.where(kin, 1.0, -1.0)  # +1 for IN targets
  r_oth = z + s * e(mean_in - mean_out)  # target minus the OTHER class mean
  r_own = c * z  # target minus its own class mean without it
  q_own_num, p_B = r_own * r_own, xp.sum(xp.astype(valid_BxD, z.dtype), axis=1)

  def floored(var):  # floor; unscored positions (zero residuals) get variance 1 so they add nothing
    return xp.where(valid_BxD if var.ndim == 2 else e(valid_BxD), xp.maximum(var, floor), 1.0)

  if global_var is not None:  # LiRA's fixed variance: one pooled scalar per class (already leave-one-out).
    var_in, var_out = (xp.expand_dims(xp.expand_dims(v, axis=1 - model_axis), axis=2) for v in global_var)
    var_own, var_oth = xp.where(kin, var_in, var_out), xp.where(kin, var_out, var_in)
    logdet_own, logdet_oth = e(p_B) * xp.log(var_own[:, :, 0]), e(p_B) * xp.log(var_oth[:, :, 0])
  elif shared:
    var_own = e(scat_in_BxD + scat_out_BxD) - q_own_num / c
    var_own = var_own / e((n_in_B + n_out_B - 1.0)[:, None])
    var_own = var_oth = floored(var_own)
    logdet_own = logdet_oth = 0.0  # the same covariance for both classes: cancels
  else:
    var_own = xp.where(kin, e(scat_in_BxD), e(scat_out_BxD)) - q_own_num / c
    var_own = floored(var_own / (n_own_MxB - 1.0)[:, :, None])
    var_in_BxD, var_out_BxD = floored(scat_in_BxD / n_in_B[:, None]), floored(scat_out_BxD / n_out_B[:, None])
    var_oth = xp.where(kin, e(var_out_BxD), e(var_in_BxD))
    logdet_own = xp.sum(xp.log(var_own), axis=2)
    logdet_oth = xp.where(keep_MxB, e(xp.sum(xp.log(var_out_BxD), axis=1)), e(xp.sum(xp.log(var_in_BxD), axis=1)))
  if offline:  # the OUT fit is the own fit for OUT targets and the other fit for IN targets
    var = xp.where(kin, var_oth, var_own)
    r = xp.where(kin, r_oth, r_own)
    return offline_z(r, xp.broadcast_to(var, r.shape), valid_BxD, sign, offline_shift, model_axis)
  q_own = xp.sum(q_own_num / var_own, axis=2)
  q_oth = xp.sum(r_oth * r_oth / var_oth, axis=2)
  return -0.5 * s[:, :, 0] * ((q_own + logdet_own) - (q_oth + logdet_oth))


def loo_scores(x_MxBxD, keep_MxB, valid_BxD, scoring, global_var=None):
  """Plain leave-one-out scores [M, B] of one block, every target's row removed in closed form (numpy)."""
  if scoring.covariance == "oas" and x_MxBxD.shape[2] > 1:
    return gram.loo_oas(x_MxBxD, keep_MxB, valid_BxD, shared=scoring.shared, offline=scoring.offline,
                        sign=scoring.sign, floor=scoring.var_floor, offline_shift=scoring.offline_shift)
  return loo_diag(x_MxBxD, keep_MxB, valid_BxD, scoring.shared, scoring.offline, scoring.sign, scoring.var_floor,
                  global_var, scoring.offline_shift)


# ---- LiRA's fixed variance ----

def pooled_scatter(x_MxBxD, keep_MxB, valid_BxD):
  """A block's contributions to LiRA's pooled variance: totals, and each target's own leave-one-out removal."""
  n_in_B, n_out_B, _, _, z = class_stats(x_MxBxD, keep_MxB)
  z2 = np.where(valid_BxD[None], z**2, 0.0)
  p_B = valid_BxD.sum(axis=1).astype(np.float64)
  n_own = np.where(keep_MxB, n_in_B, n_out_B)
  removed_MxB = n_own / (n_own - 1.0) * z2.sum(axis=2)
  return {
      "scatter_in": (keep_MxB * z2.sum(axis=2)).sum(), "scatter_out": (~keep_MxB * z2.sum(axis=2)).sum(),
      "count_in": (n_in_B * p_B).sum(), "count_out": (n_out_B * p_B).sum(),
      "removed_in_M": (keep_MxB * removed_MxB).sum(axis=1), "removed_out_M": (~keep_MxB * removed_MxB).sum(axis=1),
      "dof_in_M": (keep_MxB * p_B).sum(axis=1), "dof_out_M": (~keep_MxB * p_B).sum(axis=1),
  }


def add_scatter(totals, part):
  """Sum of two pooled_scatter results (totals may be None)."""
  return part if totals is None else {k: totals[k] + part[k] for k in part}


def pooled_variance(totals, scoring, leave_one_out=True):
  """LiRA's fixed variances (var_in, var_out), floored: per target [M] (leave_one_out) or scalars (all rows)."""
  s_in, s_out, c_in, c_out = (totals[k] for k in ("scatter_in", "scatter_out", "count_in", "count_out"))
  if leave_one_out:
    s_in, s_out = s_in - totals["removed_in_M"], s_out - totals["removed_out_M"]
    c_in, c_out = c_in - totals["dof_in_M"], c_out - totals["dof_out_M"]
  v = ((s_in + s_out) / (c_in + c_out),) * 2 if scoring.shared else (s_in / c_in, s_out / c_out)
  return tuple(np.maximum(g, scoring.var_floor) for g in v)


# ---- fits on given rows ----

def _diag_fit(rows_BxLxD, valid_BxD, floor):
  mean = rows_BxLxD.mean(axis=1)
  var = ((rows_BxLxD - mean[:, None]) ** 2).mean(axis=1)
  return mean, np.where(valid_BxD, np.maximum(var, floor), 1.0)


def _oas_quadratic(z_BxnxD, r_BxKxD, valid_BxD, floor, with_logdet):
  """r^T S^-1 r (+ logdet S) [B, K] of the OAS fit S on centred rows z."""
  fit = gram.Fit(z_BxnxD, valid_BxD.sum(axis=1).astype(np.float64))
  alpha, beta = (v[:, None] for v in fit.params(float(fit.n), fit.trace_B, fit.fro2_B, floor))
  p_r = fit.project(r_BxKxD)
  q = fit.bilinear(p_r, p_r, (r_BxKxD * r_BxKxD).sum(axis=2), alpha, beta)
  return q + fit.logdet(alpha, beta) if with_logdet else q


def _oas_offline(z_BxnxD, r_BxKxD, valid_BxD, floor, shift):
  """The offline GLS z-score [B, K] (without the member sign) under the OAS fit on centred OUT rows z."""
  fit = gram.Fit(z_BxnxD, valid_BxD.sum(axis=1).astype(np.float64))
  alpha, beta = (v[:, None] for v in fit.params(float(fit.n), fit.trace_B, fit.fro2_B, floor))
  p_r = fit.project(r_BxKxD)
  u = valid_BxD[:, None, :].astype(np.float64)
  if shift == "std":
    u = u * np.sqrt(alpha[..., None] + beta[..., None] * (z_BxnxD**2).sum(axis=1)[:, None])
  p_u = fit.project(u)
  u_r = fit.bilinear(p_u, p_r, (u * r_BxKxD).sum(axis=2), alpha, beta)
  u_u = fit.bilinear(p_u, p_u, (u * u).sum(axis=2), alpha, beta)
  return u_r / np.sqrt(u_u)


def fit_score(rows_a_BxAxD, rows_b_BxBxD, x_BxKxD, valid_BxD, scoring, a_is_in=True, global_var=None):
  """Scores [B, K] of K vectors per canary under the Gaussians fitted on the rows of the two classes (numpy).

  The classes come in the caller's order (a, b), IN first when a_is_in; shared fits pool a's rows before b's.
  global_var: LiRA's fixed (var_in, var_out), already floored.
  """
  mean_a, mean_b = rows_a_BxAxD.mean(axis=1), rows_b_BxBxD.mean(axis=1)
  oas = scoring.covariance == "oas" and x_BxKxD.shape[2] > 1
  floor = scoring.var_floor
  if global_var is not None:
    g_in, g_out = (np.where(valid_BxD, g, 1.0) for g in global_var)
    var_a, var_b = (g_in, g_out) if a_is_in else (g_out, g_in)
  if scoring.offline:
    out_rows, out_mean = (rows_b_BxBxD, mean_b) if a_is_in else (rows_a_BxAxD, mean_a)
    r = x_BxKxD - out_mean[:, None]
    if oas:
      return scoring.sign * _oas_offline(out_rows - out_mean[:, None], r, valid_BxD, floor, scoring.offline_shift)
    var = (var_b if a_is_in else var_a) if global_var is not None else _diag_fit(out_rows, valid_BxD, floor)[1]
    return offline_z(r, var[:, None, :], valid_BxD, scoring.sign, scoring.offline_shift, model_axis=1)
  r_a, r_b = x_BxKxD - mean_a[:, None], x_BxKxD - mean_b[:, None]
  z_a, z_b = rows_a_BxAxD - mean_a[:, None], rows_b_BxBxD - mean_b[:, None]
  if scoring.shared and global_var is None:
    pooled = np.concatenate([z_a, z_b], axis=1)
    if oas:
      q_a = _oas_quadratic(pooled, r_a, valid_BxD, floor, with_logdet=False)
      q_b = _oas_quadratic(pooled, r_b, valid_BxD, floor, with_logdet=False)
    else:
      var = np.where(valid_BxD, np.maximum((pooled**2).mean(axis=1), floor), 1.0)[:, None]
      q_a, q_b = (r_a**2 / var).sum(axis=2), (r_b**2 / var).sum(axis=2)  # logdets cancel
  elif oas:
    q_a = _oas_quadratic(z_a, r_a, valid_BxD, floor, with_logdet=True)
    q_b = _oas_quadratic(z_b, r_b, valid_BxD, floor, with_logdet=True)
  else:
    if global_var is None:
      var_a, var_b = _diag_fit(rows_a_BxAxD, valid_BxD, floor)[1], _diag_fit(rows_b_BxBxD, valid_BxD, floor)[1]
    q_a = (r_a**2 / var_a[:, None]).sum(axis=2) + np.log(var_a).sum(axis=1)[:, None]
    q_b = (r_b**2 / var_b[:, None]).sum(axis=2) + np.log(var_b).sum(axis=1)[:, None]
  llr_a_minus_b = -0.5 * (q_a - q_b)
  return llr_a_minus_b if a_is_in else -llr_a_minus_b
