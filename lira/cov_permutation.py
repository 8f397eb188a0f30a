"""Is a canary's per-position covariance more than its diagonal? A permutation test per canary.

With S models in T positions the sample correlation of independent positions is not 0 (its mean magnitude is
0.14 for S = 32 independent Gaussian pairs: independent_abs_corr), so a heatmap alone cannot tell structure from
noise. For each canary the statistic is the mean absolute off-diagonal sample correlation of its [S, T] matrix
(S models of one class); the null distribution comes from permuting every position's column across the models
independently, which keeps each position's values and destroys the dependence between positions. The p-value counts
the permutations whose statistic reaches the observed one, (1 + #{null >= observed}) / (1 + P), so it is never 0.
Positions constant across the models (no spread) are left out of the correlation.
"""

import numpy as np
from scipy import special
from tqdm.auto import tqdm

from lira import transforms
from lira.errors import InputError
from lira.scoring import Scoring


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
  if np.isnan(observed):  # fewer than 2 positions vary across the models: no correlation to test
    return observed, float("nan")
  S, T = x_SxT.shape
  hits = 0
  for _ in range(num_permutations):
    order_SxT = np.argsort(rng.random((S, T)), axis=0)
    hits += mean_abs_offdiag_corr(np.take_along_axis(x_SxT, order_SxT, axis=0)) >= observed
  return observed, (1 + hits) / (1 + num_permutations)


def canaries_test(stat_MxNxT, keep_MxN, member_class=False, num_permutations=199, seed=0, canaries=None,
                  mask_NxT=None, progress=False):
  """Per canary (all, or the given indices): the statistic and p-value over the models of one class (OUT default).

  mask_NxT (optional): each canary's scored positions; only those enter its test. A canary with fewer than 2
  scored positions gets NaN for both. Returns (observed_N, pvalue_N) as float64 arrays in the order of `canaries`.
  """
  stat_MxNxT = np.asarray(stat_MxNxT)
  keep_MxN = np.asarray(keep_MxN, bool)
  if stat_MxNxT.shape[:2] != keep_MxN.shape:
    raise InputError(f"statistics {stat_MxNxT.shape} and keep.npy {keep_MxN.shape} disagree on [M, N]")
  if mask_NxT is not None and np.shape(mask_NxT) != stat_MxNxT.shape[1:]:
    raise InputError(f"mask {np.shape(mask_NxT)} and statistics {stat_MxNxT.shape} disagree on [N, T]")
  canaries = np.arange(keep_MxN.shape[1]) if canaries is None else np.asarray(canaries)
  rows_per_canary = (keep_MxN[:, canaries] == member_class).sum(axis=0)
  if len(canaries) and rows_per_canary.min() < 3:
    n = int(canaries[np.argmin(rows_per_canary)])
    raise InputError(f"canary {n} has {int(rows_per_canary.min())} {'IN' if member_class else 'OUT'} models; "
                     "the test needs at least 3 per canary")
  rng = np.random.default_rng(seed)
  observed_N, pvalue_N = np.full(len(canaries), np.nan), np.full(len(canaries), np.nan)
  for i, n in enumerate(tqdm(canaries, desc="permutation test", unit="canary", disable=not progress)):
    rows_M = keep_MxN[:, n] == member_class
    x_SxT = np.asarray(stat_MxNxT[rows_M, n], np.float64)
    if mask_NxT is not None:
      x_SxT = x_SxT[:, np.asarray(mask_NxT[n], bool)]
    if x_SxT.shape[1] >= 2:
      observed_N[i], pvalue_N[i] = permutation_test(x_SxT, num_permutations, rng)
  return observed_N, pvalue_N


def independent_abs_corr(num_models):
  """E|r| of the sample correlation of S independent bivariate Gaussian pairs: Gamma((S-1)/2) / (sqrt(pi) Gamma(S/2)).

  r has density proportional to (1 - r^2)^((S-4)/2) on [-1, 1]; 2/pi at S = 3, 0.1445 at S = 32.
  """
  s = float(num_models)
  if s < 3:
    raise InputError(f"the sample correlation needs at least 3 models, got {num_models}")
  return float(np.exp(special.gammaln((s - 1) / 2) - special.gammaln(s / 2)) / np.sqrt(np.pi))


