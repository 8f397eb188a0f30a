"""EM-MIA (Kim et al. 2024, Algorithm 1): membership and prefix scores refined in turn; higher = member.

R[p, x] = ReCaLL score of text x with data point p alone as prefix (all pairs, p = x included, as the official code).
Starting from a baseline membership score f (e.g. Min-K%++), each iteration sets the prefix score
r(p) = AUC of R[p, :] against the pseudo-labels f > median(f) (strict; undefined AUCs count 0, as the official code
sets NaN scores to 0), then f = -r: a good non-member prefix is one whose ReCaLL separates the current guess well,
and a data point that makes a good non-member prefix is itself likely a non-member. The prefix candidates are the
evaluated points, so P = N. `rank="kendall" | "spearman"` scores prefixes by rank correlation with f instead.
"""

import numpy as np

from attacks.recall import conditional_ll
from attacks.rows import mean_ll
from lira.errors import InputError

RANKS = (None, "kendall", "spearman")


def recall_matrix(pair_lp_PxNxT, lp_NxT, score_first=False):
  """R[p, x] = LL(x | p) / LL(x) for every prefix p and text x, [P, N]. EM-MIA's code leaves ln p(t_0 | p) out."""
  pair_lp_PxNxT = np.asarray(pair_lp_PxNxT, dtype=np.float64)
  if pair_lp_PxNxT.ndim != 3 or pair_lp_PxNxT.shape[1] != np.shape(lp_NxT)[0]:
    raise InputError(f"pair_lp: expected [P, N, T] with N = {np.shape(lp_NxT)[0]}, got {list(pair_lp_PxNxT.shape)}")
  ll_N = mean_ll("lp", lp_NxT)
  return np.stack([conditional_ll(pair, score_first, "pair_lp") for pair in pair_lp_PxNxT]) / ll_N


def prefix_scores(recall_PxN, f_N, rank=None):
  """r(p): AUC of R[p, :] against f > median(f), or the rank correlation of R[p, :] with f."""
  # imported here, not at the top: scipy.stats and sklearn (~1 s) would slow the import of every attack and command
  import scipy.stats
  from sklearn.metrics import roc_auc_score
  if rank is None:
    labels_N = f_N > np.median(f_N)
    if labels_N.all() or not labels_N.any():
      return np.zeros(len(recall_PxN))
    return np.array([roc_auc_score(labels_N, row) if np.isfinite(row).all() else 0.0 for row in recall_PxN])
  measure = {"kendall": scipy.stats.kendalltau, "spearman": scipy.stats.spearmanr}[rank]
  scores = np.array([measure(row, f_N)[0] for row in recall_PxN], dtype=np.float64)
  return np.nan_to_num(scores, nan=0.0)


def em_mia(pair_lp_PxNxT, lp_NxT, init_N, iterations=10, rank=None, score_first=False):
  """(membership_N, prefix_P) after `iterations` rounds of Algorithm 1, from the baseline scores init_N."""
  if rank not in RANKS:
    raise InputError(f"rank must be one of {RANKS}, got {rank!r}")
  if iterations < 1:
    raise InputError(f"iterations must be >= 1, got {iterations}")
  recall_PxN = recall_matrix(pair_lp_PxNxT, lp_NxT, score_first)
  P, N = recall_PxN.shape
  if P != N:
    raise InputError(f"EM-MIA scores membership as minus the prefix score, so the prefixes must be the evaluated "
                     f"points themselves (P = N); got P = {P}, N = {N}")
  f_N = np.asarray(init_N, dtype=np.float64)
  if f_N.shape != (N,) or not np.isfinite(f_N).all():
    raise InputError(f"init: expected {N} finite baseline scores, got shape {list(f_N.shape)}")
  for _ in range(iterations):
    r_P = prefix_scores(recall_PxN, f_N, rank)
    f_N = -r_P
  return f_N, r_P
