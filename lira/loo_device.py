"""One block of leave-one-out scoring as one jitted function: raw losses in, every variant's [B, M] scores out.

The jax backend (lira/loo_jax.py) uploads a block's per-token losses as stored (float32), its mask and its keep
columns, and this function does on the device everything the numpy backend does on the host for that block:
  1. the per-token statistic (lira.transforms.to_statistic) with unscored positions set to loss 1 first;
  2. the length reduction (lira.transforms.reduce_length): group:K averages the statistic over K contiguous chunks of
     the scored positions (numpy.array_split's chunks, by a one-hot matrix), min:K / max:K keep the statistic at the
     K smallest / largest losses of each model's vector (a stable sort, as numpy's);
  3. the IN-first order of the models per canary (lira.gram.sorted_groups: a stable sort of ~keep) and, balanced,
     each target's first model of the other class (lira.balanced.first_after);
  4. every variant's scores, by the one array-API copy of the maths the numpy backend runs: lira.balanced
     .sorted_balanced (balanced), lira.gram.sorted_loo (plain OAS), lira.gaussian.loo_diag (plain diagonal); the
     univariate variants take each model's mean over the scored positions, as lira.gaussian.univariate;
  5. the scores put back in model order.
Where the models are sorted (balanced, or plain OAS) a block's canaries share one IN count k, static, or, with
canaries of several counts, one program for the run's counts whose canaries each carry their own count, a traced
value (lira/balanced_padded.py, lira.gram.padded_loo).

Precision: float32 matmuls run at full float32 precision (`jax.default_matmul_precision("highest")` around the
traced body): the default on GPUs (TF32, 10-bit mantissa) and TPUs (bfloat16 passes) cost two orders of magnitude
of the float32 bound. A loss of exactly 0 gets the logit of lira.transforms.LOSS_FLOOR directly (devices that
flush subnormals to zero would otherwise take the log of 0).
"""

import dataclasses
import functools


from lira import balanced
from lira import balanced_padded
from lira import gaussian
from lira import gram
from lira.transforms import LOSS_FLOOR, logit_scale, member_sign, parse_reduction

LOGIT_AT_FLOOR = float(logit_scale(LOSS_FLOOR))


@dataclasses.dataclass(frozen=True)
class Spec:
  """What one block computes (static under jit): the shared settings of the variants and their (covariance, shared)."""
  variants: tuple  # ((covariance, shared), ...)
  statistic: str
  reduction: str | None
  balance_counts: bool
  offline: bool
  offline_shift: str
  floor: float
  precision: str
  masked: bool

  @classmethod
  def of(cls, scorings, masked):
    s = scorings[0]
    return cls(tuple((v.covariance, v.shared) for v in scorings), s.statistic, s.reduction, s.balance_counts,
               s.offline, s.offline_shift, float(s.var_floor), s.precision, bool(masked))

  def width(self, T):
    """D, the positions after the reduction."""
    kind, k = parse_reduction(self.reduction)
    return T if kind is None else k

  def sorts_models(self, T):
    """Whether the models are sorted IN-first (so a block needs one IN count): balanced, or plain OAS with D > 1."""
    return self.balance_counts or any(c == "oas" for c, _ in self.variants) and self.width(T) > 1


def as_float64(loss):
  """A float32 device array as float64, subnormals included, from its bits.

  XLA's CPU backend treats float32 subnormals as 0 (and moves a float32 -> float64 conversion past a max with a
  constant), yet a loss below 1.2e-38 is what a token predicted with a logit margin of about 88 or more gets; numpy
  keeps it, so the device must too: value = mantissa * 2^(exponent - 150), with the implicit bit where normal.
  """
  import jax
  import jax.numpy as jnp
  if loss.dtype != jnp.float32:
    return loss.astype(jnp.float64)
  bits = jax.lax.bitcast_convert_type(loss, jnp.uint32)
  exponent = ((bits >> 23) & 0xFF).astype(jnp.int32)
  mantissa = (bits & 0x7FFFFF).astype(jnp.float64)
  magnitude = jnp.where(exponent == 0, jnp.ldexp(mantissa, -149),
                        jnp.ldexp(mantissa + 2.0**23, exponent - 150))
  magnitude = jnp.where(exponent == 255, jnp.where(mantissa == 0, jnp.inf, jnp.nan), magnitude)
  return jnp.where((bits >> 31) == 1, -magnitude, magnitude)


def statistic(loss, name):
  """lira.transforms.to_statistic on a device array, in its dtype (float32: a loss of 0, or one the device
  flushes to 0, gets the logit of LOSS_FLOOR)."""
  import jax.numpy as jnp
  if name == "loss":
    return loss
  if loss.dtype == jnp.float64:
    floored = jnp.maximum(loss, LOSS_FLOOR)
    return -floored - jnp.log(-jnp.expm1(-floored))
  positive = loss > 0
  floored = jnp.where(positive, loss, 1.0)
  return jnp.where(positive, -floored - jnp.log(-jnp.expm1(-floored)), LOGIT_AT_FLOOR)


