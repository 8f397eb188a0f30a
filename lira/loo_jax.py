"""The jax backend of lira.leave_one_out: the same block scoring, jitted, sharded over devices and split over processes.

The maths is not copied here: lira/gaussian.py (loo_diag) and lira/gram.py (sorted_loo) are written against the
Python array API and run on jax.numpy arrays under jax.jit. What stays on the host, in numpy float64, is what
has data-dependent shapes: the per-token statistic and the length reduction (argsort, array_split), grouping
canaries by IN count and sorting their models IN-first (lira.gram.sorted_groups) with, for balanced leave-one-out,
each target's first model of the other class (lira.balanced.first_after), and LiRA's pooled variance. Plain
(lira.gaussian.loo_diag, lira.gram.sorted_loo) and balanced leave-one-out (lira.balanced.sorted_balanced) both run
their blocks on the devices. Canaries go to the device in blocks of one fixed size (the last block padded by
repeating its last canary, whose scores are dropped), so each (estimator, IN count) compiles once.

Precision: "float64" runs the jitted scoring inside jax.enable_x64(True), a context, so 64-bit mode leaks into
nothing else; "float32" (TPUs) runs it in float32. The formulation is float32-safe as it stands: rows are centred
by their class means before any scatter is formed, variances are sums of squared centred values (never E[x^2] -
E[x]^2), and OAS solves in the eigenbasis of the Gram matrix (lira/gram.py), with a rank cut above float32 noise.

Devices and processes: a block's canaries are sharded over all local devices (jax.sharding.Mesh, axis "canary");
with jax.distributed initialised, process p scores the p-th of P contiguous slices of the canaries and the [M, N]
scores are gathered to every process (multihost_utils.process_allgather), so each returns the whole array.
"""

import contextlib
import functools

import numpy as np

from lira import balanced
from lira import gaussian
from lira import gram
from lira.errors import MissingPackageError

def check_available():
  """Raise MissingPackageError if jax cannot be imported."""
  try:
    import jax  # noqa: F401
  except ImportError as e:
    raise MissingPackageError(f"backend='jax' needs jax ({e}); pip install jax, or use backend='numpy'") from e


def x64_context(precision):
  """jax's 64-bit mode for float64, as a context only (jax.enable_x64; jax.experimental.enable_x64 before 0.7)."""
  import jax
  if precision != "float64":
    return contextlib.nullcontext()
  if hasattr(jax, "enable_x64"):
    return jax.enable_x64(True)
  from jax.experimental import enable_x64  # older jax
  return enable_x64()


@functools.lru_cache(maxsize=None)
def _jitted():
  import jax
  diag = jax.jit(gaussian.loo_diag,
                 static_argnames=("shared", "offline", "sign", "floor", "offline_shift", "model_axis"))
  oas = jax.jit(gram.sorted_loo, static_argnames=("k", "shared", "offline", "floor", "offline_shift"))
  bal = jax.jit(balanced.sorted_balanced, static_argnames=("k", "oas", "shared", "offline", "floor", "offline_shift"))
  return diag, oas, bal


def _pad(a, size, axis):
  """Pad axis to `size` by repeating the last entry (padded canaries are valid inputs whose scores are dropped)."""
  extra = size - a.shape[axis]
  if extra == 0:
    return a
  width = [(0, 0)] * a.ndim
  width[axis] = (0, extra)
  return np.pad(a, width, mode="edge")


class _Placer:
  """Puts [.., B, ..] blocks on the local devices, sharded along the canary axis when there are several."""

  def __init__(self):
    import jax
    self.jax = jax
    self.devices = jax.local_devices()
    self.mesh = jax.sharding.Mesh(np.array(self.devices), ("canary",)) if len(self.devices) > 1 else None

  def put(self, a, canary_axis):
    if self.mesh is None:
      return self.jax.device_put(a, self.devices[0])
    spec = [None] * a.ndim
    spec[canary_axis] = "canary"
    sharding = self.jax.sharding.NamedSharding(self.mesh, self.jax.sharding.PartitionSpec(*spec))
    return self.jax.device_put(a, sharding)

  def put_replicated(self, a):
    if self.mesh is None:
      return self.jax.device_put(a, self.devices[0])
    return self.jax.device_put(a, self.jax.sharding.NamedSharding(self.mesh, self.jax.sharding.PartitionSpec()))


