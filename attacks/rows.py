"""Per-row helpers for per-token arrays whose unscored positions are NaN (position 0 and padding)."""

import numpy as np

from lira.errors import InputError


def as_rows(name, array, ndim=2):
  """A float64 array of the expected rank, its name in errors; a row with no scored position is refused."""
  array = np.asarray(array, dtype=np.float64)
  if array.ndim != ndim:
    raise InputError(f"{name}: expected a {ndim}-D per-token array, got shape {list(array.shape)}")
  empty = ~np.isfinite(array).any(axis=-1)
  if empty.any():
    index = tuple(int(i[0]) for i in np.nonzero(empty))
    raise InputError(f"{name}: row {index if len(index) > 1 else index[0]} has no scored position (all NaN)")
  return array


def mean_ll(name, lp_NxT):
  """LL = mean lp over each row's scored (non-NaN) positions, float64 [N] (the Hugging Face mean, never a sum)."""
  return np.nanmean(as_rows(name, lp_NxT, np.ndim(lp_NxT)), axis=-1)


def same_rows(name, array, lp_NxT):
  """Refuse a companion array whose leading (row) shape differs from lp's."""
  if np.shape(array)[0] != np.shape(lp_NxT)[0]:
    raise InputError(f"{name}: {np.shape(array)[0]} rows, but lp has {np.shape(lp_NxT)[0]}")
