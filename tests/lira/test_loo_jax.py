"""The jax backend of leave_one_out against the numpy backend: same scores, same errors, x64 confined, float32
within its bound (sharded and multi-process runs: tests/e2e/test_jax_backend_processes.py)."""

import jax
import numpy as np
import pytest

import lira
from lira import synthetic
from lira.errors import InputError
from test_loo import make_losses

VARIANTS = [(c, s) for c in ("univariate", "independent", "oas") for s in (False, True)]



def plain_loo(loss, keep, scoring=None, **kw):
  """lira.leave_one_out with plain (unbalanced) leave-one-out unless the test asks for balanced counts."""
  return lira.leave_one_out(loss, keep, scoring, **({**kw} if scoring is not None else {"balance_counts": False, **kw}))


def ragged(M=12, N=9, T=9, seed=0):
  """Losses with a ragged mask (2 to 9 scored positions) and canaries of different IN counts (5, 6 or 7 of 12)."""
  loss, keep = make_losses(M=M, N=N, T=T, seed=seed)
  keep[0, :3] = ~keep[0, :3]  # three canaries move one model to the other class
  rng = np.random.default_rng(seed)
  mask = rng.uniform(size=(N, T)) < 0.7
  mask[:, :4] = True  # every canary keeps >= 4 scored positions, so min:4 / group:4 / max:4 apply
  mask[1, 4:] = False
  return loss, keep, mask


def assert_backends_equal(numpy_llr, jax_llr, spread=None):
  # Both backends evaluate the same float64 formulas; they differ in summation order (XLA's reductions against
  # numpy's pairwise sums) and eigh routine (XLA's against LAPACK's), a few ulps (1e-16) each on the terms of the
  # llr. The llr is a difference of quadratic forms and log-determinants, so errors scale with those terms (bounded
  # by max(1, max |llr|) here), and eigenvectors amplify them by at most 1 / (relative eigengap), about 1e3 for
  # random rows of these shapes: 1e-10 leaves a margin of 1e2 over that.
  # spread: where a canary's fit is ill-conditioned (a balanced downdate that leaves a class nearly singular), how far
  # numpy's own scores move when its inputs move by one ulp (`rounding_spread`); the two backends' roundings are a
  # few ulps of the same intermediate quantities, so they may differ by a few times that (10x).
  scale = max(1.0, np.abs(numpy_llr[np.isfinite(numpy_llr)]).max())
  if spread is None:
    np.testing.assert_allclose(jax_llr, numpy_llr, rtol=1e-10, atol=1e-10 * scale)
    return
  np.testing.assert_array_equal(np.isfinite(jax_llr), np.isfinite(numpy_llr))
  fin = np.isfinite(numpy_llr)
  excess = np.abs(jax_llr - numpy_llr)[fin] - (1e-10 * np.abs(numpy_llr) + 1e-10 * scale + 10.0 * spread)[fin]
  assert excess.max() <= 0, f"backends differ beyond the bound by up to {excess.max():.3g}"


def rounding_spread(score, loss, draws=3, seed=0):
  """The largest move of score(loss) [..] over `draws` copies of the losses (as float64) each moved by at most one
  ulp, elementwise: the float64 formula's own sensitivity to rounding, per score."""
  rng = np.random.default_rng(seed)
  loss = np.asarray(loss, np.float64)
  base = score(loss)
  moved = [score(loss * (1.0 + np.finfo(np.float64).eps * rng.integers(-1, 2, size=loss.shape)))
           for _ in range(draws)]
  return np.max([np.abs(m - base) for m in moved], axis=0)


def both(loss, keep, **kw):
  return (plain_loo(loss, keep, balance_counts=False, **kw),
          plain_loo(loss, keep, balance_counts=False, backend="jax", **kw))


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("reduction", [None, "group:4", "min:4", "max:4"])  # one K: one compile for the three
def test_jax_equals_numpy(covariance, shared, reduction):
  loss, keep, mask = ragged()
  assert_backends_equal(*both(loss, keep, covariance=covariance, shared=shared, reduction=reduction, mask_NxT=mask,
                              block_size=4))


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
@pytest.mark.parametrize("shift", ["std", "uniform"])
def test_offline_jax_equals_numpy(covariance, shift):
  loss, keep, mask = ragged(seed=1)
  assert_backends_equal(*both(loss, keep, covariance=covariance, shared=False, offline=True, offline_shift=shift,
                              mask_NxT=mask, statistic="loss", block_size=4))


