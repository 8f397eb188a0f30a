"""Checks of LiRA's input arrays before any scoring: shapes, the mask, the reduction length and every scored loss.

A bad input raises InputError naming the model, canary and position, before any long work starts.
"""

import numpy as np

from lira.errors import InputError
from lira.transforms import check_reduction
from run_folder import names


def check_arrays(loss_MxNxT, keep_MxN, mask_NxT=None, reduction=None, model_ids=None):
  """Check shapes, the mask, the reduction length and every scored loss; InputError names model, canary, position.

  model_ids name the rows of loss_MxNxT in messages when they are a subset of a run's models.
  """
  if not hasattr(loss_MxNxT, "shape"):
    raise InputError(f"losses must be an array [M, N, T] (numpy, a memory-mapped .npy or jax), got "
                     f"{type(loss_MxNxT).__name__}: pass np.asarray(losses)")
  if np.ndim(loss_MxNxT) != 3:
    raise InputError(f"losses must be shaped [M, N, T], got {np.shape(loss_MxNxT)}")
  M, N, T = loss_MxNxT.shape
  if np.shape(keep_MxN) != (M, N):
    raise InputError(f"keep must be shaped [M, N] = {(M, N)}, got {np.shape(keep_MxN)}")
  check_keep(keep_MxN)
  if mask_NxT is not None and np.shape(mask_NxT) != (N, T):
    raise InputError(f"mask must be shaped [N, T] = {(N, T)}, got {np.shape(mask_NxT)}")
  length_N = np.full(N, T) if mask_NxT is None else np.asarray(mask_NxT, bool).sum(axis=1)
  if (length_N == 0).any():
    raise InputError(f"canary {int(np.flatnonzero(length_N == 0)[0])} has no scored position in the mask")
  check_reduction(reduction, length_N)
  check_losses(loss_MxNxT, mask_NxT, model_ids=model_ids)


def check_keep(keep_MxN):
  """keep is membership: bool, or numbers that are all 0 or 1 (1 = IN); anything else (0.5, 2, a -1/1 encoding) is
  refused with the first such value and where it is, never read as a truth value."""
  keep = np.asarray(keep_MxN)
  if keep.dtype == bool:
    return
  if not (np.issubdtype(keep.dtype, np.integer) or np.issubdtype(keep.dtype, np.floating)):
    raise InputError(f"keep must be bool membership [M, N] (True = IN), got dtype {keep.dtype}")
  bad = (keep != 0) & (keep != 1)
  if bad.any():
    m, n = (int(i[0]) for i in np.nonzero(bad))
    hint = " (a -1/1 encoding? use True/False or 1/0 for IN/OUT)" if (keep == -1).any() else ""
    raise InputError(f"keep must be bool membership (True = IN) or 0/1, but model {m}, canary {n} holds "
                     f"{keep[m, n].item()!r}{hint}")


def check_losses(loss_MxNxT, mask_NxT=None, model_ids=None, canary_ids=None, chunk_elements=2**22, item="canary",
                 mask_file=names.MASK):
  """Raise InputError naming model, canary and position of the first loss not finite and >= 0 at a scored position.

  Every command checks its losses with this (through check_arrays, which checks the shapes first)
  before any work. model_ids / canary_ids name the rows and columns
  when the arrays are a subset of a run (default: their indices). Reads the losses canary chunk by canary chunk
  (about chunk_elements at a time), so a memory-mapped file is never loaded whole. item / mask_file: what the
  columns are and the mask file the message points to (a population: "population sequence", population_mask.npy).
  """
  M, N, T = np.shape(loss_MxNxT)
  model_ids = np.arange(M) if model_ids is None else np.asarray(model_ids)
  canary_ids = np.arange(N) if canary_ids is None else np.asarray(canary_ids)
  step = max(1, chunk_elements // max(1, M * T))
  first, count = None, 0
  for lo in range(0, N, step):
    loss_MxBxT = np.asarray(loss_MxNxT[:, lo:lo + step])
    bad_MxBxT = ~(np.isfinite(loss_MxBxT) & (loss_MxBxT >= 0))
    if mask_NxT is not None:
      bad_MxBxT &= np.asarray(mask_NxT[lo:lo + step], bool)[None]
    if bad_MxBxT.any():
      count += int(bad_MxBxT.sum())
      if first is None:
        m, b, t = (int(i[0]) for i in np.nonzero(bad_MxBxT))
        first = (model_ids[m], canary_ids[lo + b], t, loss_MxBxT[m, b, t])
  if first is not None:
    m, n, t, value = first
    raise InputError(
        f"loss of model {m} on {item} {n} at position {t} is {value}; losses must be finite and >= 0 at scored "
        f"positions ({count} such entries; mask them out with {mask_file} if they are not meant to be scored)")


def check_targets(target_loss_KxNxT, N, T, mask_NxT=None):
  """Separate targets' per-token losses as [K, N, T] ([N, T] is one target), checked before any scoring: the shape
  against the shadow models' N canaries and T positions, at least one target, floating point, and every loss finite
  and >= 0 at a scored position (the message names the target, canary and position)."""
  target = target_loss_KxNxT if np.ndim(target_loss_KxNxT) == 3 else np.asarray(target_loss_KxNxT)[None]
  if np.ndim(target) != 3 or target.shape[1:] != (N, T):
    raise InputError(f"target losses must be shaped [K, N, T] or [N, T] with N={N} canaries and T={T} positions "
                     f"as the shadow models', got {list(np.shape(target_loss_KxNxT))}")
  if target.shape[0] == 0:
    raise InputError(f"target losses hold no target model (shape {list(target.shape)}, K = 0)")
  if not np.issubdtype(np.asarray(target[:0]).dtype, np.floating):
    raise InputError(f"target losses must be floating-point per-token losses, got dtype {np.asarray(target[:0]).dtype}")
  try:
    check_losses(target, mask_NxT)
  except InputError as e:
    raise InputError(str(e).replace("loss of model", "loss of target", 1)) from None
  return target