def run_test(loss_MxNxT, keep_MxN, mask_NxT=None, *, max_canaries=None, max_positions=64, member_class=False,
             statistic=Scoring.statistic, num_permutations=199, seed=0, progress=False):
  """The test on the first max_canaries canaries (None: all) and max_positions positions of a run's losses.

  The per-position statistic is LiRA's (logit by default), so the question is whether the Gaussian LiRA fits needs
  off-diagonal terms. Returns (observed_N, pvalue_N, models_N): NaN where a canary has fewer than 2 scored,
  varying positions; models_N counts the canary's models of the tested class.
  """
  N, T = np.shape(loss_MxNxT)[1:]
  n = N if max_canaries is None else min(N, int(max_canaries))
  t = min(T, int(max_positions))
  if n < 1 or t < 2:
    raise InputError(f"need at least 1 canary and 2 positions, got max_canaries={max_canaries}, "
                     f"max_positions={max_positions}")
  keep_MxN = np.asarray(keep_MxN, bool)[:, :n]
  mask_NxT = None if mask_NxT is None else np.asarray(mask_NxT, bool)[:n, :t]
  stat_MxNxT = transforms.to_statistic(np.asarray(loss_MxNxT[:, :n, :t]), statistic)
  observed_N, pvalue_N = canaries_test(stat_MxNxT, keep_MxN, member_class, num_permutations, seed,
                                       mask_NxT=mask_NxT, progress=progress)
  return observed_N, pvalue_N, (keep_MxN == member_class).sum(axis=0)


def summary_of(observed_N, pvalue_N, models_N, *, positions, member_class=False, num_permutations=199):
  """The numbers a report gives: shares of tested canaries with p <= 0.01 / 0.05 (under independence at most
  those levels, up to the permutation grid; None where fewer than 99 / 19 permutations cannot reach the level,
  `smallest_p` says how low a p-value can go) and the median statistic beside its expectation for independent
  Gaussian positions at the median class size S (independent_abs_corr)."""
  tested = ~np.isnan(pvalue_N)
  if not tested.any():
    raise InputError("no canary has 2 or more varying positions to test")
  s = float(np.median(models_N))
  return {"canaries": int(len(pvalue_N)), "tested": int(tested.sum()), "positions": int(positions),
          "class": "in" if member_class else "out",
          "models_per_canary": [int(models_N.min()), int(models_N.max())],
          "median_statistic": round(float(np.median(observed_N[tested])), 4),
          "independent_statistic": round(independent_abs_corr(s), 4),
          "share_p_le_0.01": _share(pvalue_N[tested], 0.01, num_permutations),
          "share_p_le_0.05": _share(pvalue_N[tested], 0.05, num_permutations),
          "num_permutations": int(num_permutations), "smallest_p": 1.0 / (int(num_permutations) + 1)}


def _share(pvalue_N, alpha, num_permutations):
  """Share of p-values <= alpha, or None where alpha is below the smallest attainable p, 1 / (permutations + 1)
  (a share of 0 there would say nothing about the covariance)."""
  if 1.0 / (num_permutations + 1) > alpha * (1 + 1e-9):
    return None
  return round(float((pvalue_N <= alpha).mean()), 4)


def summarize(loss_MxNxT, keep_MxN, *, max_canaries=700, max_positions=64, member_class=False, statistic=Scoring.statistic,
              num_permutations=199, seed=0):
  """run_test and summary_of in one call on arrays (experiments/cov_structure.py does it for a run folder)."""
  observed_N, pvalue_N, models_N = run_test(
      loss_MxNxT, keep_MxN, max_canaries=max_canaries, max_positions=max_positions, member_class=member_class,
      statistic=statistic, num_permutations=num_permutations, seed=seed)
  return summary_of(observed_N, pvalue_N, models_N, positions=min(np.shape(loss_MxNxT)[2], max_positions),
                    member_class=member_class, num_permutations=num_permutations)
