"""The device block pipeline (lira/loo_device.py): every variant of a block from one upload of the raw losses equals
the numpy backend; float32 matmuls at full precision; LAPACK calls ordered; the block's memory estimate."""

import re

import numpy as np
import pytest

import lira
from lira import loo_device
from lira import loo_jax
from lira.loo_jax import x64_context
from lira.scoring import VARIANTS
from test_loo_jax import assert_backends_equal, ragged


def scorings(**fields):
  return [lira.Scoring(covariance=c, shared=s, **fields) for _, c, s in VARIANTS]


def both_variants(loss, keep, mask, **fields):
  kept, _ = lira.scoring.applicable_variants(VARIANTS, lira.Scoring(**fields))
  numpy_s = [lira.Scoring(covariance=c, shared=s, **fields) for _, c, s in kept]
  jax_s = [lira.Scoring(covariance=c, shared=s, backend="jax", **fields) for _, c, s in kept]
  return (np.stack(lira.leave_one_out_variants(loss, keep, numpy_s, mask_NxT=mask, block_size=4)),
          np.stack(lira.leave_one_out_variants(loss, keep, jax_s, mask_NxT=mask, block_size=4)))


@pytest.mark.parametrize("balance_counts", [True, False])
@pytest.mark.parametrize("statistic,reduction", [("logit", None), ("loss", None), ("logit", "group:3"),
                                                 ("loss", "min:3"), ("logit", "max:3")])
def test_six_variants_in_one_block_equal_numpy(balance_counts, statistic, reduction):
  # ragged(): ragged masks and canaries with 5, 6 and 7 IN models of 12 (unequal counts).
  loss, keep, mask = ragged(seed=11)
  assert_backends_equal(*both_variants(loss, keep, mask, balance_counts=balance_counts, statistic=statistic,
                                       reduction=reduction))


@pytest.mark.parametrize("balance_counts", [True, False])
@pytest.mark.parametrize("shift", ["std", "uniform"])
def test_offline_variants_in_one_block_equal_numpy(balance_counts, shift):
  loss, keep, mask = ragged(seed=12)
  assert_backends_equal(*both_variants(loss, keep, mask, balance_counts=balance_counts, offline=True,
                                       offline_shift=shift))


def test_losses_of_zero_and_subnormal():
  # A stored loss of 0 has the logit of lira.transforms.LOSS_FLOOR; a subnormal float32 loss (a token predicted
  # with a logit margin above about 88) keeps its value in float64, which XLA's CPU backend would flush to 0.
  loss, keep, _ = ragged(M=12, N=6, T=5, seed=13)
  loss[:, 2, 1] = 0.0
  loss[:5, 3, 2] = np.float32(1e-40)
  loss[5:, 3, 2] = np.float32(3e-44)
  ref = lira.leave_one_out(loss, keep, covariance="independent", shared=False)
  assert_backends_equal(ref, lira.leave_one_out(loss, keep, covariance="independent", shared=False, backend="jax"))
  # float32 flushes subnormals to 0 on XLA's CPU backend (documented); a loss of exactly 0 is the same there.
  # (Some models at 0, not all: identical values at every model leave float32 residuals of one ulp of the logit,
  # 1e-5, against a variance floored at var_floor, which no precision bound covers.)
  loss[:, 3, 2] = 0.5
  loss[4:, 2, 1] = 0.25
  ref = lira.leave_one_out(loss, keep, covariance="independent", shared=True)
  out = lira.leave_one_out(loss, keep, covariance="independent", shared=True, backend="jax", precision="float32")
  # The float32 bound of test_loo_jax.test_float32_within_its_error: 1e-4 of max(1, |llr|).
  np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))


