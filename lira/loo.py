"""Leave-one-out sequence-aware LiRA scores (Rossi et al. 2025, Sec. 3.2; docs/conventions.md, "Leave-one-out evaluation").

Every model is the target in turn and every canary's Gaussians are fitted on the other M-1 models. Plain
leave-one-out refits nothing: per canary, the class statistics of all M models are computed once and the target's
contribution is removed in closed form (lira.gaussian.loo_diag; OAS: one eigendecomposition per canary and class,
each target's removal by Sherman-Morrison and the matrix determinant lemma, lira/gram.py). Balanced leave-one-out
(the default) fits both classes on the same number of models: each class's own removals, again in closed form
(lira/balanced.py).
This module reads the losses block by block, runs the blocks on threads (numpy) or on the devices (jax,
lira/loo_jax.py), and checks every input first. Where jax's devices are CPUs the jax backend's float64 scores come
from the numpy backend (lira.loo_jax.scores_on_host: numpy's kernels are the faster there).
"""

import concurrent.futures
import dataclasses
import os

import numpy as np
import threadpoolctl
from tqdm.auto import tqdm

from lira import allocator
from lira import balanced
from lira import gaussian
from lira.checks import check_arrays
from lira.errors import InputError
from lira.scoring import Scoring


def columns(loss_MxNxT, cols):
  """loss_MxNxT[:, cols] for a slice or sorted canary indices, read as a slice when they are contiguous (memmaps)."""
  if isinstance(cols, slice):
    return loss_MxNxT[:, cols]
  cols = np.asarray(cols)
  if len(cols) and cols[-1] - cols[0] + 1 == len(cols):
    return loss_MxNxT[:, int(cols[0]):int(cols[-1]) + 1]
  return loss_MxNxT[:, cols]


def leave_one_out(loss_MxNxT, keep_MxN, scoring=None, *, mask_NxT=None, on_undefined="raise", block_size=None,
                  num_threads=None, progress=False, model_ids=None, **fields):
  """Leave-one-out LiRA log-likelihood ratios llr_MxN (float64, higher = member; offline: z-scores).

  scoring: a lira.Scoring (default Scoring(): the commands' defaults), with any of its fields overridden by keyword,
  e.g. `leave_one_out(loss, keep, covariance="independent", shared=False)`. Pairs whose fit is undefined (too few
  models of a class) raise, or give NaN with on_undefined="nan". model_ids name the models in messages when
  loss_MxNxT holds a subset of a run's models. Bad inputs (a loss not finite and >= 0 at a scored position, ...)
  raise InputError before any scoring. loss_MxNxT may be memory-mapped: it is read one block of canaries at a time.
  """
  scoring = Scoring.of(scoring, **fields)
  return leave_one_out_variants(loss_MxNxT, keep_MxN, [scoring], mask_NxT=mask_NxT, on_undefined=on_undefined,
                                block_size=block_size, num_threads=num_threads, progress=progress,
                                model_ids=model_ids)[0]


def leave_one_out_variants(loss_MxNxT, keep_MxN, scorings, *, mask_NxT=None, on_undefined="raise", block_size=None,
                           num_threads=None, progress=False, model_ids=None):
  """leave_one_out for several Scorings that differ only in (covariance, shared): [llr_MxN per scoring].

  Both backends read and transform each block of canaries once for all of them (the per-token statistic is a large
  share of the work at M = 484); the jax backend uploads each block once and scores every variant on the device.
  """
  with allocator.reuse_freed_blocks():
    return _variants(loss_MxNxT, keep_MxN, scorings, mask_NxT, on_undefined, block_size, num_threads, progress,
                     model_ids)