@pytest.mark.parametrize("covariance,shared", VARIANTS)
def test_balanced_jax_equals_numpy(covariance, shared):
  # Balanced leave-one-out runs its closed form on the device too; ragged() has canaries with 5, 6 and 7 IN models
  # of 12 (unequal counts drop more rows from the larger class). numpy's balanced scores equal a brute-force refit
  # (test_loo.py), so this ties the device to the reference.
  # Canary 1 has 4 scored positions and 7 OUT models: an OUT target's class-wise OAS fit keeps 5 of them, a scatter
  # whose smallest eigenvalue is 4e-6 of its largest for one target, and numpy's own score there moves by ~1e-8 when
  # the losses move by an ulp (the downdate's cancellation), so the bound takes that spread in.
  loss, keep, mask = ragged(seed=4)
  kw = dict(covariance=covariance, shared=shared, mask_NxT=mask, balance_counts=True, block_size=4)
  spread = rounding_spread(lambda loss: plain_loo(loss, keep, **kw), loss)
  assert_backends_equal(plain_loo(loss, keep, **kw), plain_loo(loss, keep, backend="jax", **kw), spread)


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
def test_balanced_offline_jax_equals_numpy(covariance):
  loss, keep, mask = ragged(seed=5)
  for shift in ("std", "uniform"):
    kw = dict(covariance=covariance, shared=False, offline=True, offline_shift=shift, mask_NxT=mask,
              statistic="loss", balance_counts=True, block_size=4)
    assert_backends_equal(plain_loo(loss, keep, **kw), plain_loo(loss, keep, backend="jax", **kw))


@pytest.mark.parametrize("covariance,shared", [(c, s) for c, s in VARIANTS if c != "oas"])
def test_fix_variance_jax_equals_numpy(covariance, shared):
  loss, keep, mask = ragged(seed=2)
  assert_backends_equal(*both(loss, keep, covariance=covariance, shared=shared, fix_variance=True, mask_NxT=mask,
                              block_size=4))


def test_undefined_canaries_stay_nan():
  loss, keep = make_losses(M=8, N=5, T=6, seed=4)
  keep[:, 2] = np.arange(8) < 2  # canary 2 has 2 IN models: undefined after removing an IN target
  a, b = both(loss, keep, covariance="oas", shared=False, on_undefined="nan")
  assert np.isnan(a[:, 2]).all() and np.isnan(b[:, 2]).all()
  assert_backends_equal(np.delete(a, 2, axis=1), np.delete(b, 2, axis=1))


@pytest.mark.parametrize("covariance,shared", [("oas", True), ("univariate", False)])
def test_every_canary_undefined_gives_nan_on_both_backends(covariance, shared):
  # A small model subset (shadow_sweep at m = 4) can leave no canary with 3 IN and 3 OUT models.
  # Balanced leave-one-out needs 3 IN and 3 OUT models per canary; every canary here has 2 of each.
  loss, keep = make_losses(M=4, N=5, T=6, seed=5)
  assert (keep.sum(axis=0) == 2).all()
  kw = dict(covariance=covariance, shared=shared, balance_counts=True, on_undefined="nan")
  a, b = lira.leave_one_out(loss, keep, **kw), lira.leave_one_out(loss, keep, backend="jax", **kw)
  assert np.isnan(a).all() and np.isnan(b).all()


def _message(fn):
  with pytest.raises(InputError) as e:
    fn()
  return str(e.value)


