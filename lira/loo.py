"""Leave-one-out sequence-aware LiRA scores (Rossi et al. 2025, Sec. 3.2; docs/conventions.md, "Leave-one-out evaluation").

Every model is the target in turn and every canary's Gaussians are fitted on the other M-1 models.
Nothing is refitted: per canary, the class statistics of all M models are computed once and the
target's contribution is removed in closed form. Removing row x (centred z = x - mean) from a class
of n rows changes the mean by -z/(n-1), the scatter by -n/(n-1) z z^T, and the target's residual to
its own class mean becomes n/(n-1) z. The diagonal estimators use this directly; OAS (covariance
alpha I + beta W) takes one eigendecomposition per canary and class, of the smaller of the Gram matrix
and W, and handles each target's removal by Sherman-Morrison and the matrix determinant lemma, so no
T x T matrix is ever inverted per target (lira/gram.py).
"""

import concurrent.futures
import functools
import os

import numpy as np
import threadpoolctl
from array_api_compat import array_namespace
from tqdm.auto import tqdm

from lira import balanced
from lira import gram
from lira.covariance import ESTIMATORS, VAR_FLOOR
from lira.transforms import STATISTICS, check_losses, check_reduction, member_sign, reduce_length, to_statistic
from lira.errors import InputError

COVARIANCES = ESTIMATORS
OFFLINE_SHIFTS = ("uniform", "std")
BACKENDS = ("numpy", "jax")
PRECISIONS = ("float64", "float32")


def _check_settings(covariance, shared, offline, fix_variance, statistic, offline_shift="std", backend="numpy",
                    precision="float64"):
  if backend not in BACKENDS:
    raise InputError(f"backend must be one of {BACKENDS}, got {backend!r}")
  if precision not in PRECISIONS:
    raise InputError(f"precision must be one of {PRECISIONS}, got {precision!r}")
  if precision != "float64" and backend != "jax":
    raise InputError(f"precision={precision!r} is the jax backend's (for TPUs); the numpy backend runs in float64")
  if offline_shift not in OFFLINE_SHIFTS:
    raise InputError(f"offline_shift must be one of {OFFLINE_SHIFTS}, got {offline_shift!r}")
  if covariance not in COVARIANCES:
    raise InputError(f"covariance must be one of {COVARIANCES}, got {covariance!r}")
  if statistic not in STATISTICS:
    raise InputError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
  if offline and shared:
    raise InputError("offline scoring uses OUT models only, so it cannot use a shared IN/OUT covariance")
  if fix_variance and covariance == "oas":
    raise InputError("fix_variance (LiRA's global variance) applies to univariate and independent, not oas")


def check_arrays(loss_MxNxT, keep_MxN, mask_NxT=None, reduction=None, model_ids=None):
  """Check shapes, the mask, the reduction length and every scored loss; InputError names model, canary, position.

  model_ids name the rows of loss_MxNxT in messages when they are a subset of a run's models.
  """
  if np.ndim(loss_MxNxT) != 3:
    raise InputError(f"losses must be shaped [M, N, T], got {np.shape(loss_MxNxT)}")
  M, N, T = loss_MxNxT.shape
  if np.shape(keep_MxN) != (M, N):
    raise InputError(f"keep must be shaped [M, N] = {(M, N)}, got {np.shape(keep_MxN)}")
  if mask_NxT is not None and np.shape(mask_NxT) != (N, T):
    raise InputError(f"mask must be shaped [N, T] = {(N, T)}, got {np.shape(mask_NxT)}")
  length_N = np.full(N, T) if mask_NxT is None else np.asarray(mask_NxT, bool).sum(axis=1)
  if (length_N == 0).any():
    raise InputError(f"canary {int(np.flatnonzero(length_N == 0)[0])} has no scored position in the mask")
  check_reduction(reduction, length_N)
  check_losses(loss_MxNxT, mask_NxT, model_ids=model_ids)


