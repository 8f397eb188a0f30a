"""Covariance-error analysis: how far each estimator is from the all-models MLE (Rossi et al. 2025, Figs. 2, 3, 6, 8)."""

import numpy as np

from lira import covariance
from lira import metrics
from lira import transforms
from lira.evaluation import default_shadow_counts  # noqa: F401 (one definition; experiments use it from here)
from lira.checks import check_arrays
from lira.loo import columns
from lira.errors import InputError
from lira.scoring import Scoring

ESTIMATORS = covariance.ESTIMATORS
MODES = ("classwise", "shared")
CLASSES = ("in", "out")
# Canaries per batched step: bounds the [chunk, T, T] temporaries on top of the two gold standards.
_CHUNK = 128


def select_canaries(keep_MxN, mask_NxT=None, max_canaries=1000, seed=0):
  """Sorted indices of the canaries analysed: all-valid under the mask, at most max_canaries drawn with the seed."""
  keep_MxN = np.asarray(keep_MxN, bool)
  valid_N = np.ones(keep_MxN.shape[1], bool)
  if mask_NxT is not None:
    valid_N = np.asarray(mask_NxT, bool).all(axis=1)
    if not valid_N.any():
      raise InputError("no canary has all positions valid under mask_NxT; the covariance-error analysis needs "
                       "full-length canaries (same T for every canary)")
  index = np.flatnonzero(valid_N)
  if max_canaries is not None and index.size > max_canaries:
    index = np.sort(np.random.default_rng(seed).choice(index, size=max_canaries, replace=False))
  return index


def class_scatter(x_SxNxT, in_SxN):
  """Per-class scatter matrices of rows centred by their own class mean: (scatter_in_NxTxT, scatter_out_NxTxT, n_in_N, n_out_N)."""
  in_SxN = np.asarray(in_SxN, bool)
  w_in_SxN, w_out_SxN = in_SxN.astype(np.float64), (~in_SxN).astype(np.float64)
  n_in_N, n_out_N = w_in_SxN.sum(axis=0), w_out_SxN.sum(axis=0)
  # A class with no rows gets mean 0; it has no rows to centre, so the value never matters.
  mean_in_NxT = np.einsum("sn,snt->nt", w_in_SxN, x_SxNxT) / np.maximum(n_in_N, 1)[:, None]
  mean_out_NxT = np.einsum("sn,snt->nt", w_out_SxN, x_SxNxT) / np.maximum(n_out_N, 1)[:, None]
  xc_SxNxT = x_SxNxT - np.where(in_SxN[:, :, None], mean_in_NxT, mean_out_NxT)

  def scatter(w_SxN):
    xw_NxSxT = (xc_SxNxT * w_SxN[:, :, None]).transpose(1, 0, 2)
    return np.matmul(xw_NxSxT.transpose(0, 2, 1), xw_NxSxT)

  return scatter(w_in_SxN), scatter(w_out_SxN), n_in_N, n_out_N


def estimate(scatter_NxTxT, n_N, estimator):
  """Covariance from a scatter matrix and row count with one of lira.covariance's estimators (Sec. 2.4)."""
  n_N = np.maximum(n_N, 1)  # a class with no rows has a zero scatter; its estimate is never used
  return covariance.estimate(scatter_NxTxT / n_N[:, None, None], n_N, estimator)


def _gold(stat_MxNxT, keep_MxN):
  """All-models MLE covariances per class, computed canary chunk by chunk: (gold_in_NxTxT, gold_out_NxTxT)."""
  N, T = stat_MxNxT.shape[1:]
  gold_in, gold_out = np.empty((N, T, T)), np.empty((N, T, T))
  for lo in range(0, N, _CHUNK):
    sl = slice(lo, lo + _CHUNK)
    s_in, s_out, n_in, n_out = class_scatter(stat_MxNxT[:, sl], keep_MxN[:, sl])
    gold_in[sl], gold_out[sl] = s_in / n_in[:, None, None], s_out / n_out[:, None, None]
  return gold_in, gold_out


