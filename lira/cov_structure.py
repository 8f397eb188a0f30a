"""Is a canary's per-position covariance more than its diagonal? A permutation test per canary.

With S models in T positions the sample correlation of independent positions is not 0 (its magnitude is about
sqrt(2 / (pi S)), 0.14 for S = 32), so a heatmap alone cannot tell structure from noise. For each canary the
statistic is the mean absolute off-diagonal sample correlation of its [S, T] matrix (S models of one class);
the null distribution comes from permuting every position's column across the models independently, which keeps
each position's values and destroys the dependence between positions. The p-value counts the permutations whose
statistic reaches the observed one, (1 + #{null >= observed}) / (1 + P), so it is never 0.
Positions constant across the models (no spread) are left out of the correlation.
"""

import numpy as np

from lira import transforms
from lira.errors import InputError


def mean_abs_offdiag_corr(x_SxT):
  """Mean |correlation| over the off-diagonal pairs of the non-constant columns of x_SxT (NaN if fewer than 2)."""
  x_SxT = np.asarray(x_SxT, np.float64)
  xc_SxT = x_SxT - x_SxT.mean(axis=0)
  norm_T = np.sqrt((xc_SxT ** 2).sum(axis=0))
  keep_T = norm_T > 0
  t = int(keep_T.sum())
  if t < 2:
    return float("nan")
  z_SxT = xc_SxT[:, keep_T] / norm_T[keep_T]
  corr_TxT = z_SxT.T @ z_SxT
  return float((np.abs(corr_TxT).sum() - np.abs(np.diag(corr_TxT)).sum()) / (t * (t - 1)))


def permutation_test(x_SxT, num_permutations=199, rng=None):
  """(observed statistic, p-value) of one canary's [S, T] matrix against column-wise permutations."""
  x_SxT = np.asarray(x_SxT, np.float64)
  if x_SxT.ndim != 2 or x_SxT.shape[0] < 3:
    raise InputError(f"need an [S, T] matrix with S >= 3 models, got shape {x_SxT.shape}")
  if num_permutations < 1:
    raise InputError(f"num_permutations must be >= 1, got {num_permutations}")
  rng = np.random.default_rng(rng)
  observed = mean_abs_offdiag_corr(x_SxT)
  S, T = x_SxT.shape
  hits = 0
  for _ in range(num_permutations):
    order_SxT = np.argsort(rng.random((S, T)), axis=0)
    hits += mean_abs_offdiag_corr(np.take_along_axis(x_SxT, order_SxT, axis=0)) >= observed
  return observed, (1 + hits) / (1 + num_permutations)


def canaries_test(stat_MxNxT, keep_MxN, member_class=False, num_permutations=199, seed=0, canaries=None):
  """Per canary (all, or the given indices): the statistic and p-value over the models of one class (OUT default).

  Returns (observed_N, pvalue_N) as float64 arrays in the order of `canaries`.
  """
  stat_MxNxT = np.asarray(stat_MxNxT)
  keep_MxN = np.asarray(keep_MxN, bool)
  if stat_MxNxT.shape[:2] != keep_MxN.shape:
    raise InputError(f"statistics {stat_MxNxT.shape} and keep.npy {keep_MxN.shape} disagree on [M, N]")
  canaries = np.arange(keep_MxN.shape[1]) if canaries is None else np.asarray(canaries)
  rng = np.random.default_rng(seed)
  observed_N, pvalue_N = np.empty(len(canaries)), np.empty(len(canaries))
  for i, n in enumerate(canaries):
    rows_M = keep_MxN[:, n] == member_class
    observed_N[i], pvalue_N[i] = permutation_test(stat_MxNxT[rows_M, n], num_permutations, rng)
  return observed_N, pvalue_N


def summarize(loss_MxNxT, keep_MxN, *, max_canaries=700, max_positions=64, member_class=False, statistic="logit",
              num_permutations=199, seed=0):
  """The test on the first max_canaries canaries and max_positions positions of a run's losses (LiRA's statistic).

  Returns a dict: canaries, positions, models per canary (range), median statistic, shares of canaries with
  p <= 0.01 and p <= 0.05. Example (a run folder's files):
    python -c "import numpy as np; from lira import cov_structure as c; d = 'runs/RUN/';
               print(c.summarize(np.load(d + 'losses.npy', mmap_mode='r'), np.load(d + 'keep.npy')))"
  """
  n, t = min(np.shape(loss_MxNxT)[1], max_canaries), min(np.shape(loss_MxNxT)[2], max_positions)
  keep_MxN = np.asarray(keep_MxN, bool)[:, :n]
  stat_MxNxT = transforms.to_statistic(np.asarray(loss_MxNxT[:, :n, :t]), statistic)
  observed_N, pvalue_N = canaries_test(stat_MxNxT, keep_MxN, member_class, num_permutations, seed)
  models_N = (keep_MxN == member_class).sum(axis=0)
  return {"canaries": int(n), "positions": int(t), "class": "in" if member_class else "out",
          "models_per_canary": [int(models_N.min()), int(models_N.max())],
          "median_statistic": round(float(np.median(observed_N)), 4),
          "share_p_le_0.01": round(float((pvalue_N <= 0.01).mean()), 4),
          "share_p_le_0.05": round(float((pvalue_N <= 0.05).mean()), 4), "num_permutations": int(num_permutations)}