def _check_counts(keep_MxN, shared, offline, on_undefined, balance_counts=False):
  """Rows left after removing the target: means need 1 per class, variances 2 (shared: 3 in all)."""
  n_in_N = keep_MxN.sum(axis=0)
  n_out_N = keep_MxN.shape[0] - n_in_N
  # Worst case over targets: the target's own class loses one row.
  if balance_counts:  # each class keeps L = min(n_own - 1, n_other) rows; a variance needs 2
    bad_N = np.minimum(np.minimum(n_in_N - 1, n_out_N), np.minimum(n_out_N - 1, n_in_N)) < 2
    need = "at least 3 IN and 3 OUT models (2 per class left after balancing)"
  elif offline:
    bad_N = n_out_N - 1 < 2
    need = "at least 3 OUT models (2 left after removing an OUT target)"
  elif shared:
    bad_N = (n_in_N - 1 < 1) | (n_out_N - 1 < 1) | (n_in_N + n_out_N - 1 < 3)
    need = "at least 2 IN and 2 OUT models"
  else:
    bad_N = (n_in_N - 1 < 2) | (n_out_N - 1 < 2)
    need = "at least 3 IN and 3 OUT models (2 left after removing a target)"
  if bad_N.any() and on_undefined == "raise":
    n = int(np.flatnonzero(bad_N)[0])
    raise InputError(
        f"canary {n} has {n_in_N[n]} IN and {n_out_N[n]} OUT models; leave-one-out needs {need} "
        f"({int(bad_N.sum())} canaries affected)")
  return bad_N


def _features(loss_MxBxT, mask_BxT, covariance, reduction, statistic):
  """Statistic -> reduction -> (univariate: mean) as float64 [M, B, D] with invalid positions zeroed."""
  x_MxBxD, valid_BxD = _position_features(loss_MxBxT, mask_BxT, reduction, statistic)
  return _univariate(x_MxBxD, valid_BxD) if covariance == "univariate" else (x_MxBxD, valid_BxD)


def _position_features(loss_MxBxT, mask_BxT, reduction, statistic):
  """Statistic -> reduction as float64 [M, B, D] with invalid positions zeroed, and valid_BxD."""
  loss_MxBxT = np.asarray(loss_MxBxT)
  valid_BxT = np.ones(loss_MxBxT.shape[1:], bool) if mask_BxT is None else np.asarray(mask_BxT, bool)
  loss_MxBxT = np.where(valid_BxT[None], loss_MxBxT, 1.0)
  x_MxBxD, valid_BxD = reduce_length(to_statistic(loss_MxBxT, statistic), loss_MxBxT, reduction, valid_BxT)
  if valid_BxD is None:
    valid_BxD = np.ones(x_MxBxD.shape[1:], bool)
  return np.where(valid_BxD[None], x_MxBxD, 0.0), valid_BxD


def _univariate(x_MxBxD, valid_BxD):
  """Univariate features: each model's mean over the valid positions, [M, B, 1]."""
  x_MxBx1 = (x_MxBxD.sum(axis=2) / valid_BxD.sum(axis=1))[:, :, None]
  return x_MxBx1, np.ones(x_MxBx1.shape[1:], bool)


