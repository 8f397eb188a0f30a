"""lira/balanced_padded.py: balanced leave-one-out with a traced IN count equals lira.balanced's static programs for
every count of a run (empty slots padded with zeros, removed rows streamed by loops of traced trip counts), and the
jax backend compiles one program for a run's counts instead of one per count."""

import itertools

import numpy as np
import pytest

import lira
from lira import balanced
from lira import balanced_padded as bp
from lira import loo_device
from lira import loo_jax
from lira.scoring import VARIANTS
from test_loo_jax import assert_backends_equal

M = 40  # downdated counts 14, ..., 26 (|M - 2k| <= 12); 13 and below fit the larger class on its kept rows
COUNTS = (14, 15, 16, 17, 20, 23, 24, 25, 26)


def sorted_rows(k, B, D, seed):
  """(x_BxMxD, first_BxM) of B canaries with k IN models of M, sorted IN-first, and a valid mask with a ragged row."""
  rng = np.random.default_rng(seed)
  keep_MxB = np.stack([rng.permutation(M) < k for _ in range(B)], axis=1)
  x_BxMxD = rng.normal(size=(B, M, D)) + 0.3 * keep_MxB.T[:, :, None]
  order_BxM = np.argsort(~keep_MxB.T, axis=1, kind="stable")
  valid_BxD = np.ones((B, D), bool)
  valid_BxD[0, D // 2:] = False
  return np.take_along_axis(x_BxMxD, order_BxM[:, :, None], axis=1), balanced.first_after(order_BxM, k), valid_BxD


def test_layouts():
  for k in range(1, M):
    assert bp.downdated(k, M) == (14 <= k <= 26)
  with pytest.raises(ValueError, match="no IN count of \\[12, 13\\] of 40 models"):
    bp.layout([12, 13], M)
  lay = bp.layout(COUNTS, M)
  assert lay == bp.layout(list(COUNTS) + [12], M)  # counts that are not downdated have programs of their own
  assert (lay.n_in, lay.n_out) == (26, 26)
  for k in COUNTS:
    for (s_own, s_oth, L), (S_own, S_oth), S in zip(balanced.removal_counts(k, M), (lay.sizes_in, lay.sizes_out),
                                                   lay.unions):
      assert s_own <= S_own and s_oth <= S_oth and s_own + s_oth <= S <= S_own + S_oth
  assert max(sum(balanced.removal_counts(k, M)[0][:2]) for k in COUNTS) == lay.unions[0] == 14  # k = 14: 1 + 13
  # model subsets of one size share a Layout: the range of d = M - 2k widened to powers of two on either side of 0
  assert bp.covered([18, 21], M) == list(range(18, 22)) and bp.covered([17, 20], M) == list(range(16, 21))
  assert bp.covered([21, 23], M) == list(range(20, 25)) and bp.covered([19, 26], M) == list(range(19, 29))
  assert bp.layout([17, 20], M) == bp.layout([16, 19], M) == bp.layout([18, 17], M)
  # one count: its own static program; several: the run's Layout where the count is downdated
  assert bp.program_keys([16], M) == {16: 16}
  keys = bp.program_keys([10, 14, 15, 16, 17, 20], M)
  assert keys[10] == 10 and keys[14] == keys[15] == keys[16] == keys[20] == bp.layout([14, 15, 16, 17, 20], M)
  # each count's removal counts, whose largest over a block are its loops' trip counts
  for k in COUNTS:
    trips = bp.removal_trips(k, M)
    for target_in, (s_own, s_oth, _) in zip((True, False), balanced.removal_counts(k, M)):
      assert trips[target_in] == (s_own, s_oth, s_own + s_oth)


def padded_jitted():
  import jax
  return jax.jit(bp.padded_balanced, static_argnames=("lay", "oas", "shared", "offline", "floor", "offline_shift"))


@pytest.mark.parametrize("D", [6, 30])  # each class's fit in position space (slots >= D) or in Gram space
def test_padded_equals_static_for_every_count(D):
  # The same formulas on padded rows, the removed rows read one at a time: equal up to summation order and eigh of
  # a larger Gram matrix with zero rows; assert_backends_equal's argument bounds both. numpy runs the loops in
  # Python; jax (one compile per variant, k traced) for four counts.
  import jax.numpy as jnp
  from lira.loo_jax import x64_context
  lay = bp.layout(COUNTS, M)
  fn = padded_jitted()
  worst = 0.0
  for k in COUNTS:
    x, first, valid = sorted_rows(k, B=3, D=D, seed=k)
    for oas, shared, offline in itertools.product((False, True), repeat=3):
      if shared and offline:
        continue
      kw = dict(oas=oas, shared=shared, offline=offline, floor=1e-6)
      want = balanced.sorted_balanced(x, k, first, valid, **kw)
      got = bp.padded_balanced(x, np.int32(k), first, valid, lay, **kw)
      assert_backends_equal(want, got)
      worst = max(worst, np.abs(got - want).max())
      if k in (14, 17, 20, 26) and oas:
        with x64_context("float64"):
          traced = np.asarray(fn(jnp.asarray(x), jnp.asarray(k), jnp.asarray(first), jnp.asarray(valid), lay=lay,
                                 **kw))
        assert_backends_equal(want, traced)
  assert worst > 0  # the padded program is a different computation, not the static one


def test_a_block_runs_to_its_largest_removal_counts():
  # per_canary: canaries of several counts in one block, each scored as on its own, the loops running to the
  # block's largest counts (rows beyond a canary's own are the identity's in K and zero elsewhere).
  import jax.numpy as jnp
  from lira.loo_jax import x64_context
  lay = bp.layout(COUNTS, M)
  counts = [20, 14, 26]
  parts = [sorted_rows(k, B=1, D=30, seed=k) for k in counts]
  x, first, valid = (np.concatenate([p[i] for p in parts]) for i in range(3))
  for shared, offline in ((False, False), (True, False), (False, True)):
    kw = dict(oas=True, shared=shared, offline=offline, floor=1e-6)
    with x64_context("float64"):
      got, factors = bp.per_canary(jnp.asarray(x), jnp.asarray(counts), jnp.asarray(first), jnp.asarray(valid),
                                   lay, **kw)
      # the buffer of K's factors serves the next call (its values are never read)
      again, _ = bp.per_canary(jnp.asarray(x), jnp.asarray(counts), jnp.asarray(first), jnp.asarray(valid), lay,
                               factors * jnp.nan, **kw)
      got = np.asarray(got)
      np.testing.assert_array_equal(np.asarray(again), got)
    want = np.concatenate([balanced.sorted_balanced(*p[:1], k, *p[1:], **kw) for p, k in zip(parts, counts)])
    assert_backends_equal(want, got)


def test_first_after_with_a_traced_count():
  # Against a loop: a target's first model of the other class after it is at the position that counts the other
  # class's models with smaller ids; the same under jit with k traced.
  import jax
  import jax.numpy as jnp
  rng = np.random.default_rng(0)
  traced = jax.jit(balanced.first_after)
  for k in (1, 7, 20, 39):
    keep_MxB = np.stack([rng.permutation(M) < k for _ in range(4)], axis=1)
    order_BxM = np.argsort(~keep_MxB.T, axis=1, kind="stable")
    want = np.array([[np.sum(~keep_MxB[:, b] if keep_MxB[m, b] else keep_MxB[:, b], where=np.arange(M) < m)
                      for m in order_BxM[b]] for b in range(4)])
    np.testing.assert_array_equal(balanced.first_after(order_BxM, k), want)
    np.testing.assert_array_equal(np.asarray(traced(jnp.asarray(order_BxM), jnp.asarray(k))), want)
  # one count per canary (a block of the jax backend mixes the counts of a bucket): each canary's row as its own
  counts = np.array([14, 15, 17, 16, 15])
  keep_MxB = np.stack([rng.permutation(M) < k for k in counts], axis=1)
  order_BxM = np.argsort(~keep_MxB.T, axis=1, kind="stable")
  want = np.stack([balanced.first_after(order_BxM[b:b + 1], int(k))[0] for b, k in enumerate(counts)])
  np.testing.assert_array_equal(balanced.first_after(order_BxM, counts), want)
  np.testing.assert_array_equal(np.asarray(traced(jnp.asarray(order_BxM), jnp.asarray(counts))), want)


def unequal_run(counts, T=6, seed=0):
  rng = np.random.default_rng(seed)
  keep_MxN = np.stack([rng.permutation(M) < k for k in counts], axis=1)
  loss_MxNxT = rng.gamma(2.0, 0.5, size=(M, len(counts), T)) * np.where(keep_MxN, 0.8, 1.0)[:, :, None]
  mask_NxT = rng.uniform(size=(len(counts), T)) < 0.8
  mask_NxT[:, :2] = True
  return loss_MxNxT.astype(np.float32), keep_MxN, mask_NxT


@pytest.mark.parametrize("offline", [False, True])
def test_jax_backend_compiles_one_program_for_the_runs_counts(offline):
  # Canaries with 14, 15, 16, 17 and 20 IN models of 40 and one with 12 (a class fitted on its kept rows: a static
  # program of its own): two compiles for six counts, blocks of three that mix counts, scores equal to the numpy
  # backend's.
  assert jax_compiles_equal_to_numpy([14, 15, 16, 17, 12, 20] * 2, offline=offline) == 2


def jax_compiles_equal_to_numpy(counts, **fields):
  """The compiles of the jax pipeline's six (applicable) variants on canaries with these IN counts of M, blocks of
  three; their scores asserted equal to the numpy backend's."""
  loss, keep, mask = unequal_run(counts)
  kept, _ = lira.scoring.applicable_variants(VARIANTS, lira.Scoring(**fields))
  numpy_s = [lira.Scoring(covariance=c, shared=s, **fields) for _, c, s in kept]
  jax_s = [lira.Scoring(covariance=c, shared=s, backend="jax", **fields) for _, c, s in kept]
  before = loo_device.jitted()._cache_size()
  got = lira.leave_one_out_variants(loss, keep, jax_s, mask_NxT=mask, block_size=3)
  compiles = loo_device.jitted()._cache_size() - before
  want = lira.leave_one_out_variants(loss, keep, numpy_s, mask_NxT=mask, block_size=2)
  assert_backends_equal(np.stack(want), np.stack(got))
  return compiles


def test_blocks_hold_one_program_ordered_by_count():
  # One program's canaries in blocks by count (a block's loops run to its largest removal counts); the static count
  # in a block of its own, sized to its two canaries (a multiple of the device count, 2 here), not to the run's
  # block size; every canary once, and no block with canaries of two programs.
  counts = np.array([17, 14, 16, 15, 12] * 2)
  keys = bp.program_keys(sorted(set(counts.tolist())), M)
  programs = list(dict.fromkeys(keys.values()))
  program_L = np.array([programs.index(keys[int(c)]) for c in counts])
  blocks = loo_jax._blocks(program_L, len(counts), 4, ndev=2, count_L=counts)
  ats = [at for at, _ in blocks]
  assert sorted(np.concatenate(ats).tolist()) == list(range(len(counts)))
  assert all(len(set(program_L[at].tolist())) == 1 for at in ats)
  assert sorted(sorted(counts[at].tolist()) for at in ats) == [[12, 12], [14, 14, 15, 15], [16, 16, 17, 17]]
  assert sorted(size for _, size in blocks) == [2, 4, 4]
  # a program with more canaries than the block size: full blocks, the last padded to the same size
  assert [size for _, size in loo_jax._blocks(np.zeros(7, int), 7, 3)] == [3, 3, 3]


def test_cholesky_and_the_removal_inverse_equal_lapack():
  import jax.numpy as jnp
  from lira import woodbury
  from lira.loo_jax import x64_context
  rng = np.random.default_rng(5)
  A = rng.normal(size=(4, 3, 7, 7))
  K = A @ np.swapaxes(A, -1, -2) + 0.1 * np.eye(7)
  b = rng.normal(size=(4, 3, 7))
  with x64_context("float64"):
    F, logdet = woodbury.cholesky(jnp.asarray(K))
    y = woodbury.cholesky_solve(F, jnp.asarray(b))
    # the factor of a symmetric positive definite matrix is unique: LAPACK's to rounding (condition ~1e3 here)
    np.testing.assert_allclose(np.asarray(F), np.linalg.cholesky(K), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(logdet), np.linalg.slogdet(K)[1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(y), np.linalg.solve(K, b[..., None])[..., 0], rtol=1e-9, atol=1e-11)
    for sizes, L in (((3,), 5.0), ((2, 4), 7.0), ((1, 0), 3.0)):
      inv, logdet_C = woodbury.removal_inverse(jnp, jnp.float64, sizes, jnp.asarray(L))
      C = woodbury.removal_matrix(sizes, L)
      np.testing.assert_allclose(np.asarray(inv), np.linalg.inv(C), rtol=1e-13, atol=1e-15)
      np.testing.assert_allclose(float(logdet_C), np.linalg.slogdet(C)[1], rtol=1e-13, atol=1e-15)


def test_memory_estimate_bounds_xla_for_padded_programs():
  # Unequal counts remove more rows per target (lira.balanced_padded.removed_rows); the block size on GPUs and TPUs
  # follows bytes_per_canary with that count, which must not undercount what XLA allocates for the run's program.
  from lira.loo_jax import x64_context
  B, T = 4, 12
  lay = bp.layout([15, 20, 24], M)  # covers 14, ..., 24 (d = -8, ..., 10 widened to -8, ..., 16)
  assert bp.removed_rows(lay, M) == 14 and bp.removed_rows(20, M) == 2 and bp.removed_rows(12, M) == 24
  scorings = [lira.Scoring(covariance=c, shared=s, backend="jax") for _, c, s in VARIANTS]
  spec = loo_device.Spec.of(scorings, masked=True)
  loss, keep, mask = unequal_run([15] * B, T=T)
  with x64_context("float64"):
    analysis = loo_device.jitted().lower(loss, mask, keep, (None,) * len(scorings), spec=spec,
                                         k=lay).compile().memory_analysis()
  used = analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes
  assert used <= B * loo_device.bytes_per_canary(M, T, spec, bp.removed_rows(lay, M))


def test_counts_above_half_remove_no_row_of_the_other_class():
  # IN counts above M / 2 only: no IN target removes an OUT row (that fit's buffers are empty), numpy and jax.
  import jax.numpy as jnp
  from lira.loo_jax import x64_context
  lay = bp.layout([21, 23, 25], M, widen=False)
  assert lay.sizes_in[1] == 0 and lay.sizes_out[0] == 1
  fn = padded_jitted()
  x, first, valid = sorted_rows(23, B=2, D=30, seed=3)
  for shared, offline in ((False, False), (True, False), (False, True)):
    kw = dict(oas=True, shared=shared, offline=offline, floor=1e-6)
    want = balanced.sorted_balanced(x, 23, first, valid, **kw)
    assert_backends_equal(want, bp.padded_balanced(x, np.int32(23), first, valid, lay, **kw))
    with x64_context("float64"):
      got = np.asarray(fn(jnp.asarray(x), jnp.asarray(23), jnp.asarray(first), jnp.asarray(valid), lay=lay, **kw))
    assert_backends_equal(want, got)


@pytest.mark.parametrize("offline", [False, True])
def test_plain_oas_compiles_one_program_for_the_runs_counts(offline):
  # Plain leave-one-out's OAS with a traced count (lira.gram.padded_loo): one compile for seven counts, equal to
  # the numpy backend's static programs.
  assert jax_compiles_equal_to_numpy([14, 15, 16, 17, 12, 20, 25] * 2, offline=offline, balance_counts=False) == 1
  assert bp.program_keys([14, 20], M, balanced=False) == {14: bp.Layout(M, 20, 28, (0, 0), (0, 0)),
                                                         20: bp.Layout(M, 20, 28, (0, 0), (0, 0))}
  assert bp.program_keys([23, 25], M, balanced=False)[23] == bp.Layout(M, 28, 20, (0, 0), (0, 0))