def subset_errors(stat_SxNxT, keep_SxN, gold_in_NxTxT, gold_out_NxTxT):
  """Frobenius errors of every estimator/mode on one model subset: {(class, estimator, mode): error_N}, NaN where skipped.

  A canary is skipped for a class (NaN, both modes) when the subset has fewer than 2 rows of that class. The shared
  estimate still pools every subset row (a class with one row adds a zero centred row), as the shared attack fit does.
  """
  N = stat_SxNxT.shape[1]
  out = {(c, e, md): np.full(N, np.nan) for c in CLASSES for e in ESTIMATORS for md in MODES}
  for lo in range(0, N, _CHUNK):
    sl = slice(lo, lo + _CHUNK)
    s_in, s_out, n_in, n_out = class_scatter(stat_SxNxT[:, sl], keep_SxN[:, sl])
    fits = {"in": (s_in, n_in, gold_in_NxTxT[sl]), "out": (s_out, n_out, gold_out_NxTxT[sl])}
    for e in ESTIMATORS:
      shared = estimate(s_in + s_out, n_in + n_out, e)
      for c, (scatter, n, gold) in fits.items():
        ok = n >= 2
        classwise = estimate(scatter, n, e)
        out[c, e, "classwise"][sl] = np.where(ok, np.linalg.norm(classwise - gold, axis=(1, 2)), np.nan)
        out[c, e, "shared"][sl] = np.where(ok, np.linalg.norm(shared - gold, axis=(1, 2)), np.nan)
  return out


