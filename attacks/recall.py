"""ReCaLL (Xie et al. 2024) and Con-ReCall (Wang et al. 2024) on stored per-token log-probabilities; higher = member.

cond_lp is the text's lp with a prefix P of known non-members (or members) prepended; P's own tokens are not in it.
Its position 0 holds ln p(t_0 | P), which the official ReCaLL and Con-ReCall code include in LL(x | P) (so the
numerator averages T tokens, the denominator T - 1): score_first=True, the default, follows that; with
score_first=False position 0 is left out as EM-MIA's code does.
"""

import numpy as np

from attacks.rows import as_rows, mean_ll, same_rows
from lira.errors import InputError


def conditional_ll(cond_lp_NxT, score_first=True, name="cond_lp"):
  """LL(x | P): mean of the conditional lp, with or without ln p(t_0 | P) at position 0."""
  cond_lp_NxT = as_rows(name, cond_lp_NxT, np.ndim(cond_lp_NxT))
  if not score_first:
    cond_lp_NxT = cond_lp_NxT.copy()
    cond_lp_NxT[..., 0] = np.nan
  return mean_ll(name, cond_lp_NxT)


def recall(lp_NxT, cond_lp_NxT, score_first=True):
  """ReCaLL: LL(x | P) / LL(x) (the official orientation: members score higher)."""
  same_rows("cond_lp", cond_lp_NxT, lp_NxT)
  return conditional_ll(cond_lp_NxT, score_first) / mean_ll("lp", lp_NxT)


def con_recall(lp_NxT, nonmember_cond_lp_NxT, member_cond_lp_NxT, gamma, score_first=True):
  """Con-ReCall: (LL(x | P_nonmember) - gamma LL(x | P_member)) / LL(x). The paper tunes gamma on the evaluated set
  (its code's grid: 0.1, 0.2, 0.3, 0.5, ..., 1.0); a gamma chosen so must be reported as such."""
  for name, array in (("nonmember_cond_lp", nonmember_cond_lp_NxT), ("member_cond_lp", member_cond_lp_NxT)):
    same_rows(name, array, lp_NxT)
  numerator_N = (conditional_ll(nonmember_cond_lp_NxT, score_first, "nonmember_cond_lp")
                 - gamma * conditional_ll(member_cond_lp_NxT, score_first, "member_cond_lp"))
  return numerator_N / mean_ll("lp", lp_NxT)


def recall_ensemble(lp_NxT, cond_lp_GxNxT, score_first=True):
  """ReCaLL's ensemble over g disjoint prefixes: mean over g of LL(x | P_g), divided by LL(x)."""
  cond_lp_GxNxT = np.asarray(cond_lp_GxNxT, dtype=np.float64)
  if cond_lp_GxNxT.ndim != 3 or cond_lp_GxNxT.shape[1] != np.shape(lp_NxT)[0]:
    raise InputError(f"cond_lp: expected [G, N, T] with N = {np.shape(lp_NxT)[0]}, got {list(cond_lp_GxNxT.shape)}")
  ll_GxN = np.stack([conditional_ll(c, score_first) for c in cond_lp_GxNxT])
  return ll_GxN.mean(axis=0) / mean_ll("lp", lp_NxT)


def recall_shots(lp_NxT, cond_lp_SxNxT, score_first=True):
  """The shot-count sweep: ReCaLL with 1, 2, ..., S non-member shots, cond_lp_SxNxT[s] under the first s + 1 shots;
  returns scores [S, N]. A shot count picked by its AUC is tuned on the evaluated set and must be reported so."""
  cond_lp_SxNxT = np.asarray(cond_lp_SxNxT, dtype=np.float64)
  if cond_lp_SxNxT.ndim != 3:
    raise InputError(f"cond_lp: expected [S, N, T], got {list(cond_lp_SxNxT.shape)}")
  return np.stack([recall(lp_NxT, c, score_first) for c in cond_lp_SxNxT])
