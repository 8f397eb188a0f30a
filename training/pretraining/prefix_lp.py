"""Log-probabilities of texts under prefixes, each prefix run once and its state reused (ReCaLL, EM-MIA).

cond_lp[x, i] = ln p(t_i | P, t_<i) for text x = t_0 t_1 ... under a prefix P of token ids: position 0 holds
ln p(t_0 | P), read from the prefix's last logits; padding is NaN (docs/conventions.md, "Pretraining-data
attacks"). With `bos_id` the sequence is [BOS] + P + x (the shadow-run convention of
models.token_loss.sequence_statistics; an LSTM shadow model was trained that way).

The prefix's state is computed once and broadcast over every batch of texts: GPT-NeoX's per-layer keys and values
after rotary (models.gpt_neox.KVCache; texts continue at the positions after the prefix's real tokens), the LSTM's
per-layer (c, h) after the prefix's last real token. A text then costs its own tokens only.

Fixed shapes, so nothing recompiles per call or per last batch: parameters are arguments of the jitted functions
(nnx.split), never closed over; prefixes are right-padded to a power-of-two length (at least 8; pair_lp uses the
longest text of the whole set, so chunks of rows share it); texts go in batches of exactly `batch_size` rows, the
last batch padded with masked rows; pair_lp's prefixes go `prefix_batch` at a time, the last group padded too.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lira.errors import InputError
from models.gpt_neox import GPTNeoXForCausalLM
from models.lstm import LSTMLanguageModel
from models.token_loss import token_loss


def _bucket(n):
  """Padded prefix length: the next power of two, at least 8."""
  return max(8, 1 << (int(n) - 1).bit_length())


def _check_module(module):
  if not isinstance(module, (GPTNeoXForCausalLM, LSTMLanguageModel)):
    raise InputError(f"prefix log-probabilities need a GPT-NeoX or LSTM module, got {type(module).__name__}")


def _check_texts(module, ids_NxT, mask_NxT):
  """Right-padded texts with at least one token each, ids inside the vocabulary."""
  ids_NxT, mask_NxT = np.asarray(ids_NxT), np.asarray(mask_NxT, bool)
  if ids_NxT.ndim != 2 or ids_NxT.shape != mask_NxT.shape:
    raise InputError(f"ids {list(ids_NxT.shape)} and mask {list(mask_NxT.shape)} must both be [N, T]")
  lengths_N = mask_NxT.sum(axis=1)
  if (lengths_N == 0).any():
    raise InputError(f"texts {np.flatnonzero(lengths_N == 0)[:10].tolist()} have no tokens (mask all False)")
  if not (mask_NxT == (np.arange(mask_NxT.shape[1]) < lengths_N[:, None])).all():
    raise InputError("mask must be right-padded: True on each text's tokens, then False")
  vocab = module.config.vocab_size
  if ids_NxT[mask_NxT].min(initial=0) < 0 or ids_NxT[mask_NxT].max(initial=0) >= vocab:
    raise InputError(f"token ids must lie in [0, {vocab}) (the model's vocabulary)")
  return ids_NxT.astype(np.int32), mask_NxT, lengths_N


def check_context(module, prefix_len, text_len, bos_id=None):
  """InputError if [BOS] + a prefix of prefix_len tokens + a text of text_len tokens exceeds the model's context."""
  context = getattr(module.config, "max_position_embeddings", None)  # the LSTM has no limit
  total = (bos_id is not None) + int(prefix_len) + int(text_len)
  if context is not None and total > context:
    raise InputError(f"prefix ({prefix_len} tokens{' + BOS' if bos_id is not None else ''}) + text ({text_len} "
                     f"tokens) = {total} tokens exceeds the model's context (max_position_embeddings = {context})")


@functools.lru_cache(maxsize=32)
def _prefix_fn(graphdef):
  """jit of (state, ids_CxS, mask_CxS) -> (prefix state, last real logits_CxV), prefixes right-padded."""
  def run(state, ids_CxS, mask_CxS):
    module = nnx.merge(graphdef, state)
    if isinstance(module, GPTNeoXForCausalLM):
      logits_CxSxV, cache = module.prefill(ids_CxS, mask_CxS)
    else:
      logits_CxSxV, cache = module(ids_CxS, mask_CxS, return_carries=True)
    last_C = jnp.sum(mask_CxS, axis=-1) - 1
    return cache, logits_CxSxV[jnp.arange(ids_CxS.shape[0]), last_C]
  return jax.jit(run)


@functools.lru_cache(maxsize=32)
def _text_fn(graphdef):
  """jit of (state, prefix state, last logits_CxV, ids_BxT, mask_BxT) -> lp_CxBxT of every text after every prefix."""
  def run(state, cache, last_logits_CxV, ids_BxT, mask_BxT):
    module = nnx.merge(graphdef, state)
    (C, _), (B, T) = last_logits_CxV.shape, ids_BxT.shape
    ids_CBxT, mask_CBxT = jnp.tile(ids_BxT, (C, 1)), jnp.tile(mask_BxT, (C, 1))  # row c * B + b: prefix c, text b
    if isinstance(module, GPTNeoXForCausalLM):
      logits_CBxTxV = module.extend(ids_CBxT, cache, mask_CBxT)  # groups of B rows read one cache row each
    else:
      carries = jax.tree.map(lambda x: jnp.repeat(x, B, axis=0), cache)
      logits_CBxTxV = module(ids_CBxT, initial_carries=carries)
    first_CBx1 = token_loss(jnp.repeat(last_logits_CxV, B, axis=0)[:, None], ids_CBxT[:, :1])
    rest_CBxT1 = token_loss(logits_CBxTxV[:, :-1], ids_CBxT[:, 1:])
    lp_CBxT = -jnp.concatenate([first_CBx1, rest_CBxT1], axis=1)
    return jnp.where(mask_CBxT, lp_CBxT, jnp.nan).reshape(C, B, T)
  return jax.jit(run)


