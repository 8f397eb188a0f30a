"""Per-token loss of a model family: -ln p(target), the mean / std of log-probabilities over the vocabulary, and
whether the model's top-1 token is the target.

The functions a family's loss and statistics are built from (models.functional_model, models.lstm); extracting
these arrays from trained models in batches is training.per_token's.

mu_i = sum_v p_v ln p_v and sigma_i^2 = sum_v p_v (ln p_v - mu_i)^2 at each position (Min-K%++, Zhang et al. 2024;
docs/conventions.md, "Per-token statistics"), so the pretraining-data attacks can be recomputed from stored arrays
without the model. top1_i = [argmax_v logits_v = target] (the first index on ties, as jnp.argmax and
torch.argmax give it) is what EZ-MIA's error zone reads (the positions where it is False).

The loss -ln p_t is computed without cancellation. With logits z shifted by their maximum (z <= 0) and
r = sum_{v != t} exp(z_v), the loss is ln(exp(z_t) + r) - z_t = log1p(r + expm1(z_t)) - z_t. A memorised token is
the maximum (z_t = 0), so the loss is log1p(r): relative precision of float32 even for r ~ 1e-30, where the
textbook logsumexp(z) - z_t rounds exp(0) + r to 1 and returns 0. Otherwise z_t < 0, r >= 1 (it holds the
maximum) and both terms are >= 0, so nothing cancels either. It is the one loss of the project: the trainer
differentiates it (d/dz_v = p_v - [v = t], as cross-entropy; every intermediate is finite, so no NaN gradient).
"""

import jax
import jax.numpy as jnp

from models import precision


def _shifted_exp(logits_BxTxV):
  """(z, exp z) with z = logits - max in float32; the max is a constant for gradients (the loss does not depend on
  it)."""
  z_BxTxV = logits_BxTxV.astype(jnp.float32)
  z_BxTxV = z_BxTxV - jax.lax.stop_gradient(jnp.max(z_BxTxV, axis=-1, keepdims=True))
  return z_BxTxV, jnp.exp(z_BxTxV)


def _loss_and_sum(z_BxTxV, e_BxTxV, targets_BxT):
  """(-ln p(target), sum_v exp z_v), each [B, T], from shifted logits: log1p(r + expm1(z_t)) - z_t (module doc)."""
  is_target_BxTxV = jnp.arange(z_BxTxV.shape[-1]) == targets_BxT[..., None]
  rest_BxT = jnp.sum(jnp.where(is_target_BxTxV, 0.0, e_BxTxV), axis=-1)  # fused: no second pass over V
  z_t_BxT = jnp.take_along_axis(z_BxTxV, targets_BxT[..., None], axis=-1)[..., 0]
  return jnp.log1p(rest_BxT + jnp.expm1(z_t_BxT)) - z_t_BxT, rest_BxT + jnp.exp(z_t_BxT)


@jax.custom_vjp
def token_loss(logits_BxTxV, targets_BxT):
  """-ln p(target) [B, T] float32 from logits, differentiable, with float32 relative precision for tiny losses."""
  z_BxTxV, e_BxTxV = _shifted_exp(logits_BxTxV)
  return _loss_and_sum(z_BxTxV, e_BxTxV, targets_BxT)[0]


def _token_loss_fwd(logits_BxTxV, targets_BxT):
  z_BxTxV, e_BxTxV = _shifted_exp(logits_BxTxV)
  is_target_BxTxV = jnp.arange(z_BxTxV.shape[-1]) == targets_BxT[..., None]
  rest_BxT = jnp.sum(jnp.where(is_target_BxTxV, 0.0, e_BxTxV), axis=-1)
  z_t_BxT = jnp.take_along_axis(z_BxTxV, targets_BxT[..., None], axis=-1)[..., 0]
  arg_BxT = rest_BxT + jnp.expm1(z_t_BxT)  # the same operations as _loss_and_sum: the same loss, bit for bit
  return jnp.log1p(arg_BxT) - z_t_BxT, (e_BxTxV, arg_BxT, targets_BxT, jnp.zeros((), logits_BxTxV.dtype))


def _token_loss_bwd(saved, g_BxT):
  """d loss / d z_v = p_v - [v = t] with p_v = e_v / (1 + arg): one pass over the vocabulary (autodiff of the loss
  made five: the exp's, the masked sum's, expm1's, a scatter for z_t, and their sum), each term rounded as
  autodiff rounds it."""
  e_BxTxV, arg_BxT, targets_BxT, like = saved  # like: a scalar of the logits' dtype
  scale_BxT = g_BxT / (1.0 + arg_BxT)
  is_target_BxTxV = jnp.arange(e_BxTxV.shape[-1]) == targets_BxT[..., None]
  dz_BxTxV = e_BxTxV * scale_BxT[..., None] - jnp.where(is_target_BxTxV, g_BxT[..., None], 0.0)
  return dz_BxTxV.astype(like.dtype), None