def _class_stats(x_MxBxD, keep_MxB, model_axis=0):
  """Per canary: counts, class means, target-centred rows z (by the target's own class), and scatters.

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


def _offline_diag(r_MxBxD, var_MxBxD, valid_BxD, sign, shift, model_axis=0):
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


def _diag_block(x_MxBxD, keep_MxB, valid_BxD, shared, offline, sign, floor, global_var, offline_shift="std",
                model_axis=0):
  """Univariate / independent LOO scores for one block of canaries ([M, B]); few passes over [M, B, D].

  Written against the array API (numpy or jax.numpy; no in-place updates) so both backends run this one copy.
  model_axis=1 takes [B, M, D] rows and [B, M] keep and returns [B, M] (see _class_stats).
  """
  xp = array_namespace(x_MxBxD)
  e = functools.partial(xp.expand_dims, axis=model_axis)  # per-canary [B, ...] -> broadcastable against the rows
  n_in_B, n_out_B, mean_in, mean_out, z = _class_stats(x_MxBxD, keep_MxB, model_axis)
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
    return _offline_diag(r, xp.broadcast_to(var, r.shape), valid_BxD, sign, offline_shift, model_axis)
  q_own = xp.sum(q_own_num / var_own, axis=2)
  q_oth = xp.sum(r_oth * r_oth / var_oth, axis=2)
  return -0.5 * s[:, :, 0] * ((q_own + logdet_own) - (q_oth + logdet_oth))


def _global_scatter(x_MxBxD, keep_MxB, valid_BxD):
  """Block contributions to LiRA's pooled variance: totals and each target's own leave-one-out removal."""
  n_in_B, n_out_B, _, _, z = _class_stats(x_MxBxD, keep_MxB)
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


def _global_variance(totals, shared):
  """Per-target (leave-one-out) pooled variances (var_in_M, var_out_M)."""
  s_in = totals["scatter_in"] - totals["removed_in_M"]
  s_out = totals["scatter_out"] - totals["removed_out_M"]
  c_in = totals["count_in"] - totals["dof_in_M"]
  c_out = totals["count_out"] - totals["dof_out_M"]
  if shared:
    v = (s_in + s_out) / (c_in + c_out)
    return v, v
  return s_in / c_in, s_out / c_out


def _columns(loss_MxNxT, cols):
  """loss_MxNxT[:, cols] for a slice or sorted canary indices, read as a slice when they are contiguous (memmaps)."""
  if isinstance(cols, slice):
    return loss_MxNxT[:, cols]
  cols = np.asarray(cols)
  if len(cols) and cols[-1] - cols[0] + 1 == len(cols):
    return loss_MxNxT[:, int(cols[0]):int(cols[-1]) + 1]
  return loss_MxNxT[:, cols]


def _with_keep(features, keep_MxB):
  """(x_MxBxD, valid_BxD) -> (x_MxBxD, keep_MxB, valid_BxD), balanced_llr's argument order."""
  return features[0], keep_MxB, features[1]


