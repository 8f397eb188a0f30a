"""Balanced leave-one-out: both classes fitted on the same number of shadow models (docs/conventions.md).

Plain leave-one-out fits the target's own class on one model fewer than the other, which biases scores towards
"non-member" when models are few. Here, for target m on canary n, each class keeps L = min(n_own - 1, n_other)
models: m itself is removed, and the class with more models left drops the ones that follow m in cyclic model
order (m + 1, m + 2, ... mod M), so the choice is reproducible, needs no seed, and spreads the dropped models evenly.
The fits are refitted per target on the kept rows (lira.gaussian.fit_score: a batched refit over canaries, in the
Gram space for OAS), since the kept rows change with the target.
"""

import numpy as np

from lira import gaussian


def kept_rows(keep_MxB, m):
  """For target m: (own_BxL, other_BxL) model ids each class keeps, per canary, L = min(n_own - 1, n_other).

  Canaries of one call must share L (callers group them by IN count and the target's class).
  """
  M = keep_MxB.shape[0]
  seq = (m + 1 + np.arange(M - 1)) % M  # cyclic order after m
  same_SxB = keep_MxB[seq] == keep_MxB[m][None]
  n_own_B = same_SxB.sum(axis=0)  # own class without m
  n_oth_B = (M - 1) - n_own_B
  if np.unique(n_own_B).size > 1:
    raise ValueError("kept_rows needs canaries with the same class counts")
  n_own, n_oth = int(n_own_B[0]), int(n_oth_B[0])
  L = min(n_own, n_oth)
  pos_SxB = np.argsort(~same_SxB, axis=0, kind="stable")  # own positions first, each in cyclic order
  own = seq[pos_SxB[n_own - L:n_own]].T  # the last L of the own class in cyclic order
  oth = seq[pos_SxB[n_own + n_oth - L:]].T  # the last L of the other class
  return own, oth


def _gather(x_MxBxD, rows_BxL):
  return np.take_along_axis(np.moveaxis(x_MxBxD, 0, 1), rows_BxL[:, :, None], axis=1)  # [B, L, D]


def balanced_llr(x_MxBxD, keep_MxB, valid_BxD, scoring):
  """Balanced leave-one-out scores [M, B] of a block of canaries (features as lira.gaussian.features computes them)."""
  M, B, _ = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  n_in_B = keep_MxB.sum(axis=0)
  for m in range(M):
    for k in np.unique(n_in_B):
      for is_in in (True, False):
        cols = np.flatnonzero((n_in_B == k) & (keep_MxB[m] == is_in))
        if cols.size == 0:
          continue
        own, oth = kept_rows(keep_MxB[:, cols], m)
        x = x_MxBxD[:, cols]
        out_MxB[m, cols] = gaussian.fit_score(_gather(x, own), _gather(x, oth), x[m][:, None], valid_BxD[cols],
                                              scoring, a_is_in=is_in)[:, 0]
  return out_MxB
