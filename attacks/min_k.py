"""Min-K% (Shi et al. 2024) and Min-K%++ (Zhang et al. 2024) on stored per-token arrays; higher = member.

Both average the lowest max(1, int(k n)) values over a text's n scored positions. The official code uses int(k n)
and gets NaN when it is 0 (short texts); the floor of one token is this project's deliberate departure.
"""

import numpy as np

from attacks.rows import as_rows
from lira.errors import InputError

DEFAULT_K = 0.2  # the fraction of each text's lowest-likelihood tokens averaged (Min-K%'s paper default)

# Min-K%++ divides by sigma, the spread of ln p under the model's distribution, which is 0 when that distribution is
# one-hot or uniform (then lp = mu too). Sigma is raised to this floor (nats), so z stays finite: 0 / floor = 0.
SIGMA_FLOOR = 1e-6


def _check_k(k):
  if not 0.0 < k <= 1.0:
    raise InputError(f"k must lie in (0, 1], got {k}")


def lowest_mean(values_NxT, k):
  """Mean of the lowest max(1, int(k n)) finite values of each row, n = its number of finite values.

  Only the lowest max-count columns are needed, so a partition (linear time) isolates them before the sort; the
  sums are float64.
  """
  _check_k(k)
  values_NxT = np.asarray(values_NxT)
  if values_NxT.dtype not in (np.float32, np.float64):
    values_NxT = values_NxT.astype(np.float64)
  finite_NxT = np.isfinite(values_NxT)
  n_N = finite_NxT.sum(axis=1)
  count_N = np.maximum(1, (k * n_N).astype(np.int64))
  lowest_NxK = np.where(finite_NxT, values_NxT, np.inf)  # NaN last
  K = int(count_N.max())
  if K < lowest_NxK.shape[1]:
    lowest_NxK = np.partition(lowest_NxK, K - 1, axis=1)[:, :K]  # the K lowest of each row, in any order
  sorted_NxK = np.sort(lowest_NxK, axis=1)
  keep_NxK = np.arange(K)[None] < count_N[:, None]
  return np.where(keep_NxK, sorted_NxK, 0.0).sum(axis=1, dtype=np.float64) / count_N


def min_k(lp_NxT, k=DEFAULT_K):
  """Min-K%: mean of the lowest k fraction of each text's lp."""
  return lowest_mean(as_rows("lp", lp_NxT), k)


def min_k_pp(lp_NxT, mu_NxT, sigma_NxT, k=DEFAULT_K):
  """Min-K%++: mean of the lowest k fraction of z = (lp - mu) / sigma (sigma floored at SIGMA_FLOOR)."""
  lp_NxT = as_rows("lp", lp_NxT)
  shapes = {"mu": np.shape(mu_NxT), "sigma": np.shape(sigma_NxT)}
  bad = {name: shape for name, shape in shapes.items() if shape != lp_NxT.shape}
  if bad:
    raise InputError(f"mu and sigma must have lp's shape {list(lp_NxT.shape)}, got {bad}")
  sigma_NxT = np.maximum(np.asarray(sigma_NxT, dtype=np.float64), SIGMA_FLOOR)
  z_NxT = (lp_NxT - np.asarray(mu_NxT, dtype=np.float64)) / sigma_NxT
  return lowest_mean(z_NxT, k)