def _process_slice(idx_N):
  """This process's contiguous share of the canaries idx_N, and every process's (lo, hi) into idx_N."""
  import jax
  bounds = np.linspace(0, len(idx_N), jax.process_count() + 1).astype(int)
  lo, hi = bounds[jax.process_index()], bounds[jax.process_index() + 1]
  return idx_N[lo:hi], list(zip(bounds[:-1], bounds[1:]))


def score_canaries(features, keep_MxN, idx_N, scoring, *, global_var, block_size, progress=False):
  """Leave-one-out scores [M, len(idx_N)] (numpy float64) of canaries idx_N under a lira.Scoring, plain or balanced;
  features(cols) -> (x_MxBxD, valid_BxD).

  Over several processes each scores its slice and every process gets all of them (process_allgather).
  """
  import jax
  from tqdm.auto import tqdm
  covariance, shared, offline, sign = scoring.covariance, scoring.shared, scoring.offline, scoring.sign
  floor, offline_shift, precision = scoring.var_floor, scoring.offline_shift, scoring.precision
  desc = f"LOO {covariance}{' shared' if shared else ''}"
  mine, bounds = _process_slice(np.asarray(idx_N))
  placer = _Placer()
  ndev = len(placer.devices)
  bs = max(1, min(block_size, len(mine)))
  bs = -(-bs // ndev) * ndev  # a multiple of the local device count, so every device gets an equal share
  diag, oas, bal = _jitted()
  dtype = np.float64 if precision == "float64" else np.float32
  M = keep_MxN.shape[0]
  llr_MxL = np.empty((M, len(mine)))
  blocks = _blocks(keep_MxN[:, mine], bs, by_in_count=covariance == "oas" or scoring.balance_counts)
  previous = None
  with x64_context(precision), _one_blas_thread():
    gv = None if global_var is None else tuple(placer.put_replicated(np.asarray(v, dtype)) for v in global_var)
    host = _prefetched(features, [mine[at] for at in blocks])
    for at, (x_MxBxD, valid_BxD) in tqdm(zip(blocks, host), total=len(blocks), disable=not progress, leave=False,
                                         desc=desc):
      cols = mine[at]
      x_MxBxD = x_MxBxD.astype(dtype, copy=False)
      keep_MxB = keep_MxN[:, cols]
      oas_block = covariance == "oas" and x_MxBxD.shape[2] > 1
      if scoring.balance_counts or oas_block:  # models sorted IN-first; blocks share one IN count
        (k, _, order_BxM), = gram.sorted_groups(keep_MxB)
        x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD, 0, 1), order_BxM[:, :, None], axis=1)
        x_dev, valid_dev = placer.put(_pad(x_BxMxD, bs, 0), 0), placer.put(_pad(valid_BxD, bs, 0), 0)
        if scoring.balance_counts:
          first_dev = placer.put(_pad(balanced.first_after(order_BxM, k), bs, 0), 0)
        _collect(previous, llr_MxL, sign, offline)
        if scoring.balance_counts:
          out = bal(x_dev, k=k, first_BxM=first_dev, valid_BxD=valid_dev, oas=oas_block, shared=shared,
                    offline=offline, floor=floor, offline_shift=offline_shift)
        else:
          out = oas(x_dev, k=k, valid_BxD=valid_dev, shared=shared, offline=offline, floor=floor,
                    offline_shift=offline_shift)
      else:
        order_BxM = None
        # Models in the middle ([B, M, D]): XLA's CPU backend sums over a leading axis several times slower.
        x_BxMxD = np.ascontiguousarray(np.moveaxis(x_MxBxD, 0, 1))
        args = (placer.put(_pad(x_BxMxD, bs, 0), 0), placer.put(_pad(keep_MxB.T, bs, 0), 0),
                placer.put(_pad(valid_BxD, bs, 0), 0))
        _collect(previous, llr_MxL, sign, offline)
        out = diag(*args, global_var=gv, shared=shared, offline=offline, sign=sign, floor=floor,
                   offline_shift=offline_shift, model_axis=1)
      previous = (at, order_BxM, out)
    _collect(previous, llr_MxL, sign, offline)
  if jax.process_count() == 1:
    return llr_MxL
  return _gather(llr_MxL, bounds)


