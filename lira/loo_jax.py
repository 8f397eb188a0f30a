"""The jax backend of lira.leave_one_out: the whole block pipeline on the devices, sharded over them and split over
processes.

Per block of canaries the host reads the raw per-token losses as stored (float32 in a run folder), the mask and the
keep columns, and uploads them once; lira.loo_device.block_scores computes the statistic, the length reduction, the
IN-first model order and every requested variant's scores on the device and returns only their [V, B, M] scores.
The maths is not copied: lira/gaussian.py (loo_diag), lira/gram.py (sorted_loo) and lira/balanced.py
(sorted_balanced) are written against the Python array API, and the numpy backend runs the same functions. What
stays on the host: the input checks, LiRA's pooled variance (--fix_variance, a pass of its own) and splitting the
canaries into blocks (grouped by program where the models are sorted, ordered by count within one). Runs with
several counts compile one program for them, each canary's count a traced value, so a block mixes counts
(lira/balanced_padded.py; counts whose balanced fits take the kept rows directly keep programs of their own); on one
GPU or TPU every program is compiled up front, concurrently in host threads.

A program's blocks have one fixed size (the last padded by repeating its last canary, whose scores are dropped),
chosen from the devices' free memory on GPUs and TPUs (lira.loo_device.bytes_per_canary) and cache-sized on CPUs,
or smaller for a program with fewer canaries than that. Two host threads
read the next blocks while the device scores; on GPUs and TPUs the next block is uploaded and queued behind the
current one (double buffering).

Precision: "float64" runs the jitted scoring inside jax.enable_x64(True), a context, so 64-bit mode leaks into
nothing else; "float32" runs it in float32 with full-precision float32 matmuls (lira/loo_device.py). The
formulation is float32-safe: rows are centred by their class means before any scatter is formed, variances are sums
of squared centred values (never E[x^2] - E[x]^2), and OAS solves in the eigenbasis of the Gram matrix
(lira/gram.py), with a rank cut above float32 noise.

Devices and processes: a block's canaries are sharded over all local devices (jax.sharding.Mesh, axis "canary");
with jax.distributed initialised, process p scores the p-th of P contiguous slices of the canaries and the [M, N]
scores are gathered to every process (multihost_utils.process_allgather), so each returns the whole array.
"""

import contextlib
import os

import numpy as np

from lira import balanced_padded
from lira import loo_device
from lira.errors import MissingPackageError

# Share of a device's free memory one block may take: two blocks' inputs are resident at once (the next block's
# upload overlaps this block's scoring), and bytes_per_canary is an estimate.
DEVICE_MEMORY_SHARE = 0.3
MAX_DEVICE_BLOCK = 8192  # canaries per device and block
# XLA's CPU backend: 8 to 32 canaries per block at M = 64, T = 128 (1-4 MiB of [B, M, T] float64) took 3.9-4.0 s for
# the six variants of 2,000 canaries, 128 (the numpy backend's size) 5.3 s (2-core CPU, 2026-11-27).
CPU_BLOCK_BYTES = 2 * 2**20


# XLA's CPU code is slower than numpy's kernels on these fits (a 2-core CPU, M = 64, N = 10,000, the six variants:
# 1.2-1.3x the numpy backend's time after the compiles, 1.6x with them; BENCHMARKS.md). Where jax's devices are CPUs the jax
# backend's float64 scores therefore come from the numpy backend, the same functions on host threads; with this
# variable set to 1 the device pipeline runs there too (the tests set it: it is the code a GPU or TPU runs).
PIPELINE_ON_CPU_ENV = "SEQLIRA_JAX_PIPELINE_ON_CPU"


