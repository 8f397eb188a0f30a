"""Per-row helpers for per-token arrays whose unscored positions are NaN (position 0 and padding)."""

import numpy as np

from lira.errors import InputError


def _float_rows(name, array, ndim):
  """(array as float32 or float64, its finite mask), after the rank and empty-row checks."""
  array = np.asarray(array)
  if array.dtype not in (np.float32, np.float64):  # float32 kept: no float64 copy of large arrays
    array = array.astype(np.float64)
  if array.ndim != ndim:
    raise InputError(f"{name}: expected a {ndim}-D per-token array, got shape {list(array.shape)}")
  finite = np.isfinite(array)
  empty = ~finite.any(axis=-1)
  if empty.any():
    index = tuple(int(i[0]) for i in np.nonzero(empty))
    raise InputError(f"{name}: row {index if len(index) > 1 else index[0]} has no scored position (all NaN)")
  return array, finite


def as_rows(name, array, ndim=2):
  """A float array of the expected rank (float32 kept as is, other types become float64), its name in errors; a
  row with no scored position is refused."""
  return _float_rows(name, array, ndim)[0]


def mean_ll(name, lp_NxT, ndim=None):
  """LL = mean lp over each row's scored (non-NaN) positions, float64 [N] (the Hugging Face mean, never a sum).

  Summed in float64 whatever the input's precision, as np.nanmean of a float64 copy would, without making the copy.
  """
  lp_NxT, finite_NxT = _float_rows(name, lp_NxT, np.ndim(lp_NxT) if ndim is None else ndim)
  return np.where(finite_NxT, lp_NxT, 0).sum(axis=-1, dtype=np.float64) / finite_NxT.sum(axis=-1)


def same_rows(name, array, lp_NxT):
  """Refuse a companion array whose leading (row) shape differs from lp's."""
  if np.shape(array)[0] != np.shape(lp_NxT)[0]:
    raise InputError(f"{name}: {np.shape(array)[0]} rows, but lp has {np.shape(lp_NxT)[0]}")


BLOCK_BYTES = 256 * 2**20  # the largest temporaries of a block of canaries (WBC, EZ-MIA on a shadow run)


def canary_blocks(N, per_canary_bytes, block_size=None):
  """Slices of the N canaries, block_size at a time, or as many as keep per_canary_bytes each within BLOCK_BYTES."""
  bs = block_size or max(1, BLOCK_BYTES // max(1, per_canary_bytes))
  return [slice(i, min(i + bs, N)) for i in range(0, N, bs)]
