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
  the model's top-1 token there is t_i (bool), from the same forward pass; position 0 and padding are NaN (False) (the pretraining-data attacks' convention, docs/conventions.md, "Pretraining-data attacks").
  With bos_id (a shadow run's models, which read BOS first) position 0 is scored too, as ln p(t_0 | BOS).

  The parameters are an argument of the jitted function (not constants folded into it) and the last batch is
  padded, so one compilation serves every call with the same model structure, batch size and length.
  """
  from flax import nnx
  graphdef, state = nnx.split(module)
  fn = lambda tokens, mask: _lm_statistics(graphdef, state, tokens, mask, bos_id)  # noqa: E731
  return padded_batches(fn, (np.asarray(tokens_BxT), np.asarray(mask_BxT)), batch_size)