def scores_on_host(scoring):
  """True where backend="jax" scores with the numpy backend: float64, one process, every local device a CPU, and
  PIPELINE_ON_CPU_ENV not set to 1."""
  import jax
  return (scoring.precision == "float64" and os.environ.get(PIPELINE_ON_CPU_ENV) != "1" and jax.process_count() == 1
          and all(d.platform == "cpu" for d in jax.local_devices()))


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
    self.platform = self.devices[0].platform
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

  def free_bytes(self):
    """Free memory of the fullest local device, or None where the platform does not report it (CPUs)."""
    free = []
    for d in self.devices:
      stats = d.memory_stats() if hasattr(d, "memory_stats") else None
      if not stats or "bytes_limit" not in stats:
        return None
      free.append(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return min(free)


def block_size(M, T, spec, placer, scorings, removed=2):
  """Canaries per block: on devices that report their memory (GPUs, TPUs), as many as fit in a share of it
  (per device, times the device count; removed: the most rows a target removes, lira.balanced_padded.removed_rows);
  on CPUs, cache-sized blocks (CPU_BLOCK_BYTES of float64 [B, M, T])."""
  free = None if placer.platform == "cpu" else placer.free_bytes()
  if free is None:
    return max(1, CPU_BLOCK_BYTES // (8 * M * T)) * len(placer.devices)
  per_device = int(DEVICE_MEMORY_SHARE * free // loo_device.bytes_per_canary(M, T, spec, removed))
  return max(1, min(MAX_DEVICE_BLOCK, per_device)) * len(placer.devices)


def _process_slice(idx_N):
  """This process's contiguous share of the canaries idx_N, and every process's (lo, hi) into idx_N."""
  import jax
  bounds = np.linspace(0, len(idx_N), jax.process_count() + 1).astype(int)
  lo, hi = bounds[jax.process_index()], bounds[jax.process_index() + 1]
  return idx_N[lo:hi], list(zip(bounds[:-1], bounds[1:]))


def score_variants(loss_MxNxT, mask_NxT, keep_MxN, idx_N, scorings, *, global_vars, block_size=None,
                   progress=False, precompile=None):
  """Leave-one-out scores [llr_MxL per scoring] (numpy float64) of the sorted canaries idx_N, for scorings that differ
  only in (covariance, shared); global_vars: per scoring None or LiRA's fixed (var_in_M, var_out_M).

  Over several processes each scores its slice and every process gets all of them (process_allgather).
  precompile: compile every program the blocks need up front, concurrently (`_compiled`); default: on one GPU or TPU
  when they need more than one (canaries of several IN counts: model subsets, keep matrices drawn per canary).
  """
  import jax
  from tqdm.auto import tqdm
  base = scorings[0]
  spec = loo_device.Spec.of(scorings, masked=mask_NxT is not None)
  mine, bounds = _process_slice(np.asarray(idx_N))
  placer = _Placer()
  ndev = len(placer.devices)
  M, _, T = loss_MxNxT.shape
  sorts = spec.sorts_models(T)
  counts = sorted({int(c) for c in np.asarray(keep_MxN[:, mine], bool).sum(axis=0)}) if sorts else [0]
  # each count's program: its own (k static, one count), or the run's (several counts: k traced)
  key = balanced_padded.program_keys(counts, M, balanced=base.balance_counts)
  programs = list(dict.fromkeys(key.values()))
  removed = max([2] + [balanced_padded.removed_rows(p, M) for p in programs if base.balance_counts and sorts])
  bs = block_size or globals()["block_size"](M, T, spec, placer, scorings, removed)
  bs = max(1, min(bs, len(mine)))
  bs = -(-bs // ndev) * ndev  # a multiple of the local device count, so every device gets an equal share
  fn = loo_device.jitted()
  store = np.float32 if base.precision == "float32" else None
  llr_VxMxL = np.empty((len(scorings), M, len(mine)))
  program_L = None
  if sorts:  # each canary's program, as an index into `programs`: a block holds one program's canaries
    index = {p: i for i, p in enumerate(programs)}
    n_in_L = np.asarray(keep_MxN[:, mine], bool).sum(axis=0)
    program_L = np.array([index[key[int(c)]] for c in n_in_L], dtype=np.int64)
  blocks = _blocks(program_L, len(mine), bs, ndev, None if program_L is None else n_in_L)

  def read(block):  # host: the block's raw arrays, padded to its program's block size
    at, size = block
    at = np.sort(at)
    cols = mine[at]
    loss = np.asarray(_columns(loss_MxNxT, cols), dtype=store)
    mask = np.asarray(mask_NxT[cols], bool) if mask_NxT is not None else np.ones((len(cols), 1), bool)
    return at, _pad(loss, size, 1), _pad(mask, size, 0), _pad(np.asarray(keep_MxN[:, cols], bool), size, 1)

  def program(keep_MxB):  # a block's program key (its first canary's: a block holds one program's canaries)
    return key[int(keep_MxB[:, 0].sum()) if sorts else 0]

  # XLA's CPU backend scores one block at a time (jaxlib 0.10.2 deadlocked with two blocks' eigh calls in its LAPACK
  # batch pool on 2 cores); a GPU or TPU queues the next block behind the current one on its stream.
  ahead = 0 if placer.platform == "cpu" else 1
  in_flight = []
  desc = "LOO " + ", ".join(s.key.replace("-classwise", "").replace("-", " ") for s in scorings)
  with x64_context(base.precision), _one_blas_thread():
    dtype = np.float64 if base.precision == "float64" else np.float32
    gv = tuple(None if g is None else tuple(placer.put_replicated(np.asarray(v, dtype)) for v in g)
               for g in global_vars)
    if precompile is None:
      precompile = placer.platform != "cpu" and placer.mesh is None and len(programs) > 1
    compiled = None
    if precompile:  # each program at its first block's shapes (a program's blocks share one size)
      firsts = {}
      for at, size in blocks:
        p = programs[program_L[at[0]]] if sorts else key[0]
        if p not in firsts:
          firsts[p] = [placer.put(a, ax) for a, ax in zip(read((at, size))[1:], (1, 0, 1))]
      compiled = _compiled(fn, firsts, gv, spec, base.precision)
    for at, loss, mask, keep in tqdm(_prefetched(read, blocks), total=len(blocks), disable=not progress,
                                     leave=False, desc=desc):
      args = (placer.put(loss, 1), placer.put(mask, 0), placer.put(keep, 1))
      while len(in_flight) > ahead:
        _collect(in_flight.pop(0), llr_VxMxL)
      k = program(keep)
      in_flight.append((at, compiled[k](*args, gv) if compiled else fn(*args, gv, spec=spec, k=k)))
    while in_flight:
      _collect(in_flight.pop(0), llr_VxMxL)
  if jax.process_count() == 1:
    return list(llr_VxMxL)
  return [_gather(llr_MxL, bounds) for llr_MxL in llr_VxMxL]


def _compiled(fn, args_by_program, gv, spec, precision):
  """{k: the block compiled for k} for every program key k (an IN count, or a lira.balanced_padded.Layout) of
  args_by_program ({k: a block's device arrays (loss, mask, keep)}), compiled in host threads at once.

  XLA compiles outside Python's GIL, so the programs of a model subset (the run's, and counts' own) compile side
  by side on the host's cores instead of one after another as the blocks reach them. Each thread enters the
  precision's 64-bit mode itself (a thread-local setting).
  """
  import concurrent.futures
  import os

  def one(k):
    with x64_context(precision):
      return k, fn.lower(*args_by_program[k], gv, spec=spec, k=k).compile()

  with concurrent.futures.ThreadPoolExecutor(max(1, min(len(args_by_program), os.cpu_count() or 1))) as pool:
    return dict(pool.map(one, args_by_program))


def _columns(loss_MxNxT, cols):
  """loss_MxNxT[:, cols] for sorted canary indices, read as a slice when they are contiguous (memory maps)."""
  if len(cols) and cols[-1] - cols[0] + 1 == len(cols):
    return loss_MxNxT[:, int(cols[0]):int(cols[-1]) + 1]
  return loss_MxNxT[:, cols]


def _prefetched(read, blocks, ahead=2):
  """read(at) of each block in order, up to `ahead` blocks in advance in host threads (reading a memory-mapped file
  and copying a block's columns release the GIL), so the device does not wait for the disk or the copy."""
  import concurrent.futures
  with concurrent.futures.ThreadPoolExecutor(ahead) as pool:
    pending = [pool.submit(read, at) for at in blocks[:ahead]]
    for i in range(len(blocks)):
      if i + ahead < len(blocks):
        pending.append(pool.submit(read, blocks[i + ahead]))
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


def _blocks(program_L, L, bs, ndev=1, count_L=None):
  """[(canary positions, padded size)] of blocks of at most bs of the L canary positions; program_L (or None): each
  canary's program, and a block holds the canaries of one program (one static IN count, or the run's counts,
  lira/balanced_padded.py); count_L (or None): each canary's IN count, by which a program's canaries are ordered,
  so that a block's canaries remove similar numbers of rows (its loops run to the block's largest).

  Canaries are stably sorted by program (and count), so runs where every canary has the same count (LiRA's usual
  half/half split) keep contiguous, memory-map-friendly blocks. A program's blocks share one size (one compile): its
  canaries cut into equal blocks of at most bs, that size rounded up to one of 16 per octave and to a multiple of
  ndev (the local devices). So a program is padded by at most about 1/16, never to a block sized for the whole run,
  and subsets of one size (a sweep's draws, whose programs hold similar numbers of canaries) meet the same shapes.
  """
  if program_L is None:
    return [(np.arange(lo, min(lo + bs, L)), bs) for lo in range(0, L, bs)]
  order = np.argsort(program_L, kind="stable") if count_L is None else np.lexsort((count_L, program_L))
  starts = np.flatnonzero(np.r_[True, np.diff(program_L[order]) != 0, True])
  out = []
  for lo_g, hi in zip(starts[:-1], starts[1:]):
    size = _ceil_div(hi - lo_g, _ceil_div(hi - lo_g, bs))  # equal blocks of at most bs
    step = 1 << max(0, int(size).bit_length() - 4)  # one of 16 sizes per octave
    size = min(bs, _ceil_div(_ceil_div(size, step) * step, ndev) * ndev)
    out += [(order[lo:min(lo + size, hi)], size) for lo in range(lo_g, hi, size)]
  return out


def _ceil_div(a, b):
  return -(-int(a) // int(b))


def _collect(block, llr_VxMxL):
  """Wait for a dispatched block and copy its [V, B, M] scores into llr_VxMxL at the block's positions."""
  at, out = block
  out_VxBxM = np.asarray(out, np.float64)[:, :len(at)]
  llr_VxMxL[:, :, at] = np.swapaxes(out_VxBxM, 1, 2)


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