def _block_size(M, D, covariance):
  """Canaries per block, about 128 MiB of float64 temporaries. Cache-sized blocks (2 MiB per [M, B, D] temporary)
  were 1.5-2x faster per block alone but 12-20% slower over a whole M = 484 run (BENCHMARKS.md, M = 484 "on a
  quieter machine")."""
  per_canary = 8 * (12 * M * D + (8 * M * M if covariance == "oas" else 0))
  return int(max(1, min(4096, 128 * 2**20 // per_canary)))


def leave_one_out(loss_MxNxT, keep_MxN, *, covariance, shared, reduction=None, statistic="logit",
                  mask_NxT=None, offline=False, offline_shift="std", fix_variance=False, balance_counts=False,
                  var_floor=VAR_FLOOR, on_undefined="raise", block_size=None, num_threads=None, progress=False,
                  model_ids=None, backend="numpy", precision="float64"):
  """Leave-one-out LiRA log-likelihood ratios llr_MxN (float64, higher = member).

  covariance: "univariate" | "independent" | "oas"; shared: one covariance from IN and OUT rows
  centred by their own means (else class-wise); reduction: None | "group:K" | "min:K" | "max:K";
  statistic: "logit" | "loss". offline: score with the OUT Gaussian alone (one-sided: the
  generalised-least-squares z-score of a shift towards members; T = 1 gives LiRA's offline test), with
  offline_shift "uniform" (the same shift at every position, in statistic units) or "std" (a shift of each
  position's OUT standard deviation: scale-free). fix_variance: LiRA's global variance, one per class (shared: one) pooled over all canaries
  and positions. balance_counts: fit both classes on the same number of models, L = min(n_own - 1, n_other), the
  larger class dropping the models that follow the target in cyclic order (lira/balanced.py; refits per target, so
  slower). Pairs whose fit is undefined (too few models of a class) raise, or give NaN with
  on_undefined="nan". model_ids name the models in messages when loss_MxNxT holds a subset of a run's models.
  backend: "numpy" (threads over canary blocks) or "jax" (the same block scoring jitted, sharded over the local
  devices and split over jax.distributed processes; lira/loo_jax.py), with precision "float64" or "float32" (jax).
  Bad inputs (a loss not finite and >= 0 at a scored position, ...) raise InputError before any scoring.
  loss_MxNxT may be memory-mapped: it is read one block of canaries at a time.
  """
  return leave_one_out_variants(
      loss_MxNxT, keep_MxN, variants=[(covariance, shared)], reduction=reduction, statistic=statistic,
      mask_NxT=mask_NxT, offline=offline, offline_shift=offline_shift, fix_variance=fix_variance,
      balance_counts=balance_counts, var_floor=var_floor, on_undefined=on_undefined, block_size=block_size,
      num_threads=num_threads, progress=progress, model_ids=model_ids, backend=backend, precision=precision)[0]


def leave_one_out_variants(loss_MxNxT, keep_MxN, *, variants, reduction=None, statistic="logit", mask_NxT=None,
                           offline=False, offline_shift="std", fix_variance=False, balance_counts=False,
                           var_floor=VAR_FLOOR, on_undefined="raise", block_size=None, num_threads=None,
                           progress=False, model_ids=None, backend="numpy", precision="float64"):
  """leave_one_out for several (covariance, shared) variants at once: [llr_MxN per variant], the same scores.

  The numpy backend reads and transforms each block of canaries once for all variants (the per-token statistic is
  a large share of the work at M = 484); the jax backend scores the variants one after another.
  """
  variants = [(covariance, bool(shared)) for covariance, shared in variants]
  if not variants:
    raise InputError("variants is empty: give at least one (covariance, shared) pair")
  for covariance, shared in variants:
    _check_settings(covariance, shared, offline, fix_variance, statistic, offline_shift, backend, precision)
  if backend == "jax":
    from lira import loo_jax
    loo_jax.check_available()
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT, reduction, model_ids)
  keep_MxN = np.asarray(keep_MxN, bool)
  M, N, T = loss_MxNxT.shape
  if balance_counts and fix_variance:
    raise InputError("balance_counts refits each target's classes; it does not combine with fix_variance's pooled "
                     "variance")
  undefined_VxN = [_check_counts(keep_MxN, shared, offline, on_undefined, balance_counts) for _, shared in variants]
  sign = member_sign(statistic)
  bs = block_size or min(_block_size(M, T, covariance) for covariance, _ in variants)
  blocks = [slice(i, min(i + bs, N)) for i in range(0, N, bs)]

  def features(blk):  # per-position features, shared by the variants; univariate takes their mean
    mask = None if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
    return _position_features(_columns(loss_MxNxT, blk), mask, reduction, statistic)

  def variant_features(full, covariance):
    return _univariate(*full) if covariance == "univariate" else full

  global_vars = [None] * len(variants)
  if fix_variance:
    totals = [None] * len(variants)
    for blk in tqdm(blocks, desc="pooled variance", disable=not progress, leave=False):
      full = features(blk)
      for v, (covariance, _) in enumerate(variants):
        ok = ~undefined_VxN[v][blk]
        x, valid = variant_features(full, covariance)
        part = _global_scatter(x[:, ok], keep_MxN[:, blk][:, ok], valid[ok])
        totals[v] = part if totals[v] is None else {k: totals[v][k] + part[k] for k in part}
    global_vars = [tuple(np.maximum(g, var_floor) for g in _global_variance(t, shared))
                   for t, (_, shared) in zip(totals, variants)]

  llr_VxMxN = [np.full((M, N), np.nan) for _ in variants]
  if backend == "jax":
    for v, (covariance, shared) in enumerate(variants):
      idx_N = np.flatnonzero(~undefined_VxN[v])
      cov_features = lambda cols, c=covariance: variant_features(features(cols), c)  # noqa: E731
      if not balance_counts:
        llr_VxMxN[v][:, idx_N] = loo_jax.score_canaries(
            cov_features, keep_MxN, idx_N, covariance=covariance, shared=shared, offline=offline, sign=sign,
            floor=var_floor, offline_shift=offline_shift, global_var=global_vars[v],
            block_size=block_size or _block_size(M, T, covariance), precision=precision, progress=progress,
            desc=f"LOO {covariance}{' shared' if shared else ''}")
      else:  # balanced: numpy on the host (per-target refits), this process's share of the canaries
        llr_VxMxN[v][:, idx_N] = loo_jax.host_scores(
            lambda cols, f=cov_features, c=covariance, s=shared: balanced.balanced_llr(
                *_with_keep(f(cols), keep_MxN[:, cols]), covariance=c, shared=s, offline=offline, sign=sign,
                floor=var_floor, offline_shift=offline_shift),
            M, idx_N, bs, num_threads)
    blocks = []

  def score(blk):
    full = features(blk)
    for v, (covariance, shared) in enumerate(variants):
      x_MxBxD, valid_BxD = variant_features(full, covariance)
      ok = ~undefined_VxN[v][blk]
      if ok.all():  # the usual case: no copy of the block per variant
        idx, x, keep, valid = blk, x_MxBxD, keep_MxN[:, blk], valid_BxD
      else:
        idx = np.arange(blk.start, blk.stop)[ok]
        x, keep, valid = x_MxBxD[:, ok], keep_MxN[:, idx], valid_BxD[ok]
      if balance_counts:
        llr_VxMxN[v][:, idx] = balanced.balanced_llr(x, keep, valid, covariance=covariance, shared=shared,
                                                     offline=offline, sign=sign, floor=var_floor,
                                                     offline_shift=offline_shift)
      elif covariance == "oas" and x.shape[2] > 1:
        llr_VxMxN[v][:, idx] = gram.oas_llr(x, keep, valid, shared=shared, offline=offline, sign=sign,
                                            floor=var_floor, offline_shift=offline_shift)
      else:
        llr_VxMxN[v][:, idx] = _diag_block(x, keep, valid, shared, offline, sign, var_floor, global_vars[v],
                                           offline_shift)

  # numpy releases the GIL in its kernels (ufuncs, matmul, eigh), so blocks run in parallel threads.
  workers = max(1, min(num_threads or os.cpu_count() or 1, len(blocks) or 1))
  names = ", ".join(f"{c}{' shared' if s else ''}" for c, s in variants)
  # One BLAS thread per worker: otherwise BLAS's own threads and ours oversubscribe the cores.
  with threadpoolctl.threadpool_limits(1 if workers > 1 else None, user_api="blas"), \
       concurrent.futures.ThreadPoolExecutor(workers) as pool:
    futures = [pool.submit(score, blk) for blk in blocks]
    for f in tqdm(concurrent.futures.as_completed(futures), total=len(blocks), disable=not progress, leave=False,
                  desc=f"LOO {names}"):
      f.result()
  for llr_MxN, undefined_N in zip(llr_VxMxN, undefined_VxN):
    bad = ~np.isfinite(llr_MxN) & ~undefined_N[None]
    if bad.any():
      m, n = (int(i[0]) for i in np.nonzero(bad))
      m = m if model_ids is None else int(np.asarray(model_ids)[m])
      raise FloatingPointError(f"non-finite score for model {m} on canary {n}; please report this with the data")
  return llr_VxMxN