def _lowered(precision, balance_counts=True, M=16, B=4, T=6, reduction=None):
  s = scorings(backend="jax", precision=precision, balance_counts=balance_counts, reduction=reduction)
  spec = loo_device.Spec.of(s, masked=True)
  loss = np.random.default_rng(0).uniform(0.1, 3.0, size=(M, B, T)).astype(np.float32)
  keep = np.zeros((M, B), bool)
  keep[:M // 2] = True
  with x64_context(precision):
    return loo_device.jitted().lower(loss, np.ones((B, T), bool), keep, (None,) * len(s), spec=spec, k=M // 2), spec


@pytest.mark.parametrize("balance_counts", [True, False])
def test_float32_matmuls_request_full_precision(balance_counts):
  # GPUs run float32 matmuls in TF32 and TPUs in bfloat16 passes unless HIGHEST is asked for; on a CPU both give the
  # same numbers, so the request itself is what a CPU test can check: every dot of the float32 block carries it.
  lowered, _ = _lowered("float32", balance_counts, reduction="group:3")
  text = lowered.as_text()
  dots = re.findall(r"stablehlo\.dot_general[^\n]*", text)
  assert dots
  assert all("HIGHEST" in d for d in dots), [d for d in dots if "HIGHEST" not in d][:2]


def _ordered(hlo, target):
  """Whether every two custom calls to `target` in compiled HLO text depend on one another (run one after another)."""
  graph, calls = {}, []
  for line in hlo.splitlines():
    m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = [^(]*\((.*)", line)
    if m:
      graph[m.group(1)] = set(re.findall(r"%([\w.\-]+)", m.group(2)))
      if target in line and "custom-call" in line:
        calls.append(m.group(1))

  def reaches(a, b):
    seen, todo = set(), [a]
    while todo:
      n = todo.pop()
      if n == b:
        return True
      for o in graph.get(n, ()):
        if o not in seen:
          seen.add(o)
          todo.append(o)
    return False

  return calls, all(reaches(a, b) or reaches(b, a) for i, a in enumerate(calls) for b in calls[i + 1:])


@pytest.mark.parametrize("balance_counts", [True, False])
def test_eigh_calls_run_one_after_another(balance_counts):
  # Two concurrent batched eigh calls deadlock jaxlib's LAPACK batch pool on 2 cores; the OAS variants' calls must
  # depend on one another in the compiled block (M = 16 rows < T = 20 positions: the Gram path; and T = 6).
  for T in (20, 6):
    lowered, _ = _lowered("float64", balance_counts, T=T)
    calls, ordered = _ordered(lowered.compile().as_text(), "syevd")
    assert len(calls) == 2 and ordered


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("balance_counts", [True, False])
@pytest.mark.parametrize("M,T", [(16, 6), (24, 40), (64, 16)])
def test_memory_estimate_bounds_xla(precision, balance_counts, M, T):
  # The block size on GPUs and TPUs comes from bytes_per_canary; it must not undercount what XLA allocates.
  B = 8
  lowered, spec = _lowered(precision, balance_counts, M=M, B=B, T=T)
  analysis = lowered.compile().memory_analysis()
  used = analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes
  assert used <= B * loo_device.bytes_per_canary(M, T, spec), (used, B * loo_device.bytes_per_canary(M, T, spec))


class _FakeDevice:
  platform = "gpu"

  def __init__(self, limit, in_use):
    self.stats = {"bytes_limit": limit, "bytes_in_use": in_use}

  def memory_stats(self):
    return self.stats


def test_block_size_follows_device_memory():
  placer = loo_jax._Placer()
  s = scorings(backend="jax")
  spec = loo_device.Spec.of(s, masked=False)
  cpu = loo_jax.block_size(64, 128, spec, placer, s)
  assert cpu == loo_jax.CPU_BLOCK_BYTES // (8 * 64 * 128) * len(placer.devices)
  placer.platform, placer.devices = "gpu", [_FakeDevice(80 * 2**30, 2**30)]
  per_canary = loo_device.bytes_per_canary(64, 128, spec)
  big = loo_jax.block_size(64, 128, spec, placer, s)
  assert big == min(loo_jax.MAX_DEVICE_BLOCK, int(loo_jax.DEVICE_MEMORY_SHARE * 79 * 2**30 // per_canary))
  placer.devices = [_FakeDevice(2**30, 0)] * 2  # two small devices: their share each, times two
  assert loo_jax.block_size(64, 128, spec, placer, s) == 2 * int(loo_jax.DEVICE_MEMORY_SHARE * 2**30 // per_canary)


def test_one_compile_for_the_six_variants():
  # The six variants of a block are one jitted call: scoring them compiles block_scores once per (shape, k).
  loss, keep, _ = ragged(M=12, N=8, T=5, seed=14)
  keep = np.zeros_like(keep)
  keep[:6] = True
  before = loo_device.jitted()._cache_size()
  lira.leave_one_out_variants(loss, keep, scorings(backend="jax", statistic="loss"), block_size=8)
  assert loo_device.jitted()._cache_size() == before + 1


def test_float32_eigh_asks_for_the_qr_algorithm_on_a_gpu(monkeypatch):
  # jax's default eigh on a GPU is Jacobi iteration for n <= 32; float32 fits ask for QR (syevd), LAPACK's algorithm.
  # A CPU cannot run the GPU kernel, so the test checks the request and the (eigenvalues, eigenvectors) order.
  import jax
  import jax.numpy as jnp
  from lira import gram
  calls, real = [], jax.lax.linalg.eigh

  def spy(a, **kwargs):
    calls.append(kwargs.get("implementation"))
    return real(a, **kwargs)

  monkeypatch.setattr(jax.lax.linalg, "eigh", spy)
  a = np.random.default_rng(0).normal(size=(3, 5, 5))
  a = (a @ np.swapaxes(a, 1, 2)).astype(np.float32)
  want_lam, want_v = np.linalg.eigh(a.astype(np.float64))
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  lam, v = gram.eigh(jnp.asarray(a))  # float32 on a "GPU": QR
  assert calls == [jax.lax.linalg.EighImplementation.QR] and lam.dtype == jnp.float32
  # A backward-stable float32 eigensolver moves each eigenvalue by at most p(n) eps ||A|| (Weyl; p(n) = n^2 here,
  # LAPACK's "modestly growing" factor), so small eigenvalues carry an absolute, not a relative, error; eigenvectors
  # move by that over their eigengap.
  n, eps = a.shape[-1], np.finfo(np.float32).eps
  bound_B = n * n * eps * want_lam[:, -1]
  gap_B = np.diff(want_lam, axis=1).min(axis=1)
  assert np.all(np.abs(np.asarray(lam) - want_lam) <= bound_B[:, None])
  assert np.all(np.abs(np.abs(np.asarray(v)) - np.abs(want_v)) <= (bound_B / gap_B)[:, None, None])
  monkeypatch.setattr(gram, "GPU_FLOAT32_EIGH", None)
  gram.eigh(jnp.asarray(a))
  monkeypatch.setattr(gram, "GPU_FLOAT32_EIGH", "qr")
  with x64_context("float64"):
    gram.eigh(jnp.asarray(a.astype(np.float64)))  # float64: jax's default
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  gram.eigh(jnp.asarray(a))  # a CPU: jax's default
  assert calls == [jax.lax.linalg.EighImplementation.QR]  # the other three: jnp.linalg.eigh, jax's own choice
  lam, v = gram.eigh(a.astype(np.float64))  # numpy arrays: numpy's eigh
  np.testing.assert_allclose(lam, want_lam)