def group_index(valid_BxT, k):
  """lira.transforms._group_index on a device array: chunk id of each scored position (-1 elsewhere)."""
  import jax.numpy as jnp
  rank = jnp.cumsum(valid_BxT.astype(jnp.int32), axis=1) - 1
  length = jnp.sum(valid_BxT.astype(jnp.int32), axis=1)
  q, rem = length // k, length % k
  boundary = rem * (q + 1)
  big = rank // jnp.maximum(q + 1, 1)[:, None]
  small = rem[:, None] + (rank - boundary[:, None]) // jnp.maximum(q, 1)[:, None]
  return jnp.where(valid_BxT, jnp.where(rank < boundary[:, None], big, small), -1)


def reduce_length(stat_BxMxT, loss_BxMxT, valid_BxT, reduction):
  """lira.transforms.reduce_length on [B, M, T] device arrays: (x_BxMxD, valid_BxD)."""
  import jax.numpy as jnp
  kind, k = parse_reduction(reduction)
  if kind is None:
    return stat_BxMxT, valid_BxT
  B = stat_BxMxT.shape[0]
  if kind == "group":
    onehot_BxTxK = (group_index(valid_BxT, k)[:, :, None] == jnp.arange(k)).astype(stat_BxMxT.dtype)
    size_BxK = jnp.sum(onehot_BxTxK, axis=1)
    stat = jnp.where(valid_BxT[:, None], stat_BxMxT, 0.0)
    x = jnp.einsum("bmt,btk->bmk", stat, onehot_BxTxK) / size_BxK[:, None]
  else:
    key = jnp.where(valid_BxT[:, None], loss_BxMxT if kind == "min" else -loss_BxMxT, jnp.inf)
    order_BxMxK = jnp.argsort(key, axis=2, stable=True)[:, :, :k]
    x = jnp.take_along_axis(stat_BxMxT, order_BxMxK, axis=2)
  return x, jnp.ones((B, k), bool)


def _univariate(x_BxMxD, valid_BxD):
  import jax.numpy as jnp
  x = (jnp.sum(x_BxMxD, axis=2) / jnp.sum(valid_BxD, axis=1)[:, None])[:, :, None]
  return x, jnp.ones((x.shape[0], 1), bool)


def _after(x, previous):
  """x, computed only after `previous`: the variants' LAPACK calls (eigh) one after another. XLA's CPU runtime runs
  independent operations concurrently, and two concurrent batched eigh calls deadlock jaxlib's LAPACK batch pool on
  a 2-core machine (jaxlib 0.10.2); an optimization barrier does not survive compilation, a data dependency does.
  min(|sum|, 0) is 0 for every finite or infinite sum, so x is unchanged."""
  import jax.numpy as jnp
  return x + jnp.minimum(jnp.abs(jnp.sum(previous)), 0.0).astype(x.dtype)