def _prefix_batch(prefixes, S, bos_id):
  """Right-padded ids_CxS, mask_CxS of token-id lists, BOS first with bos_id."""
  ids_CxS, mask_CxS = np.zeros((len(prefixes), S), np.int32), np.zeros((len(prefixes), S), bool)
  for c, prefix in enumerate(prefixes):
    tokens = ([] if bos_id is None else [bos_id]) + list(prefix)
    ids_CxS[c, :len(tokens)], mask_CxS[c, :len(tokens)] = tokens, True
  return ids_CxS, mask_CxS


def _texts_under(fn, state, cache, last_logits_CxV, ids_NxT, mask_NxT, batch_size):
  """lp_CxNxT of all texts after the C cached prefixes, in batches of exactly batch_size rows."""
  N, T = ids_NxT.shape
  parts = []
  for start in range(0, N, batch_size):
    ids_BxT = np.zeros((batch_size, T), np.int32)
    mask_BxT = np.zeros((batch_size, T), bool)
    n = min(batch_size, N - start)
    ids_BxT[:n], mask_BxT[:n] = ids_NxT[start:start + n], mask_NxT[start:start + n]
    parts.append(np.asarray(jax.device_get(fn(state, cache, last_logits_CxV, ids_BxT, mask_BxT)))[:, :n])
  return np.concatenate(parts, axis=1).astype(np.float32)


def conditional_lp(module, prefix_ids, ids_NxT, mask_NxT, batch_size=16, bos_id=None):
  """lp_NxT float32 of each right-padded text with the token ids `prefix_ids` prepended (module doc); the prefix is
  run once and its state reused for every batch."""
  _check_module(module)
  ids_NxT, mask_NxT, lengths_N = _check_texts(module, ids_NxT, mask_NxT)
  prefix = [int(t) for t in np.asarray(prefix_ids).reshape(-1)]
  if not prefix and bos_id is None:
    raise InputError("an empty prefix needs bos_id: nothing would predict a text's first token")
  check_context(module, len(prefix), lengths_N.max(), bos_id)
  graphdef, state = nnx.split(module)
  ids_1xS, mask_1xS = _prefix_batch([prefix], _bucket(len(prefix) + (bos_id is not None)), bos_id)
  cache, last_logits_1xV = _prefix_fn(graphdef)(state, ids_1xS, mask_1xS)
  return _texts_under(_text_fn(graphdef), state, cache, last_logits_1xV, ids_NxT, mask_NxT, batch_size)[0]


def pair_lp(module, ids_NxT, mask_NxT, rows=None, batch_size=16, prefix_batch=4, bos_id=None):
  """lp_RxNxT float32: [i, x] is text x's lp with the real tokens of text rows[i] alone as prefix (EM-MIA's pairs,
  Kim et al. 2024, Sec. 4); rows defaults to all N, and a subset lets a caller write chunks and resume. Each
  prefix is run once; `prefix_batch` prefixes at a time meet each batch of `batch_size` texts (one call holds
  prefix_batch * batch_size x T x V float32 logits: lower them for a 50k vocabulary)."""
  _check_module(module)
  ids_NxT, mask_NxT, lengths_N = _check_texts(module, ids_NxT, mask_NxT)
  N = len(ids_NxT)
  rows = np.arange(N) if rows is None else np.asarray(rows, np.int64).reshape(-1)
  if len(rows) and (rows.min() < 0 or rows.max() >= N):
    raise InputError(f"rows must index the {N} texts, got values in [{rows.min()}, {rows.max()}]")
  # Every check over all N texts, not only these rows: a chunked run fails at its first chunk, never half-way.
  check_context(module, lengths_N.max(), lengths_N.max(), bos_id)
  S = _bucket(lengths_N.max() + (bos_id is not None))
  graphdef, state = nnx.split(module)
  prefix_fn, text_fn = _prefix_fn(graphdef), _text_fn(graphdef)
  out_RxNxT = np.empty((len(rows), N, ids_NxT.shape[1]), np.float32)
  for start in range(0, len(rows), prefix_batch):
    chunk = rows[start:start + prefix_batch]
    padded = np.concatenate([chunk, np.full(prefix_batch - len(chunk), chunk[0])])  # fixed C: no recompile
    ids_CxS, mask_CxS = _prefix_batch([ids_NxT[r, :lengths_N[r]] for r in padded], S, bos_id)
    cache, last_logits_CxV = prefix_fn(state, ids_CxS, mask_CxS)
    lp_CxNxT = _texts_under(text_fn, state, cache, last_logits_CxV, ids_NxT, mask_NxT, batch_size)
    out_RxNxT[start:start + len(chunk)] = lp_CxNxT[:len(chunk)]
  return out_RxNxT


def compile_count(graphdef):
  """Compiled variants of the two jitted functions for this model structure (tests: nothing recompiles)."""
  return _prefix_fn(graphdef)._cache_size() + _text_fn(graphdef)._cache_size()
