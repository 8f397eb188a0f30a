"""The canaries behind a variant's highest-scoring non-member pairs: its first false positives as the threshold falls.

A leave-one-out run scores every (model, canary) pair; a canary's OUT models give its non-member pairs. TPR at a low
FPR is set by the few highest-scoring non-member pairs, so when a handful of canaries hold most of them the TPR there
says more about those canaries than about the variant (experiments/false_positives.py reports them).
"""

import math

import numpy as np


def top_count(n_nonmember, fpr):
  """How many non-member pairs lie above the threshold of a target FPR: floor(fpr x n), at least 1."""
  return max(1, math.floor(float(fpr) * n_nonmember + 1e-9))


def top_nonmember_pairs(score_MxN, keep_MxN, top=None, fpr=None):
  """The `top` highest-scoring non-member pairs (NaN scores left out; without `top`, those above `fpr`'s threshold,
  top_count) and the canaries that hold them.

  Ties are ranked by canary, then model, so the result does not depend on the sort. Returns a dict:
  canary_K, model_K, score_K: the pairs in score order (highest first); n_nonmember: the scored non-member pairs;
  canaries, pairs, out_models: per canary among them, by number of pairs held (then by index), with the canary's
  scored non-member pairs in all.
  """
  score_MxN = np.asarray(score_MxN, dtype=np.float64)
  keep_MxN = np.asarray(keep_MxN, dtype=bool)
  if score_MxN.shape != keep_MxN.shape or score_MxN.ndim != 2:
    raise ValueError(f"scores {score_MxN.shape} and keep {keep_MxN.shape} must both be [M, N]")
  negative_MxN = ~keep_MxN & np.isfinite(score_MxN)
  model_P, canary_P = np.nonzero(negative_MxN)
  score_P = score_MxN[model_P, canary_P]
  if (top is None) == (fpr is None):
    raise ValueError("give exactly one of top and fpr")
  top = top_count(score_P.size, fpr) if top is None else int(top)
  order = np.lexsort((model_P, canary_P, -score_P))[:top]
  canary_K, model_K = canary_P[order], model_P[order]
  held = np.bincount(canary_K, minlength=score_MxN.shape[1])
  canaries = np.lexsort((np.arange(held.size), -held))[:np.count_nonzero(held)]
  return {"canary_K": canary_K, "model_K": model_K, "score_K": score_P[order], "n_nonmember": int(score_P.size),
          "canaries": canaries, "pairs": held[canaries], "out_models": negative_MxN.sum(axis=0)[canaries]}