def block_scores(loss_MxBxT, mask_BxT, keep_MxB, global_vars, *, spec, k):
  """Scores [V, B, M] of every variant of spec on one block (llr; offline: z times the statistic's member sign).

  loss_MxBxT as stored (any float dtype), mask_BxT bool (ignored unless spec.masked), keep_MxB bool; global_vars:
  per variant None or LiRA's fixed (var_in_M, var_out_M); k: the block's IN count where spec sorts the models, or
  the lira.balanced_padded.Layout of a program for every count of the run, each canary's count then read from
  keep_MxB on the device.
  """
  import jax
  import jax.numpy as jnp
  with jax.default_matmul_precision("highest"):
    dt = jnp.float64 if spec.precision == "float64" else jnp.float32
    loss_BxMxT = jnp.swapaxes(loss_MxBxT, 0, 1)
    loss_BxMxT = as_float64(loss_BxMxT) if dt == jnp.float64 else loss_BxMxT.astype(dt)
    B, M, T = loss_BxMxT.shape
    valid_BxT = mask_BxT if spec.masked else jnp.ones((B, T), bool)
    loss_BxMxT = jnp.where(valid_BxT[:, None], loss_BxMxT, 1.0)
    x_BxMxD, valid_BxD = reduce_length(statistic(loss_BxMxT, spec.statistic), loss_BxMxT, valid_BxT, spec.reduction)
    x_BxMxD = jnp.where(valid_BxD[:, None], x_BxMxD, 0.0)
    D = x_BxMxD.shape[2]
    keep_BxM = keep_MxB.T
    sorts = spec.sorts_models(T)
    padded = isinstance(k, balanced_padded.Layout)
    if sorts:
      order_BxM = jnp.argsort((~keep_BxM).astype(jnp.int8), axis=1, stable=True)
      inverse_BxM = jnp.argsort(order_BxM, axis=1)
      xs_BxMxD = jnp.take_along_axis(x_BxMxD, order_BxM[:, :, None], axis=1)
      # a padded program's counts are traced, one per canary (a block mixes counts)
      n_in = jnp.sum(keep_BxM.astype(jnp.int32), axis=1) if padded else k
      first_BxM = balanced.first_after(order_BxM, n_in)
    sign = member_sign(spec.statistic)
    rows = {}  # univariate or not -> (x, valid, centring) of the sorted rows, shared by the variants
    factors = None  # padded balanced OAS: one buffer for every variant's factors of K, used in turn
    diagonal = {}  # padded balanced diagonal fits, by univariate or not: {shared: scores}, both flags scored together
    outs = []
    for (covariance, shared), gv in zip(spec.variants, global_vars):
      uni = covariance == "univariate"
      oas = covariance == "oas" and D > 1
      if spec.balance_counts or oas:
        if uni not in rows:
          x, valid = _univariate(xs_BxMxD, valid_BxD) if uni else (xs_BxMxD, valid_BxD)
          rows[uni] = (x, valid, balanced.centred(x, k) if spec.balance_counts and not padded else None)
        x, valid, centring = rows[uni]
        if oas and outs:  # the eigh calls read x (plain) or its centred rows (balanced)
          x = _after(x, outs[-1])
          centring = None if centring is None else (_after(centring[0], outs[-1]),) + tuple(centring[1:])
        if padded and spec.balance_counts and not oas:  # the class-wise and the shared fit from one pass of sums
          if uni not in diagonal:
            flags = tuple(dict.fromkeys(s for c, s in spec.variants
                                        if (c == "univariate") == uni and not (c == "oas" and D > 1)))
            both, factors = balanced_padded.per_canary(x, n_in, first_BxM, valid, k, factors, oas=False,
                                                       shared=flags, offline=spec.offline, floor=spec.floor,
                                                       offline_shift=spec.offline_shift)
            diagonal[uni] = dict(zip(flags, both))
          out = diagonal[uni][shared]
        elif padded and spec.balance_counts:
          out, factors = balanced_padded.per_canary(x, n_in, first_BxM, valid, k, factors, oas=oas, shared=shared,
                                                    offline=spec.offline, floor=spec.floor,
                                                    offline_shift=spec.offline_shift)
        elif spec.balance_counts:
          out = balanced.sorted_balanced(x, k, first_BxM, valid, oas=oas, shared=shared, offline=spec.offline,
                                         floor=spec.floor, offline_shift=spec.offline_shift, centring=centring)
        elif padded:
          out = _per_canary_plain(x, n_in, valid, k, shared=shared, offline=spec.offline, floor=spec.floor,
                                  offline_shift=spec.offline_shift)
        else:
          out = gram.sorted_loo(x, k, valid, shared, spec.offline, spec.floor, spec.offline_shift)
        out = jnp.take_along_axis(out, inverse_BxM, axis=1)
        outs.append(sign * out if spec.offline else out)
      else:
        x, valid = _univariate(x_BxMxD, valid_BxD) if uni else (x_BxMxD, valid_BxD)
        outs.append(gaussian.loo_diag(x, keep_BxM, valid, shared, spec.offline, sign, spec.floor, gv,
                                      spec.offline_shift, model_axis=1))
    return jnp.stack(outs)


def _per_canary_plain(x_BxMxD, k_B, valid_BxD, lay, **options):
  """lira.gram.padded_loo of canaries with one IN count each (k_B [B]), by jax.vmap over the canaries."""
  import jax

  def one(x_MxD, k, valid_D):
    return gram.padded_loo(x_MxD[None], k, valid_D[None], lay, **options)[0]
  return jax.vmap(one)(x_BxMxD, k_B, valid_BxD)


@functools.lru_cache(maxsize=None)
def jitted():
  """block_scores under jax.jit (spec and k static)."""
  import jax
  return jax.jit(block_scores, static_argnames=("spec", "k"))


def bytes_per_canary(M, T, spec, removed=2):
  """An upper bound on the device memory one canary of a block takes (inputs and XLA's temporaries), in bytes.

  Per canary the block holds the [M, T] losses, statistic and features (a few copies, sorted and centred), the
  balanced removals' gathered rows ([M, S, D] with S <= 2 on LiRA's balanced keep matrix; more with unequal counts,
  bounded by the kept-rows fits' [M, L, D] with L < M / 2 per class), and for OAS the Gram or position-space
  eigenbases ([M, M] or [D, D] plus the [D, min(M, D)] basis) and each target's projections ([M, min(M, D)]). The
  result is about 3x XLA's memory analysis of the compiled block on a CPU (M = 64 and 484, T = 128: 3.1 and 3.3x;
  tests/lira/test_loo_device.py checks it is never below), a margin for other backends' fusion. removed: the most
  rows a target of the block's programs removes (lira.balanced_padded.removed_rows; unequal IN counts remove more).
  """
  item = 8 if spec.precision == "float64" else 4
  D = spec.width(T)
  R = min(M, D)
  per = 4 * M * T + 24 * M * D
  if spec.balance_counts:
    per += 8 * M * D
    if removed > 2:  # each target's removed rows beyond two: gathered rows, projections, their Gram and basis forms
      per += 6 * M * (removed - 2) * (3 * D + min(M, D) + 2 * removed)
  if any(c == "oas" for c, _ in spec.variants) and D > 1:
    per += 12 * M * R + 4 * (min(M, D) ** 2) + 4 * D * R
  return (item * per * len(spec.variants) // 2 + item * 4 * M * T) // 3
