"""Balanced leave-one-out with the IN count k a traced value: one program for many counts (the jax backend).

lira.balanced.sorted_balanced has shapes that depend on k (each class's rows, each target's removed rows), so a run
with canaries of many IN counts (a model subset of a shadow sweep, a keep matrix drawn per canary) compiles one
program per count. Here every count of a bucket runs in one program of fixed shapes (a `Layout`): the sorted rows
are laid out as n_in IN slots then n_out OUT slots, the slots beyond a canary block's own k and M - k holding rows
of zeros, and each target removes up to S_own rows of its class and S_oth of the other, the slots beyond its
count's s_own and s_oth zeroed. Rows of zeros change nothing: they add nothing to a class mean taken over its real
rows, to a scatter or a Gram matrix (an eigenvalue 0, cut as null space by lira.gram.Fit), to a removed set's sums,
or to a Woodbury form (their rows and columns of H are 0, so the capacitance matrix is block-triangular with an
identity block); the removal count L enters as a traced scalar. The formulas are lira.balanced_removal.removal_scores,
the numpy backend's.

Buckets: d = M - 2k (the count's distance from LiRA's half/half split) with the same sign and |d| in one of
{0}, {1}, {2}, {3, 4}, {5, ..., 8}, ... share a layout, so the padded removal sizes are at most twice a count's own.
Counts where a class would drop more rows than it keeps (lira.balanced fits those kept rows directly) keep their
own static program. A block of the jax backend mixes the counts of a bucket (`per_canary`: the program of one canary,
its count a traced scalar, mapped over the block's canaries), so a run with many counts pads at most one block per
bucket.
"""

import dataclasses

import numpy as np
from array_api_compat import array_namespace

from lira import balanced
from lira import balanced_removal


@dataclasses.dataclass(frozen=True)
class Layout:
  """The fixed shapes of one bucket's program: slots per class and padded removal sizes per target class."""
  M: int
  n_in: int  # IN slots (the bucket's largest k)
  n_out: int  # OUT slots (M minus its smallest k)
  sizes_in: tuple  # (S_own, S_oth) of IN targets
  sizes_out: tuple  # (S_own, S_oth) of OUT targets


def downdated(k, M):
  """Whether count k's scores come from downdates only (no class drops more rows than it keeps), so that it can
  run in a padded program."""
  return 0 < k < M and all(max(s_own, s_oth) <= L for s_own, s_oth, L in balanced.removal_counts(k, M))


def _bucket(k, M):
  """(sign of d, the largest |d| of the bucket) for d = M - 2k."""
  d = M - 2 * k
  return int(np.sign(d)), (1 << (abs(d) - 1).bit_length()) if d else 0


def layout(k, M):
  """The Layout of count k's bucket (it depends on M and the bucket only: every run of M models shares it)."""
  sign, hi = _bucket(k, M)
  ks = [j for j in range(1, M) if _bucket(j, M) == (sign, hi) and downdated(j, M)]
  if k not in ks:
    raise ValueError(f"IN count {k} of {M} models has no padded program (lira.balanced_padded.downdated)")
  counts = [balanced.removal_counts(j, M) for j in ks]
  sizes = [tuple(max(c[t][i] for c in counts) for i in (0, 1)) for t in (0, 1)]
  return Layout(M, max(ks), M - min(ks), sizes[0], sizes[1])


def program_keys(counts, M):
  """{k: its program's static key}: a Layout where the counts are several and k is `downdated`, else k itself."""
  if len(counts) < 2:
    return {k: k for k in counts}
  return {k: layout(k, M) if downdated(k, M) else k for k in counts}


def removed_rows(key, M):
  """The most rows a target removes (or, fitted on its kept rows, gathers: 2L) in the program of `key` (an IN count
  or a Layout): what a block's memory grows with beyond LiRA's half/half split (lira.loo_device.bytes_per_canary)."""
  if isinstance(key, Layout):
    return max(sum(key.sizes_in), sum(key.sizes_out))
  return max(s_own + s_oth if max(s_own, s_oth) <= L else 2 * L for s_own, s_oth, L in balanced.removal_counts(key, M))