def _prefetched(features, cols_list, ahead=2):
  """features(cols) of each block in order, computed up to `ahead` blocks in advance in host threads.

  The host work (per-token statistic, length reduction: numpy, which releases the GIL) then runs on the host's
  cores in parallel with itself and with the device's scoring, as the numpy backend's thread pool does; computed
  inline it made the jax backend's univariate rows 2x the numpy backend's on a 2-core CPU.
  """
  import concurrent.futures
  import os
  workers = max(1, min(ahead, os.cpu_count() or 1))
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    pending = [pool.submit(features, cols) for cols in cols_list[:ahead]]
    for i in range(len(cols_list)):
      if i + ahead < len(cols_list):
        pending.append(pool.submit(features, cols_list[i + ahead]))
      yield pending.pop(0).result()


def _one_blas_thread():
  """One BLAS thread while blocks run: XLA's CPU backend calls LAPACK (scipy's OpenBLAS) from its own thread pool,
  one thread per batch chunk, and OpenBLAS's threads on top oversubscribe the cores (a [128, 64, 64] float64 eigh
  took 1.3 s with OpenBLAS's 2 threads, 0.19 s with 1, on the 2-core development machine). No effect on GPUs/TPUs.
  """
  import threadpoolctl
  try:
    import scipy.linalg.cython_lapack  # noqa: F401  loads the OpenBLAS that jaxlib's CPU LAPACK calls, so it is limited
  except ImportError:
    pass
  return threadpoolctl.threadpool_limits(1, user_api="blas")


def _blocks(keep_MxL, bs, by_in_count):
  """Blocks of at most bs canary positions; by_in_count: each block's canaries share one IN count (OAS's static k).

  Canaries are stably sorted by IN count, so runs where every canary has the same count (LiRA's usual half/half
  split) keep contiguous, memory-map-friendly blocks; each count's last block is padded, at most one per count.
  """
  L = keep_MxL.shape[1]
  if not by_in_count:
    return [np.arange(lo, min(lo + bs, L)) for lo in range(0, L, bs)]
  n_in_L = keep_MxL.sum(axis=0)
  order = np.argsort(n_in_L, kind="stable")
  starts = np.flatnonzero(np.r_[True, np.diff(n_in_L[order]) != 0, True])
  return [order[lo:min(lo + bs, hi)] for lo_g, hi in zip(starts[:-1], starts[1:]) for lo in range(lo_g, hi, bs)]


def _collect(block, llr_MxL, sign, offline):
  """Wait for a dispatched block and copy its scores into llr_MxL (the next block is dispatched only after this).

  One block in flight at a time: the host still prepares the next block while the device scores this one, and XLA's
  CPU backend never runs two blocks' eigh calls at once (jaxlib 0.10.2 deadlocked in LAPACK's batch thread pool).
  """
  if block is None:
    return
  at, order_BxM, out = block
  out = np.asarray(out, np.float64)  # [B, M] from both block kinds
  if order_BxM is None:
    llr_MxL[:, at] = out[:len(at)].T
    return
  llr_BxM = out[:len(at)]
  unsorted = np.empty_like(llr_BxM)
  np.put_along_axis(unsorted, order_BxM, llr_BxM, axis=1)
  llr_MxL[:, at] = sign * unsorted.T if offline else unsorted.T


def _gather(llr_MxL, bounds):
  """Every process's [M, share] scores, in canary order, on every process (float64 kept: x64 around the gather)."""
  from jax.experimental import multihost_utils
  longest = max(hi - lo for lo, hi in bounds)
  with x64_context("float64"):
    all_PxMxL = np.asarray(multihost_utils.process_allgather(_pad_nan(llr_MxL, longest)))
  return np.concatenate([all_PxMxL[p, :, :hi - lo] for p, (lo, hi) in enumerate(bounds)], axis=1)


def _pad_nan(a_MxL, length):
  out = np.full((a_MxL.shape[0], length), np.nan)
  out[:, :a_MxL.shape[1]] = a_MxL
  return out


def initialize_processes(coordinator_address, num_processes, process_id):
  """jax.distributed.initialize for a multi-process evaluation; CPU processes exchange scores over Gloo."""
  import jax
  try:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  except (AttributeError, KeyError, ValueError):  # older jax without the option: its default
    pass
  jax.distributed.initialize(coordinator_address, num_processes, process_id)


def is_first_process():
  """True in process 0 of a jax.distributed run (the one that writes reports), and when jax is not distributed."""
  import sys
  if "jax" not in sys.modules:
    return True
  import jax
  return jax.process_index() == 0