def _variants(loss_MxNxT, keep_MxN, scorings, mask_NxT, on_undefined, block_size, num_threads, progress, model_ids):
  scorings = list(scorings)
  if not scorings:
    raise InputError("no scoring given: pass at least one lira.Scoring")
  base = scorings[0]
  for s in scorings:
    if s.variant(base.covariance, base.shared) != base:
      raise InputError("scorings scored together may differ only in covariance and shared")
    s.check("leave_one_out")
  if base.backend == "jax":
    from lira import loo_jax
    loo_jax.check_available()
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT, base.reduction, model_ids)
  if base.backend == "jax" and loo_jax.scores_on_host(base):  # jax on CPUs only: numpy's kernels are the faster
    scorings = [dataclasses.replace(s, backend="numpy") for s in scorings]
    base = scorings[0]
  keep_MxN = np.asarray(keep_MxN, bool)
  M, N, T = loss_MxNxT.shape
  undefined_VxN = [gaussian.check_counts(keep_MxN, s, "leave_one_out", on_undefined) for s in scorings]
  bs = block_size or min(gaussian.block_size(M, T, s.covariance) for s in scorings)
  blocks = [slice(i, min(i + bs, N)) for i in range(0, N, bs)]
  n_in_N = keep_MxN.sum(axis=0)
  if base.backend != "jax" and any(s.balance_counts for s in scorings) and np.ptp(n_in_N) > 0:
    # balanced leave-one-out scores a block's canaries in groups of one IN count: blocks of one or two counts,
    # the costliest (counts furthest from half, the most rows removed) first so that the threads finish together
    order_N = np.lexsort((n_in_N, -np.abs(M - 2 * n_in_N)))
    blocks = [np.sort(order_N[i:i + bs]) for i in range(0, N, bs)]

  def features(blk):  # per-position features, shared by the variants; univariate takes their mean
    mask = None if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
    return gaussian.position_features(columns(loss_MxNxT, blk), mask, base.reduction, base.statistic)

  global_vars = [None] * len(scorings)
  if base.fix_variance:
    totals = [None] * len(scorings)
    for blk in tqdm(blocks, desc="pooled variance", disable=not progress, leave=False):
      full = features(blk)
      for v, s in enumerate(scorings):
        ok = ~undefined_VxN[v][blk]
        x, valid = gaussian.for_covariance(full, s.covariance)
        totals[v] = gaussian.add_scatter(totals[v], gaussian.pooled_scatter(x[:, ok], keep_MxN[:, blk][:, ok],
                                                                            valid[ok]))
    global_vars = [gaussian.pooled_variance(t, s) for t, s in zip(totals, scorings)]

  llr_VxMxN = [np.full((M, N), np.nan) for _ in scorings]
  if base.backend == "jax":  # the whole block pipeline on the devices, the variants with one defined set together
    groups = {}
    for v, undefined_N in enumerate(undefined_VxN):
      groups.setdefault(undefined_N.tobytes(), []).append(v)
    for vs in groups.values():
      idx_N = np.flatnonzero(~undefined_VxN[vs[0]])
      if not idx_N.size:  # every canary undefined: the variants' scores stay NaN
        continue
      outs = loo_jax.score_variants(loss_MxNxT, mask_NxT, keep_MxN, idx_N, [scorings[v] for v in vs],
                                    global_vars=[global_vars[v] for v in vs], block_size=block_size,
                                    progress=progress)
      for v, llr_MxL in zip(vs, outs):
        llr_VxMxN[v][:, idx_N] = llr_MxL
    blocks = []

  def score(blk):
    full = features(blk)
    # Balanced variants with every canary of the block defined (the usual case) are sorted and centred together.
    together = [v for v, s in enumerate(scorings) if s.balance_counts and not undefined_VxN[v][blk].any()]
    if together:
      x_MxBxD, valid_BxD = full
      for v, llr_MxB in zip(together, balanced.balanced_llr_variants(x_MxBxD, keep_MxN[:, blk], valid_BxD,
                                                                     [scorings[v] for v in together])):
        llr_VxMxN[v][:, blk] = llr_MxB
    for v, s in enumerate(scorings):
      if v in together:
        continue
      x_MxBxD, valid_BxD = gaussian.for_covariance(full, s.covariance)
      ok = ~undefined_VxN[v][blk]
      if ok.all():  # the usual case: no copy of the block per variant
        idx, x, keep, valid = blk, x_MxBxD, keep_MxN[:, blk], valid_BxD
      else:
        idx = np.arange(N)[blk][ok]
        x, keep, valid = x_MxBxD[:, ok], keep_MxN[:, idx], valid_BxD[ok]
      if s.balance_counts:
        llr_VxMxN[v][:, idx] = balanced.balanced_llr(x, keep, valid, s)
      else:
        llr_VxMxN[v][:, idx] = gaussian.loo_scores(x, keep, valid, s, global_vars[v])

  # numpy releases the GIL in its kernels (ufuncs, matmul, eigh), so blocks run in parallel threads.
  workers = max(1, min(num_threads or os.cpu_count() or 1, len(blocks) or 1))
  names = ", ".join(s.key.replace("-classwise", "").replace("-", " ") for s in scorings)
  # One BLAS thread per worker: otherwise BLAS's own threads and ours oversubscribe the cores.
  with threadpoolctl.threadpool_limits(1 if workers > 1 else None, user_api="blas"), \
       concurrent.futures.ThreadPoolExecutor(workers) as pool:
    futures = [pool.submit(score, blk) for blk in blocks]
    try:
      for f in tqdm(concurrent.futures.as_completed(futures), total=len(blocks), disable=not progress, leave=False,
                    desc=f"LOO {names}"):
        f.result()
    except BaseException:  # Ctrl-C or a failed block: the blocks not started are dropped, not run by the pool's exit
      pool.shutdown(wait=False, cancel_futures=True)
      raise
  for llr_MxN, undefined_N in zip(llr_VxMxN, undefined_VxN):
    bad = ~np.isfinite(llr_MxN) & ~undefined_N[None]
    if bad.any():
      m, n = (int(i[0]) for i in np.nonzero(bad))
      m = m if model_ids is None else int(np.asarray(model_ids)[m])
      raise FloatingPointError(f"non-finite score for model {m} on canary {n}; please report this with the data")
  return llr_VxMxN