def padded_balanced(x_BxMxD, k, first_BxM, valid_BxD, lay, *, oas, shared, offline, floor, offline_shift="std"):
  """lira.balanced.sorted_balanced of canaries whose first k models are IN, k a traced integer scalar of the
  bucket of `lay`: scores [B, M] in the sorted order."""
  xp = array_namespace(x_BxMxD)
  dt = x_BxMxD.dtype
  M = lay.M
  N = lay.n_in + lay.n_out
  slot = np.arange(N)
  in_slot = xp.asarray(slot < lay.n_in)
  kk = xp.asarray(k, dtype=xp.int32)
  n = {True: kk, False: M - kk}
  # sorted row of each slot (IN slots first), and whether the slot holds a row
  pos_N = xp.asarray(np.where(slot < lay.n_in, slot, slot - lay.n_in), dtype=xp.int32)
  real_N = pos_N < xp.where(in_slot, n[True], n[False])
  src_N = xp.where(real_N, xp.where(in_slot, pos_N, kk + pos_N), 0)
  realf_N = xp.astype(real_N, dt)
  x_BxNxD = xp.take(x_BxMxD, src_N, axis=1) * realf_N[:, None]
  first_BxN = xp.take(first_BxM, src_N, axis=1)

  # centred rows (zeros in empty slots), the gap between the class means and each class's diag(W)
  kf = xp.astype(kk, dt)
  mean_in = xp.sum(x_BxNxD[:, :lay.n_in], axis=1) / kf
  mean_out = xp.sum(x_BxNxD[:, lay.n_in:], axis=1) / (M - kf)
  z_BxNxD = (x_BxNxD - xp.where(in_slot[None, :, None], mean_in[:, None], mean_out[:, None])) * realf_N[:, None]
  delta_BxD = mean_in - mean_out
  diag_w = {True: xp.sum(z_BxNxD[:, :lay.n_in] ** 2, axis=1), False: xp.sum(z_BxNxD[:, lay.n_in:] ** 2, axis=1)}

  fitted = balanced_removal.oas_fits(z_BxNxD, lay.n_in, delta_BxD, valid_BxD, shared) if oas else None
  floored = balanced_removal.floor_variance(xp, valid_BxD, floor, False)
  scores = []
  for target_in, (S_own, S_oth) in ((True, lay.sizes_in), (False, lay.sizes_out)):
    n_own, n_oth = n[target_in], n[not target_in]
    L = xp.minimum(n_own - 1, n_oth)
    s_own, s_oth = n_own - L, n_oth - L
    own_at, oth_at = (0, lay.n_in) if target_in else (lay.n_in, 0)
    J = lay.n_in if target_in else lay.n_out
    # the target and the next s_own - 1 of its class (cyclically), then the first s_oth of the other after it
    own_idx = own_at + (xp.asarray(np.arange(J)[:, None] + np.arange(S_own)[None], dtype=xp.int32)) % n_own
    oth_idx = oth_at + (first_BxN[:, own_at:own_at + J, None] + xp.asarray(np.arange(S_oth, dtype=np.int32))) % n_oth
    idx_BxJxS = xp.concat([xp.broadcast_to(own_idx, oth_idx.shape[:2] + (S_own,)), oth_idx], axis=2)
    t_S = xp.asarray(np.concatenate([np.arange(S_own), np.arange(S_oth)]), dtype=xp.int32)
    mask_S = xp.astype(t_S < xp.concat([xp.full((S_own,), s_own), xp.full((S_oth,), s_oth)]), dt)
    scores.append(balanced_removal.removal_scores(
        z_BxNxD, delta_BxD, diag_w, fitted, target_in, idx_BxJxS, (S_own, S_oth), xp.astype(L, dt), mask_S,
        valid_BxD, floored, oas=oas, shared=shared, offline=offline, floor=floor, offline_shift=offline_shift))
  scores_BxN = xp.concat(scores, axis=1)
  # back to the sorted order: sorted row i is IN slot i, or OUT slot i - k
  i_M = xp.asarray(np.arange(M), dtype=xp.int32)
  return xp.take(scores_BxN, xp.where(i_M < kk, i_M, lay.n_in + i_M - kk), axis=1)


def per_canary(x_BxMxD, k_B, first_BxM, valid_BxD, lay, **options):
  """`padded_balanced` of canaries with one IN count each (k_B [B] int, every count of the bucket of `lay`), by
  jax.vmap over the canaries: scores [B, M] in each canary's sorted order. options: padded_balanced's keywords."""
  import jax

  def one(x_MxD, k, first_M, valid_D):
    return padded_balanced(x_MxD[None], k, first_M[None], valid_D[None], lay, **options)[0]
  return jax.vmap(one)(x_BxMxD, k_B, first_BxM, valid_BxD)