def canary_errors(loss_MxNxT, keep_MxN, *, shadow_counts, draws=5, statistic=Scoring.statistic, mask_NxT=None,
                  max_canaries=1000, seed=0, progress=None):
  """Per-canary Frobenius error of each estimator/mode vs the all-M-models MLE: {(m, draw, class, estimator, mode): error_N}.

  The arrays of covariance_errors before they are averaged over canaries (NaN where a canary is skipped for a class);
  N is the number of canaries analysed, in select_canaries' order. covariance_errors documents the arguments.
  """
  keep_MxN = np.asarray(keep_MxN, bool)
  M = keep_MxN.shape[0]
  counts = [int(m) for m in shadow_counts]
  bad = [m for m in counts if not 2 <= m <= M]
  if bad:
    raise InputError(f"shadow_counts must lie in [2, M={M}], got {bad}")
  if draws < 1:
    raise InputError(f"draws must be >= 1, got {draws}")
  # The checks of every other command: a bad loss at a scored position anywhere is refused, not skipped.
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT)
  index_N = select_canaries(keep_MxN, mask_NxT, max_canaries, seed)
  keep_MxN = keep_MxN[:, index_N]
  n_in_N = keep_MxN.sum(axis=0)
  if (n_in_N < 2).any() or (M - n_in_N < 2).any():
    raise InputError("every analysed canary needs at least 2 IN and 2 OUT models for the gold standard")
  rng = np.random.default_rng(seed)
  jobs = [(m, d, np.sort(rng.choice(M, size=m, replace=False))) for m in counts for d in range(1 if m == M else draws)]
  # Streamed over canary blocks: the statistic (float64) and the two [B, T, T] gold standards exist for one block
  # at a time, about 64 MiB of T x T matrices (8 MB each at T = 1024), whatever N and however losses are stored.
  T = np.shape(loss_MxNxT)[2]
  step = max(1, min(len(index_N), 2**23 // (T * T)))
  errors = [{} for _ in jobs]
  wrap = progress if progress is not None else (lambda it: it)
  for lo in wrap(range(0, len(index_N), step)):
    cols = index_N[lo:lo + step]
    stat_MxBxT = transforms.to_statistic(columns(loss_MxNxT, cols), statistic)
    gold_in, gold_out = _gold(stat_MxBxT, keep_MxN[:, lo:lo + step])
    for j, (_, _, models) in enumerate(jobs):
      for key, error_B in subset_errors(stat_MxBxT[models], keep_MxN[models, lo:lo + step], gold_in,
                                        gold_out).items():
        errors[j].setdefault(key, []).append(error_B)
    del stat_MxBxT, gold_in, gold_out
  return {(m, d, *key): np.concatenate(parts) for (m, d, _), errs in zip(jobs, errors) for key, parts in errs.items()}


def error_rows(errors):
  """The canary averages of canary_errors' arrays: one dict per (m, draw, class, estimator, mode) with keys m, draw,
  class, estimator, mode, error, n_canaries, n_skipped."""
  rows = []
  for (m, d, c, e, md), error_N in errors.items():
    used = int(np.isfinite(error_N).sum())
    rows.append({"m": m, "draw": d, "class": c, "estimator": e, "mode": md,
                 "error": float(np.nanmean(error_N)) if used else float("nan"),
                 "n_canaries": used, "n_skipped": int(error_N.size - used)})
  return rows


def covariance_errors(loss_MxNxT, keep_MxN, *, shadow_counts, draws=5, statistic=Scoring.statistic, mask_NxT=None,
                      max_canaries=1000, seed=0, progress=None):
  """Canary-averaged Frobenius error of each estimator/mode vs the all-M-models MLE, per m and draw (Figs. 2, 6a).

  The statistic (default logit) is taken in float64. Inputs are checked as leave_one_out checks them
  (lira.checks.check_arrays): a loss that is not finite and >= 0 at a scored position raises InputError naming
  model, canary and position. With a mask, only canaries whose mask is all True are used (InputError if none).
  At most max_canaries canaries (random, with the seed) are analysed, streamed a block at a time (losses may
  be memory-mapped): memory is about 2 x 64 MiB of T x T gold standards, whatever N. For each m, `draws`
  random subsets of m of the M models are
  drawn (m == M has a single subset, so it is drawn once). A canary whose subset has fewer than 2 rows of a
  class is skipped for that class, in both modes, and counted in n_skipped. Shared mode estimates one covariance
  from both classes' rows, each centred by its own class mean, and compares it with each class's gold standard.
  `progress`, if given, wraps the iterable of canary blocks (e.g. tqdm.tqdm). Returns one dict per
  (m, draw, class, estimator, mode) with keys m, draw, class, estimator, mode, error, n_canaries, n_skipped.
  """
  return error_rows(canary_errors(loss_MxNxT, keep_MxN, shadow_counts=shadow_counts, draws=draws, statistic=statistic,
                                  mask_NxT=mask_NxT, max_canaries=max_canaries, seed=seed, progress=progress))


# The orderings Figs. 2 and 3 are read for: (estimator, mode) A against B, error(A) - error(B); below 0, A is closer.
COMPARISONS = tuple([((a, md), (b, md)) for md in MODES
                     for a, b in (("oas", "independent"), ("oas", "univariate"), ("independent", "univariate"))] +
                    [((e, "classwise"), (e, "shared")) for e in ESTIMATORS])


def paired_differences(errors, n_boot=1000, level=0.95, seed=0, weights_BxN=None, draw_weights_BxD=None):
  """Error(A) - error(B) per (m, class) for each of COMPARISONS, with a two-stage bootstrap interval.

  `errors` is canary_errors' output. The point estimate is the mean over draws of the canary-averaged difference
  (the difference of covariance_errors' averages when no canary is skipped). A replicate resamples the canaries
  (the same multinomial counts for every m, class and comparison: lira.metrics.bootstrap_weights) and the draws of m
  (with replacement; m = M has one draw), so the interval carries both the canaries' spread and the model subsets'.
  weights_BxN / draw_weights_BxD, if given, are the replicates' counts (for tests). Returns one dict per
  (m, class, comparison): m, class, a, b ("estimator mode"), difference, ci_low, ci_high, draws, n_canaries.
  """
  if n_boot < 1:
    raise InputError(f"n_boot must be >= 1, got {n_boot}")
  draws_by_m = {}
  for (m, d, *_rest) in errors:
    draws_by_m.setdefault(m, set()).add(d)
  N = len(next(iter(errors.values())))
  w_BxN = metrics.bootstrap_weights(N, n_boot, seed) if weights_BxN is None else np.asarray(weights_BxN)
  rng = np.random.default_rng(seed + 1)
  out = []
  for m in sorted(draws_by_m):
    draws = sorted(draws_by_m[m])
    if draw_weights_BxD is not None and len(draws) > 1:
      wd_BxD = np.asarray(draw_weights_BxD)
    else:
      wd_BxD = rng.multinomial(len(draws), np.full(len(draws), 1.0 / len(draws)), size=len(w_BxN))
    for c in CLASSES:
      for (ea, ma), (eb, mb) in COMPARISONS:
        d_DxN = np.stack([errors[m, d, c, ea, ma] - errors[m, d, c, eb, mb] for d in draws])
        ok_DxN = np.isfinite(d_DxN)
        point = float(np.mean([np.nanmean(row) if row_ok.any() else np.nan for row, row_ok in zip(d_DxN, ok_DxN)]))
        with np.errstate(invalid="ignore", divide="ignore"):
          mean_BxD = (w_BxN @ np.where(ok_DxN, d_DxN, 0.0).T) / (w_BxN @ ok_DxN.T)
          rep_B = np.nansum(mean_BxD * wd_BxD, axis=1) / np.sum(np.where(np.isfinite(mean_BxD), wd_BxD, 0), axis=1)
        low, high = metrics._percentile_ci(rep_B, level)
        out.append({"m": m, "class": c, "a": f"{ea} {ma}", "b": f"{eb} {mb}", "difference": point,
                    "ci_low": float(low), "ci_high": float(high), "draws": len(draws),
                    "n_canaries": int(ok_DxN.any(axis=0).sum())})
  return out


def _mean_std(values):
  v = np.asarray([x for x in values if np.isfinite(x)], np.float64)
  if v.size == 0:
    return float("nan"), float("nan")
  return float(v.mean()), float(v.std())


def aggregate(rows):
  """Mean and standard deviation over draws of the canary-averaged error, per (m, class, estimator, mode)."""
  groups = {}
  for r in rows:
    groups.setdefault((r["m"], r["class"], r["estimator"], r["mode"]), []).append(r)
  out = []
  for (m, c, e, md), rs in sorted(groups.items(), key=lambda kv: _order(*kv[0])):
    mean, std = _mean_std([r["error"] for r in rs])
    out.append({"m": m, "class": c, "estimator": e, "mode": md, "error_mean": mean, "error_std": std,
                "n_canaries_mean": float(np.mean([r["n_canaries"] for r in rs])), "draws": len(rs)})
  return out


def relative_errors(rows):
  """(class-wise - shared) / shared error per (m, class, estimator) (Figs. 3, 6b).

  Computed per draw from the canary-averaged errors (both modes average over the same canaries), then mean and
  standard deviation over draws. Positive means the shared estimate is closer to the gold standard.
  """
  by_key = {(r["m"], r["draw"], r["class"], r["estimator"], r["mode"]): r["error"] for r in rows}
  groups = {}
  for (m, d, c, e, md), err in by_key.items():
    if md == "classwise":
      shared = by_key[m, d, c, e, "shared"]
      groups.setdefault((m, c, e), []).append((err - shared) / shared if shared > 0 else float("nan"))
  out = []
  for (m, c, e), values in sorted(groups.items(), key=lambda kv: _order(*kv[0])):
    mean, std = _mean_std(values)
    out.append({"m": m, "class": c, "estimator": e, "relative_error_mean": mean, "relative_error_std": std,
                "draws": len(values)})
  return out


def _order(m, c, e, md="classwise"):
  return m, CLASSES.index(c), ESTIMATORS.index(e), MODES.index(md)


def gold_covariance(loss_MxNxT, keep_MxN, canary, *, statistic=Scoring.statistic, mask_NxT=None):
  """One canary's all-models MLE covariances (cov_in_TxT, cov_out_TxT), over its valid positions if a mask is given."""
  keep_M = np.asarray(keep_MxN, bool)[:, canary]
  if keep_M.sum() < 1 or (~keep_M).sum() < 1:
    raise InputError(f"canary {canary} needs at least one IN and one OUT model")
  stat_MxT = transforms.to_statistic(np.asarray(loss_MxNxT)[:, canary], statistic)
  if mask_NxT is not None:
    stat_MxT = stat_MxT[:, np.asarray(mask_NxT, bool)[canary]]
  return covariance.mle_covariance(stat_MxT[keep_M])[0], covariance.mle_covariance(stat_MxT[~keep_M])[0]