token_loss.defvjp(_token_loss_fwd, _token_loss_bwd)


ACCELERATOR_CHUNK_BYTES = 2**31  # float32 logits of one chunk, per model, on a GPU or TPU


def chunk_rows(vocab_size, backend=None):
  """Rows per chunk of linear_token_loss on `backend` (default: jax's default backend).

  CPU: logits of 256 rows stay in a 2-core CPU's caches up to V ~ 8k (measured 2.2x faster than whole logits at
  V = 2,048, N = 2,048); at V = 50,304 no chunk does, and 1,024 rows was fastest. GPU / TPU: as many rows as keep a
  chunk's float32 logits within ACCELERATOR_CHUNK_BYTES (10,672 at V = 50,304, so the paper's 8,192 positions a step
  are one chunk): on an H200 the head and its loss at G = 16 took 43.8 ms in one chunk of 8,192 rows against 72.7 ms
  in chunks of 1,024 (BENCHMARKS.md, "Shadow training on one accelerator"). The larger chunk's memory is the group
  size rule's to weigh (training.group_plan compiles the step it runs)."""
  if (backend or jax.default_backend()) == "cpu":
    return 256 if vocab_size <= 8192 else 1024
  return max(1024, ACCELERATOR_CHUNK_BYTES // (4 * vocab_size))


def linear_token_loss(x_NxH, kernel_HxV, bias_V, targets_N, rows=None):
  """token_loss of the logits x W + b [N] without materialising them whole: chunks of `rows` rows (default
  chunk_rows(V) on jax's default backend) are computed, scored and, in the backward pass, recomputed for their
  gradient, so a chunk's logits and gradient stay in cache (CPU) or within a memory budget (GPU, TPU); each row's
  loss is token_loss's, and its gradient the same p - [v = t].

  The products x W are taken in x's dtype (bfloat16 features: bfloat16 operands) and summed in float32, so the
  logits, the loss and d W are float32 whatever the compute dtype; d x comes back in x's dtype."""
  rows = min(rows or chunk_rows(kernel_HxV.shape[1]), len(x_NxH))
  pad = -len(x_NxH) % rows  # padding rows get no cotangent, so nothing of theirs reaches the gradients
  x_CxRxH = jnp.pad(x_NxH, ((0, pad), (0, 0))).reshape(-1, rows, x_NxH.shape[1])
  targets_CxR = jnp.pad(targets_N, (0, pad)).reshape(-1, rows)
  return _chunked_loss(x_CxRxH, kernel_HxV, bias_V, targets_CxR).reshape(-1)[:len(x_NxH)]


def _chunk_logits(x_RxH, kernel_HxV, bias_V):
  return precision.matmul(x_RxH, kernel_HxV, x_RxH.dtype) + bias_V  # as nnx.Linear computes them, float32 sums


@jax.custom_vjp
def _chunked_loss(x_CxRxH, kernel_HxV, bias_V, targets_CxR):
  return _chunked_fwd(x_CxRxH, kernel_HxV, bias_V, targets_CxR)[0]


def _chunked_fwd(x_CxRxH, kernel_HxV, bias_V, targets_CxR):
  def chunk(xs):
    x_RxH, targets_R = xs
    loss_R, (e_RxV, arg_R, _, _) = _token_loss_fwd(_chunk_logits(x_RxH, kernel_HxV, bias_V), targets_R)
    return loss_R, arg_R

  loss_CxR, arg_CxR = jax.lax.map(chunk, (x_CxRxH, targets_CxR))
  return loss_CxR, (x_CxRxH, kernel_HxV, bias_V, targets_CxR, arg_CxR)


def _chunked_bwd(saved, g_CxR):
  """Per chunk: logits recomputed (the same operations, so the same floats), d z = p - [v = t] as token_loss's VJP,
  then d x = d z W^T, and d W, d b accumulated over chunks."""
  x_CxRxH, kernel_HxV, bias_V, targets_CxR, arg_CxR = saved

  def chunk(carry, xs):
    dkernel_HxV, dbias_V = carry
    x_RxH, targets_R, arg_R, g_R = xs
    _, e_RxV = _shifted_exp(_chunk_logits(x_RxH, kernel_HxV, bias_V))
    dz_RxV = _token_loss_bwd((e_RxV, arg_R, targets_R, jnp.zeros((), jnp.float32)), g_R)[0]
    dx_RxH = precision.matmul(dz_RxV, kernel_HxV.T, x_RxH.dtype).astype(x_RxH.dtype)
    return (dkernel_HxV + precision.matmul(x_RxH.T, dz_RxV, x_RxH.dtype), dbias_V + dz_RxV.sum(axis=0)), dx_RxH

  zeros = (jnp.zeros_like(kernel_HxV), jnp.zeros_like(bias_V))
  (dkernel_HxV, dbias_V), dx_CxRxH = jax.lax.scan(chunk, zeros, (x_CxRxH, targets_CxR, arg_CxR, g_CxR))
  return dx_CxRxH, dkernel_HxV, dbias_V, None


_chunked_loss.defvjp(_chunked_fwd, _chunked_bwd)


def token_statistics(logits_BxTxV, targets_BxT):
  """(loss, mu, sigma, top1), each [B, T]: -ln p(target) and the moments of ln p under p (float32, from float32
  logits), and top1 (bool): the logits' argmax is the target.

  With z = logits - max and e = exp(z), s = sum e: ln p = z - ln s, so mu = E_p[z] - ln s and sigma^2 =
  E_p[(z - E_p[z])^2], where E_p[f] = sum(e f) / s. This never forms ln p or p over the vocabulary (measured
  1.3x faster than log_softmax at V = 50,304; BENCHMARKS.md); the variance is two-pass, so no cancellation. The
  loss's sum without the target (module doc) costs 1.06x over summing all of e (B * T = 2,048, V = 50,304, CPU).
  """
  z_BxTxV, e_BxTxV = _shifted_exp(logits_BxTxV)
  loss_BxT, s_BxT = _loss_and_sum(z_BxTxV, e_BxTxV, targets_BxT)
  log_s_BxT = jnp.log(s_BxT)
  mean_z_BxT = jnp.sum(e_BxTxV * z_BxTxV, axis=-1) / s_BxT
  var_BxT = jnp.sum(e_BxTxV * jnp.square(z_BxTxV - mean_z_BxT[..., None]), axis=-1) / s_BxT
  top1_BxT = jnp.argmax(z_BxTxV, axis=-1) == targets_BxT
  return loss_BxT, mean_z_BxT - log_s_BxT, jnp.sqrt(var_BxT), top1_BxT


def with_bos(tokens_BxT, bos_id):
  """Inputs that predict every token of tokens_BxT: BOS, then tokens_BxT without its last token."""
  bos_Bx1 = jnp.full((tokens_BxT.shape[0], 1), bos_id, tokens_BxT.dtype)
  return jnp.concatenate([bos_Bx1, tokens_BxT[:, :-1]], axis=1)


def sequence_statistics(apply_fn, tokens_BxT, mask_BxT=None, bos_id=None):
  """(loss, mu, sigma, top1) [B, T] for a batch of sequences under `apply_fn(inputs_BxT, mask_BxT) ->
  logits_BxTxV` (token_statistics).

  With `bos_id`, a BOS token is prepended and all T positions are scored (the shadow-model convention). Without
  it, position t >= 1 is scored from tokens < t and position 0, which nothing predicts, is NaN (the
  pretraining-data convention: the first token is never scored). Padded positions (mask 0) are NaN too, and False
  in top1.
  """
  tokens_BxT = jnp.asarray(tokens_BxT)
  if bos_id is not None:
    inputs_BxT = with_bos(tokens_BxT, bos_id)
    in_mask_BxT = None if mask_BxT is None else jnp.concatenate(
        [jnp.ones_like(mask_BxT[:, :1]), mask_BxT[:, :-1]], axis=1)
    stats = token_statistics(apply_fn(inputs_BxT, in_mask_BxT), tokens_BxT)
    scored_BxT = jnp.ones(tokens_BxT.shape, bool)
  else:
    logits_BxTxV = apply_fn(tokens_BxT, mask_BxT)
    shifted = token_statistics(logits_BxTxV[:, :-1], tokens_BxT[:, 1:])
    stats = tuple(jnp.pad(s, ((0, 0), (1, 0))) for s in shifted)
    scored_BxT = jnp.arange(tokens_BxT.shape[1])[None] >= 1
  if mask_BxT is not None:
    scored_BxT = scored_BxT & (jnp.asarray(mask_BxT) > 0)
  return tuple(jnp.where(scored_BxT, s, False if s.dtype == jnp.bool_ else jnp.nan) for s in stats)
