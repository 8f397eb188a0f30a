"""Min-K% (Shi et al. 2024) and Min-K%++ (Zhang et al. 2024) on stored per-token arrays; higher = member.

Both average the lowest max(1, int(k n)) values over a text's n scored positions. The official code uses int(k n)
and gets NaN when it is 0 (short texts); the floor of one token is this project's deliberate departure.
"""

import numpy as np

from attacks.rows import as_rows
from lira.errors import InputError

# Min-K%++ divides by sigma, the spread of ln p under the model's distribution, which is 0 when that distribution is
# one-hot or uniform (then lp = mu too). Sigma is raised to this floor (nats), so z stays finite: 0 / floor = 0.
SIGMA_FLOOR = 1e-6


def _check_k(k):
  if not 0.0 < k <= 1.0:
    raise InputError(f"k must lie in (0, 1], got {k}")


def lowest_mean(values_NxT, k):
  """Mean of the lowest max(1, int(k n)) finite values of each row, n = its number of finite values."""
  _check_k(k)
  values_NxT = np.asarray(values_NxT, dtype=np.float64)
  n_N = np.isfinite(values_NxT).sum(axis=1)
  count_N = np.maximum(1, (k * n_N).astype(np.int64))
  sorted_NxT = np.sort(np.where(np.isfinite(values_NxT), values_NxT, np.inf), axis=1)  # NaN last
  keep_NxT = np.arange(values_NxT.shape[1])[None] < count_N[:, None]
  return np.where(keep_NxT, sorted_NxT, 0.0).sum(axis=1) / count_N


def min_k(lp_NxT, k=0.2):
  """Min-K%: mean of the lowest k fraction of each text's lp."""
  return lowest_mean(as_rows("lp", lp_NxT), k)


def min_k_pp(lp_NxT, mu_NxT, sigma_NxT, k=0.2):
  """Min-K%++: mean of the lowest k fraction of z = (lp - mu) / sigma (sigma floored at SIGMA_FLOOR)."""
  lp_NxT = as_rows("lp", lp_NxT)
  shapes = {"mu": np.shape(mu_NxT), "sigma": np.shape(sigma_NxT)}
  bad = {name: shape for name, shape in shapes.items() if shape != lp_NxT.shape}
  if bad:
    raise InputError(f"mu and sigma must have lp's shape {list(lp_NxT.shape)}, got {bad}")
  sigma_NxT = np.maximum(np.asarray(sigma_NxT, dtype=np.float64), SIGMA_FLOOR)
  z_NxT = (lp_NxT - np.asarray(mu_NxT, dtype=np.float64)) / sigma_NxT
  return lowest_mean(z_NxT, k)
