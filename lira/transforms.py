"""Per-token statistics and length reductions applied before the Gaussian fits (Rossi et al. 2025, Sec. 3.2)."""

import numpy as np

from lira.errors import InputError

# A stored loss of exactly 0 (below float32's smallest positive number, 1.4e-45: the per-token loss is computed
# without cancellation, so only such a loss rounds to 0) has an infinite logit; it is clipped to that number, whose
# logit, 103.3, is the largest any float32 loss has. Smaller clips (the old 1e-12) made the best-memorised tokens alike.
LOSS_FLOOR = float(np.finfo(np.float32).smallest_subnormal)

STATISTICS = ("logit", "loss")


def logit_scale(loss):
  """LiRA's logit scaling ln p - ln(1 - p) of p = exp(-loss), computed stably as -l - ln(-expm1(-l))."""
  l = np.maximum(np.asarray(loss, dtype=np.float64), LOSS_FLOOR)
  if np.ndim(l) == 0:
    return -l - np.log(-np.expm1(-l))
  out = np.negative(l)  # then in place, the same bits: -(log(-expm1(-l)) + l)
  np.expm1(out, out=out)
  np.negative(out, out=out)
  np.log(out, out=out)
  out += l
  return np.negative(out, out=out)


def to_statistic(loss, statistic="logit"):
  """The per-token statistic LiRA models, in float64: "logit" (default) or the raw "loss"."""
  if statistic == "logit":
    return logit_scale(loss)
  if statistic == "loss":
    return np.asarray(loss, dtype=np.float64)
  raise InputError(f"statistic must be one of {STATISTICS}, got {statistic!r}")


def member_sign(statistic):
  """+1 if members have larger values of the statistic (logit), -1 if smaller (loss)."""
  return {"logit": 1.0, "loss": -1.0}[statistic]


def parse_reduction(reduction):
  """Parse None / "group:K" / "min:K" / "max:K" into (kind, K); kind is None for no reduction."""
  if reduction is None or reduction in ("", "none", "None"):
    return None, None
  kind, sep, k = str(reduction).partition(":")
  if kind not in ("group", "min", "max") or not sep or not k.isdigit() or int(k) < 1:
    raise InputError(f"reduction must be None, 'group:K', 'min:K' or 'max:K' with K >= 1, got {reduction!r}")
  return kind, int(k)


def normal_reduction(reduction):
  """A reduction in its normal form: None, or "group:K" / "min:K" / "max:K" (InputError when it is none of them)."""
  kind, k = parse_reduction(reduction)
  return None if kind is None else f"{kind}:{k}"


def check_reduction(reduction, length_N):
  """Parse a reduction and check every canary has at least K scored positions (length_N of them); returns (kind, K)."""
  kind, k = parse_reduction(reduction)
  if kind is None:
    return kind, k
  short = np.flatnonzero(np.asarray(length_N) < k)
  if short.size:
    raise InputError(
        f"reduction {reduction!r} needs at least {k} scored positions, but canary {short[0]} has "
        f"{length_N[short[0]]} ({short.size} canaries are too short)")
  return kind, k


def _group_index(valid_NxT, k):
  """Chunk id of every valid position (numpy.array_split of the valid positions into k chunks); -1 if invalid."""
  rank_NxT = np.cumsum(valid_NxT, axis=1) - 1
  length_N = valid_NxT.sum(axis=1)
  q_N, rem_N = np.divmod(length_N, k)
  boundary_N = rem_N * (q_N + 1)
  big = rank_NxT // np.maximum(q_N + 1, 1)[:, None]
  small = rem_N[:, None] + (rank_NxT - boundary_N[:, None]) // np.maximum(q_N, 1)[:, None]
  chunk_NxT = np.where(rank_NxT < boundary_N[:, None], big, small)
  return np.where(valid_NxT, chunk_NxT, -1)


def reduce_length(stat_MxNxT, loss_MxNxT, reduction, mask_NxT=None):
  """Apply a length reduction to every model's vector (docs/conventions.md, "Length reductions").

  group:K averages the statistic over K contiguous chunks of the valid positions; min:K / max:K keep
  the statistic at the K smallest / largest LOSSES of each model's own vector, as sorted order
  statistics (ascending loss for min, descending for max). Returns (stat_MxNxK, mask_NxK or None).
  """
  if parse_reduction(reduction)[0] is None:
    return stat_MxNxT, mask_NxT
  M, N, T = stat_MxNxT.shape
  valid_NxT = np.ones((N, T), bool) if mask_NxT is None else np.asarray(mask_NxT, bool)
  kind, k = check_reduction(reduction, valid_NxT.sum(axis=1))
  if kind == "group":
    chunk_NxT = _group_index(valid_NxT, k)
    onehot_NxTxK = (chunk_NxT[:, :, None] == np.arange(k)).astype(np.float64)
    size_NxK = onehot_NxTxK.sum(axis=1)
    stat = np.where(valid_NxT, stat_MxNxT, 0.0)
    return np.einsum("mnt,ntk->mnk", stat, onehot_NxTxK) / size_NxK, None
  loss = np.asarray(loss_MxNxT, dtype=np.float64)
  key = np.where(valid_NxT, loss, np.inf) if kind == "min" else np.where(valid_NxT, -loss, np.inf)
  order_MxNxK = np.argsort(key, axis=2, kind="stable")[:, :, :k]
  return np.take_along_axis(stat_MxNxT, order_MxNxK, axis=2), None
