"""The canary bootstrap's replicates with jax.numpy on jax's default device: lira.metrics.bootstrap_ci(backend="jax").

The host sorts the pairs once (lira.metrics.rank_pairs) and turns the integer sums into TPRs and AUCs with the
numpy backend's float64 operations (lira.weighted_roc._finish); the device computes each replicate's exact integer
sums (running negative weights, the AUC's sum over positives, the TPR numerators) in jax's 64-bit mode, entered as a
context. The replicates go in chunks of one fixed size (the last padded with zero weights) and the tie groups' counts
are padded to the number of pairs, so the attack variants of one run (same pairs, other scores) share one compilation.
"""

import functools

import numpy as np

_CHUNK_BYTES = 2**30  # one [replicates, pairs] integer array of a chunk stays under this on the device


def pair_sums(ranked, w_BxN, bound_BxF, dtype):
  """Each replicate's exact AUC sum [B] and TPR numerators [B, F] (lira.weighted_roc._pair_sums' quantities, int64)
  on jax's default device; w_BxN integer weights, bound_BxF the negative-count bounds, dtype the running sums'."""
  n_boot, n_pairs = w_BxN.shape[0], max(1, ranked.score_P.size)
  s_B, num_BxF = np.zeros(n_boot, np.int64), np.zeros(bound_BxF.shape, np.int64)
  chunk = max(1, min(n_boot, _CHUNK_BYTES // (8 * n_pairs)))
  with _x64():
    import jax.numpy as jnp
    # Padding past the last tie group: counts no bound reaches (no search ends there) and positives never read.
    pad = n_pairs + 1 - ranked.nneg_upto_G1.size
    nneg_upto_P1 = np.r_[ranked.nneg_upto_G1, np.full(pad, ranked.canary_neg_Pn.size + 1)]
    npos_upto_P1 = np.r_[ranked.npos_upto_G1, np.zeros(pad, np.int64)]
    pairs = [jnp.asarray(a) for a in (ranked.nneg_upto_G1.size - 1, ranked.canary_neg_Pn, ranked.canary_pos_Pp,
                                      ranked.nneg_before_Pp, ranked.nneg_through_Pp, nneg_upto_P1, npos_upto_P1)]
    for lo in range(0, n_boot, chunk):
      hi = min(n_boot, lo + chunk)
      w_CxN, bound_CxF = np.zeros((chunk, w_BxN.shape[1]), dtype), np.zeros((chunk, bound_BxF.shape[1]), dtype)
      w_CxN[:hi - lo], bound_CxF[:hi - lo] = w_BxN[lo:hi], bound_BxF[lo:hi]
      s_C, num_CxF = _sums()(jnp.asarray(w_CxN), jnp.asarray(bound_CxF), *pairs)
      s_B[lo:hi], num_BxF[lo:hi] = np.asarray(s_C)[:hi - lo], np.asarray(num_CxF)[:hi - lo]
  return s_B, num_BxF


@functools.lru_cache(maxsize=None)
def _sums():
  """The jitted kernel: a chunk's AUC sums [C] and TPR numerators [C, F] (lira.weighted_roc._pair_sums' quantities)."""
  import jax
  import jax.numpy as jnp

  def sums(w_CxN, bound_CxF, last_group, canary_neg_Pn, canary_pos_Pp, before_Pp, through_Pp, nneg_upto_P1,
           npos_upto_P1):
    zero_Cx1 = jnp.zeros((w_CxN.shape[0], 1), w_CxN.dtype)
    cn_CxPn1 = jnp.concatenate([zero_Cx1, jnp.cumsum(w_CxN[:, canary_neg_Pn], axis=1)], axis=1)
    wp_CxPp = w_CxN[:, canary_pos_Pp]
    # AUC: positive weight * (negatives above its tie group + those through its end), summed in int64.
    above_CxPp = cn_CxPn1[:, before_Pp].astype(jnp.int64) + cn_CxPn1[:, through_Pp]
    s_C = jnp.sum(wp_CxPp.astype(jnp.int64) * above_CxPp, axis=1)
    # TPR: running negative counts within the bound, the last tie group they allow, its positives' weight.
    count_CxF = jax.vmap(functools.partial(jnp.searchsorted, side="right"))(cn_CxPn1, bound_CxF)
    group_CxF = jnp.searchsorted(nneg_upto_P1, count_CxF - 1, side="right") - 1
    group_CxF = jnp.where(group_CxF < 0, last_group, group_CxF)  # -1 is the last group, as numpy indexes
    m_CxF = npos_upto_P1[group_CxF]
    # Weight of the first m positives: a masked sum per FPR (a second running sum costs more on CPUs).
    first_Pp = jnp.arange(wp_CxPp.shape[1])
    num_F = [jnp.sum(jnp.where(first_Pp < m_CxF[:, f, None], wp_CxPp, 0), axis=1, dtype=jnp.int64)
             for f in range(m_CxF.shape[1])]
    return s_C, jnp.stack(num_F, axis=1) if num_F else jnp.zeros(m_CxF.shape, jnp.int64)

  return jax.jit(sums)


def _x64():
  """jax's 64-bit mode as a context only (jax.enable_x64; jax.experimental.enable_x64 before 0.7), as lira.loo_jax."""
  import jax
  if hasattr(jax, "enable_x64"):
    return jax.enable_x64(True)
  from jax.experimental import enable_x64  # older jax
  return enable_x64()


def bootstrap_backend(scoring_backend):
  """Where a command's bootstrap runs: on jax's device for --backend=jax when that device is a GPU or TPU; on the
  host otherwise (XLA's CPU running sums are about 15x slower than numpy's, BENCHMARKS.md)."""
  if scoring_backend != "jax":
    return "numpy"
  import jax
  return "numpy" if jax.default_backend() == "cpu" else "jax"
