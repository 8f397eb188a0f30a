"""Per-token arrays of trained models, extracted in batches: lp / loss, mu and sigma of causal LMs on token ids.

The per-token functions themselves (token_loss, token_statistics, sequence_statistics) are the model families'
(models.token_loss); this module runs them over many texts or canaries: `batched` / `padded_batches` chunk the
arrays (one compiled shape), `encode_batch` tokenises texts, and `causal_lm_statistics` scores an NNX causal LM
(docs/conventions.md, "Per-token statistics").
"""

import functools

import jax
import numpy as np

from lira.errors import InputError
from models.token_loss import sequence_statistics


def batched(fn, arrays, batch_size, axis=0):
  """Apply `fn(*batch) -> tuple of arrays` to chunks of the arrays' leading axis; the outputs, concatenated along
  `axis` (where their batch dimension is: 1 for per-model stacks [G, B, ...]), as numpy float32 (bool outputs, such
  as top1, stay bool)."""
  n = len(arrays[0])
  parts = [jax.device_get(fn(*(a[i:i + batch_size] for a in arrays))) for i in range(0, n, batch_size)]
  out = (np.concatenate([p[k] for p in parts], axis=axis) for k in range(len(parts[0])))
  return tuple(a if a.dtype == bool else a.astype(np.float32) for a in out)


def encode_batch(tokenizer, texts, max_length):
  """Right-padded token ids [B, T] int32 and mask [B, T] bool of the texts (truncated to max_length tokens)."""
  encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
  if empty := [i for i, e in enumerate(encodings) if not e.ids]:
    raise InputError(f"texts {empty[:10]} encode to no tokens")
  T = min(max_length, max(len(e.ids) for e in encodings))
  ids_BxT = np.zeros((len(encodings), T), np.int32)
  mask_BxT = np.zeros((len(encodings), T), bool)
  for b, e in enumerate(encodings):
    n = min(T, len(e.ids))
    ids_BxT[b, :n], mask_BxT[b, :n] = e.ids[:n], True
  return ids_BxT, mask_BxT


def padded_batches(fn, arrays, batch_size):
  """`batched` with the last batch padded to batch_size (copies of its first row, results dropped), so a jitted
  `fn` sees one shape and compiles once whatever N is."""
  n = len(arrays[0])
  if n == 0:
    raise InputError("no texts to score")
  pad = -n % batch_size
  if pad:
    arrays = tuple(np.concatenate([a, np.repeat(a[-1:], pad, axis=0)]) for a in arrays)
  return tuple(out[:n] for out in batched(fn, arrays, batch_size))


@functools.partial(jax.jit, static_argnums=(0, 4))
def _lm_statistics(graphdef, state, tokens_BxT, mask_BxT, bos_id):
  from flax import nnx
  apply_fn = lambda x, m: nnx.merge(graphdef, state)(x, attention_mask=m)  # noqa: E731
  loss, mu, sigma, top1 = sequence_statistics(apply_fn, tokens_BxT, mask_BxT, bos_id)
  return -loss, mu, sigma, top1


def causal_lm_statistics(module, tokens_BxT, mask_BxT, batch_size=16, bos_id=None):
  """(lp, mu, sigma, top1) [B, T] of an NNX causal LM on token ids: lp = ln p(t_i | t_<i) (float32) and top1 =
  the model's top-1 token there is t_i (bool), from the same forward pass; position 0 and padding are NaN (False)
  (the pretraining-data attacks' convention, docs/conventions.md, "Pretraining-data attacks").
  With bos_id (a shadow run's models, which read BOS first) position 0 is scored too, as ln p(t_0 | BOS).

  The parameters are an argument of the jitted function (not constants folded into it) and the last batch is
  padded, so one compilation serves every call with the same model structure, batch size and length.
  """
  from flax import nnx
  graphdef, state = nnx.split(module)
  fn = lambda tokens, mask: _lm_statistics(graphdef, state, tokens, mask, bos_id)  # noqa: E731
  return padded_batches(fn, (np.asarray(tokens_BxT), np.asarray(mask_BxT)), batch_size)


@functools.partial(jax.jit, static_argnums=(0, 2))
def _kl(graphdef, state, ref_graphdef, ref_state, tokens_BxT, mask_BxT):
  import jax.numpy as jnp
  from flax import nnx
  logp_BxTxV = jax.nn.log_softmax(nnx.merge(graphdef, state)(tokens_BxT, attention_mask=mask_BxT).astype(jnp.float32))
  ref_BxTxV = jax.nn.log_softmax(nnx.merge(ref_graphdef, ref_state)(tokens_BxT, attention_mask=mask_BxT)
                                 .astype(jnp.float32))
  kl_BxT = jnp.sum(jnp.exp(ref_BxTxV) * (ref_BxTxV - logp_BxTxV), axis=-1)
  shifted_BxT = jnp.pad(kl_BxT[:, :-1], ((0, 0), (1, 0)))  # position t is predicted by the logits at t - 1
  scored_BxT = (jnp.arange(tokens_BxT.shape[1])[None] >= 1) & (mask_BxT > 0)
  return (jnp.where(scored_BxT, shifted_BxT, jnp.nan),)


def reference_kl(module, ref_module, tokens_BxT, mask_BxT, batch_size=16):
  """KL(p_ref || p) [B, T] float32 in nats at each predicted position of token ids both causal LMs read (the same
  tokenizer): sum_v p_ref(v | t_<i) (ln p_ref(v | t_<i) - ln p(v | t_<i)) over the vocabulary, for t_i; position 0
  and padding are NaN, as in lp. Both models run on the same batch, so their distributions meet without being
  stored."""
  from flax import nnx
  if module.config.vocab_size != ref_module.config.vocab_size:
    raise InputError(f"the reference model's vocabulary ({ref_module.config.vocab_size}) is not the model's "
                     f"({module.config.vocab_size}): the KL over the vocabulary needs the same one")
  graphdef, state = nnx.split(module)
  ref_graphdef, ref_state = nnx.split(ref_module)
  fn = lambda tokens, mask: _kl(graphdef, state, ref_graphdef, ref_state, tokens, mask)  # noqa: E731
  return padded_batches(fn, (np.asarray(tokens_BxT), np.asarray(mask_BxT)), batch_size)[0]