@pytest.mark.parametrize("bad", ["nan_loss", "reduction", "counts", "shared_offline", "shape"])
def test_errors_are_the_same(bad):
  loss, keep = make_losses(M=8, N=4, T=6, seed=6)
  kw = {"covariance": "oas", "shared": False}
  if bad == "nan_loss":
    loss[3, 1, 2] = np.nan
  elif bad == "reduction":
    kw["reduction"] = "min:9"
  elif bad == "counts":
    keep[:, 0] = np.arange(8) < 1
  elif bad == "shared_offline":
    kw.update(shared=True, offline=True)
  elif bad == "shape":
    keep = keep[:, :3]
  messages = {_message(lambda: plain_loo(loss, keep, backend=b, **kw)) for b in ("numpy", "jax")}
  assert len(messages) == 1


def test_backend_and_precision_are_checked():
  loss, keep = make_losses(M=8, N=4, T=6)
  assert "backend" in _message(lambda: plain_loo(loss, keep, covariance="oas", shared=True, backend="torch"))
  assert "precision" in _message(lambda: plain_loo(loss, keep, covariance="oas", shared=True,
                                                            backend="numpy", precision="float32"))


def test_x64_does_not_leak():
  loss, keep = make_losses(M=8, N=4, T=6)
  before = jax.config.jax_enable_x64
  plain_loo(loss, keep, covariance="oas", shared=True, backend="jax")
  assert jax.config.jax_enable_x64 == before
  assert jax.numpy.zeros(1).dtype == (np.float64 if before else np.float32)


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("balance_counts", [False, True])
def test_float32_within_its_error(covariance, shared, balance_counts):
  loss, keep, mask = ragged(M=16, N=12, T=9, seed=7)
  ref = plain_loo(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask, balance_counts=balance_counts)
  f32 = plain_loo(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask, balance_counts=balance_counts,
                  backend="jax", precision="float32")
  # float32 rounds the features and every sum to eps = 1.2e-7 relative. The leave-one-out downdates subtract a
  # target's share from its class's scatter (W - c z z^T), cancelling up to a factor n = 8 here, and the llr is a
  # difference of two log-densities each about max |llr| + D log(var) in size: 1e-7 x 8 x a few terms x an
  # eigengap amplification of 1e2 stays below 1e-4 of max(1, max |llr|).
  np.testing.assert_allclose(f32, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("covariance,shared,offline", [(c, s, False) for c, s in VARIANTS] +
                         [("independent", False, True), ("oas", False, True)])
def test_float32_balanced_with_very_unequal_counts(covariance, shared, offline):
  # Canaries with 3 to 13 IN models of 16: the larger class drops up to 10 rows and keeps 2. Such classes are fitted
  # on their kept rows directly (a downdate removing 10 rows of 12 cancelled to 0.2 relative error in float32).
  # The counts are the cases of lira.balanced.removal_counts, each both ways round (k and M - k), two canaries each
  # (the downdated ones in the run's traced-count program, the others in static programs of their own): the most unequal (3: 10 rows of 12 dropped, fitted directly), the
  # last fitted directly (5) and the first downdated, with its largest cancellation (6: as many rows removed as kept).
  M, counts = 16, [3, 5, 6, 10, 11, 13] * 2
  loss, _ = make_losses(M=M, N=len(counts), T=9, seed=3)
  rng = np.random.default_rng(3)
  keep = np.stack([rng.permutation(M) < k for k in counts], axis=1)
  kw = dict(covariance=covariance, shared=shared, offline=offline, balance_counts=True)
  ref = plain_loo(loss, keep, **kw)
  f32 = plain_loo(loss, keep, backend="jax", precision="float32", **kw)
  # The same bound as test_float32_within_its_error: eps = 1.2e-7 times a cancellation of at most 2 (a class never
  # removes more rows than it keeps by downdating), a few terms and an eigengap factor of 1e2: 1e-4 of max(1, |llr|).
  np.testing.assert_allclose(f32, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("balance_counts", [False, True])
def test_float32_within_its_error_at_paper_shape(covariance, shared, balance_counts):
  # The paper's shape, M = 64 models and T = 128 correlated positions (lira.synthetic), with N = 64 canaries.
  loss, keep, _ = synthetic.synthetic_losses(num_models=64, num_canaries=64, seq_len=128, seed=3)
  ref = plain_loo(loss, keep, covariance=covariance, shared=shared, balance_counts=balance_counts)
  f32 = plain_loo(loss, keep, covariance=covariance, shared=shared, balance_counts=balance_counts, backend="jax",
                  precision="float32")
  # The float32 bound of docs/statistics.md, per pair: |llr32 - llr64| <= 2e-3 max(1, |llr64|). The llr is a
  # difference of two quadratic forms (and log-determinants) of D = 128 positions, each term about 1 for whitened
  # residuals, so each form is about D in size whatever the llr; float32 rounds every term to eps = 1.2e-7
  # relative, and the leave-one-out downdate (W - c z z^T) cancels up to a factor n = 32 (a class's rows):
  # eps x n x D = 5e-4 of max(1, |llr|), and 2e-3 leaves a factor 4 for the two forms and the OAS eigenbasis.
  # Balanced counts downdate both classes by one row each (the same cancellation, once more per class).
  err = np.abs(f32 - ref) / np.maximum(1.0, np.abs(ref))
  assert err.max() <= 2e-3, err.max()


@pytest.mark.parametrize("balance_counts", [False, True])
@pytest.mark.parametrize("block_size", [2, 4])
def test_counts_compiled_up_front_equal_compiled_on_demand(balance_counts, block_size):
  # A device with several IN counts compiles every count's block at once in host threads (on GPUs and TPUs by
  # default); forced here on the CPU, the scores are those of the blocks compiled one by one, bit for bit. With 4
  # canaries per block the two programs' blocks differ in size (6 and 3 canaries of counts 6 and 7: 4 and 3).
  from lira import loo_jax
  loss, keep, mask = ragged()
  scorings = [lira.Scoring(covariance=c, shared=s, balance_counts=balance_counts, backend="jax")
              for c, s in (("oas", False), ("independent", True))]
  idx = np.arange(loss.shape[1])
  kw = dict(global_vars=[None, None], block_size=block_size)
  ahead = loo_jax.score_variants(loss, mask, keep, idx, scorings, precompile=True, **kw)
  lazy = loo_jax.score_variants(loss, mask, keep, idx, scorings, precompile=False, **kw)
  assert len({int(c) for c in keep.sum(axis=0)}) > 1
  for a, b in zip(ahead, lazy):
    np.testing.assert_array_equal(a, b)


def test_jax_on_cpus_scores_with_numpy(monkeypatch):
  # Where jax's devices are CPUs, backend="jax" in float64 scores with the numpy backend (its kernels are the faster
  # there): the numpy scores bit for bit, the device pipeline never entered. float32 keeps the device pipeline.
  from lira import loo_jax
  monkeypatch.delenv(loo_jax.PIPELINE_ON_CPU_ENV, raising=False)
  assert all(d.platform == "cpu" for d in jax.local_devices())
  assert loo_jax.scores_on_host(lira.Scoring(backend="jax"))
  assert not loo_jax.scores_on_host(lira.Scoring(backend="jax", precision="float32"))
  monkeypatch.setenv(loo_jax.PIPELINE_ON_CPU_ENV, "1")
  assert not loo_jax.scores_on_host(lira.Scoring(backend="jax"))
  monkeypatch.delenv(loo_jax.PIPELINE_ON_CPU_ENV)

  def device_pipeline(*args, **kwargs):
    raise AssertionError("the device pipeline ran on a CPU")
  monkeypatch.setattr(loo_jax, "score_variants", device_pipeline)
  loss, keep, mask = ragged()
  scorings = [lira.Scoring(covariance=c, shared=s) for c, s in VARIANTS]
  on_numpy = lira.leave_one_out_variants(loss, keep, scorings, mask_NxT=mask, block_size=4)
  on_jax = lira.leave_one_out_variants(loss, keep, [lira.Scoring.of(s, backend="jax") for s in scorings],
                                       mask_NxT=mask, block_size=4)
  for a, b in zip(on_numpy, on_jax):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(AssertionError, match="device pipeline"):
    lira.leave_one_out(loss, keep, backend="jax", precision="float32", mask_NxT=mask)
