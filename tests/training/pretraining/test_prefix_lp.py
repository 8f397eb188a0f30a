"""Prefix log-probabilities from a cached prefix against the full forward pass on the unpadded concatenation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lira.errors import InputError
from models import hf_convert
from models.gpt_neox import GPTNeoXForCausalLM
from models.lstm import LSTMConfig, LSTMLanguageModel
from training.pretraining import prefix_lp
from test_gpt_neox import random_params, tiny_config  # the tiny GPT-NeoX and its sharp random weights

V = 101
# Cached and full paths sum the same terms in a different order (keys split into cache and new tokens,
# shapes that block matmuls differently): ~1e-6 on these O(1-10) logits / lps after 2 layers of <= 96-term float32
# products. 1e-5 is 10x above that; a wrong RoPE position or a leaked pad moves lps by O(0.1-1).
TOL = dict(rtol=1e-5, atol=1e-5)


def neox(max_positions=2048, seed=0):
  config = tiny_config(max_position_embeddings=max_positions)
  module = GPTNeoXForCausalLM(config, rngs=nnx.Rngs(0))
  nnx.update(module, hf_convert.params_from_hf(config, random_params(config, seed)))
  return module


def lstm(seed=0):
  module = LSTMLanguageModel(LSTMConfig(vocab_size=V, embed_dim=16, hidden_dim=24, num_layers=2), rngs=nnx.Rngs(seed))
  # Scale weights up so the state carries information from the prefix (a missing prefix shows as O(0.1) changes).
  nnx.update(module, jax.tree.map(lambda p: 3 * p, nnx.state(module, nnx.Param)))
  return module


def texts(lengths, T, seed=1):
  """Right-padded ids_NxT, mask_NxT with the given real lengths; pads hold random ids (they must not matter)."""
  rng = np.random.default_rng(seed)
  ids_NxT = rng.integers(0, V, (len(lengths), T)).astype(np.int32)
  mask_NxT = np.arange(T) < np.asarray(lengths)[:, None]
  return ids_NxT, mask_NxT


def full_lp(module, prefix, text, bos_id=None):
  """Reference: float64 log-softmax of one unpadded forward pass on [BOS] + prefix + text; text's lp."""
  seq = ([] if bos_id is None else [bos_id]) + list(prefix) + list(text)
  logits = np.asarray(module(jnp.asarray([seq]))[0], np.float64)
  lsm = logits - logits.max(-1, keepdims=True)
  lsm = lsm - np.log(np.exp(lsm).sum(-1, keepdims=True))
  offset = len(seq) - len(text)
  return np.array([lsm[offset + i - 1, t] for i, t in enumerate(text)])


def reference(module, prefix, ids_NxT, mask_NxT, bos_id=None):
  out = np.full(ids_NxT.shape, np.nan)
  for n in range(len(ids_NxT)):
    text = ids_NxT[n, mask_NxT[n]]
    out[n, :len(text)] = full_lp(module, prefix, text, bos_id)
  return out


def test_prefill_extend_equal_full_forward_left_and_right_padded_prefixes():
  """Model level: logits of texts after cached prefixes (one left-, one right-padded) equal the full pass."""
  module = neox()
  rng = np.random.default_rng(0)
  p0, p1 = rng.integers(0, V, 3), rng.integers(0, V, 6)
  ids_CxS = np.zeros((2, 7), np.int32)
  mask_CxS = np.zeros((2, 7), bool)
  ids_CxS[0, 4:], mask_CxS[0, 4:] = p0, True  # left padding
  ids_CxS[1, :6], mask_CxS[1, :6] = p1, True  # right padding
  ids_CxS[~mask_CxS] = 55  # pad ids that would change every logit if attended to
  prefix_logits, cache = module.prefill(jnp.asarray(ids_CxS), jnp.asarray(mask_CxS))
  ids_BxT, mask_BxT = texts([5, 2, 5, 3], 5)  # groups of 2 rows per prefix
  logits_BxTxV = np.asarray(module.extend(jnp.asarray(ids_BxT), cache, jnp.asarray(mask_BxT)))
  for b, prefix in enumerate([p0, p0, p1, p1]):
    text = ids_BxT[b, mask_BxT[b]]
    want = np.asarray(module(jnp.asarray([list(prefix) + list(text)]))[0])
    np.testing.assert_allclose(logits_BxTxV[b, :len(text)], want[len(prefix):], **TOL)
    c = b // 2
    np.testing.assert_allclose(np.asarray(prefix_logits)[c, mask_CxS[c]], want[:len(prefix)], **TOL)


@pytest.mark.parametrize("prefix_len,lengths,bos_id", [(1, [4, 9, 1, 6, 9], None), (9, [9, 3, 7, 2, 5], None),
                                                        (5, [2, 8, 8, 4, 1], 7)])
def test_conditional_lp_gpt_neox_equals_full_forward(prefix_len, lengths, bos_id):
  module = neox()
  prefix = np.random.default_rng(prefix_len).integers(0, V, prefix_len)
  ids_NxT, mask_NxT = texts(lengths, 9)
  got = prefix_lp.conditional_lp(module, prefix, ids_NxT, mask_NxT, batch_size=2, bos_id=bos_id)
  assert got.dtype == np.float32 and got.shape == ids_NxT.shape
  want = reference(module, prefix, ids_NxT, mask_NxT, bos_id)
  assert (np.isnan(got) == ~mask_NxT).all()
  np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("family", ["gpt_neox", "lstm"])
def test_pair_lp_equals_conditional_lp_per_row(family):
  module, bos_id = (neox(), None) if family == "gpt_neox" else (lstm(), 3)
  ids_NxT, mask_NxT = texts([6, 2, 8, 5, 1, 7, 3], 8)
  rows = [5, 0, 3, 1, 6]  # 5 rows, prefix_batch 2: a padded last group
  got_RxNxT = prefix_lp.pair_lp(module, ids_NxT, mask_NxT, rows=rows, batch_size=3, prefix_batch=2, bos_id=bos_id)
  assert got_RxNxT.shape == (5, 7, 8) and got_RxNxT.dtype == np.float32
  for i, r in enumerate(rows):
    want = prefix_lp.conditional_lp(module, ids_NxT[r, mask_NxT[r]], ids_NxT, mask_NxT, batch_size=4, bos_id=bos_id)
    np.testing.assert_allclose(got_RxNxT[i], want, **TOL)  # same maths, different batch shapes: rounding only
  # pair_lp[i, x] is also the full pass on [BOS] + text rows[i] + text x.
  np.testing.assert_allclose(got_RxNxT[1], reference(module, ids_NxT[0, :6], ids_NxT, mask_NxT, bos_id), **TOL)


def test_lstm_conditional_lp_equals_full_forward_on_bos_prefix_text():
  module = lstm()
  prefix = np.random.default_rng(5).integers(0, V, 6)
  ids_NxT, mask_NxT = texts([5, 1, 7, 4], 7)
  got = prefix_lp.conditional_lp(module, prefix, ids_NxT, mask_NxT, batch_size=3, bos_id=3)
  # The LSTM's recurrence in one scan vs two (carry handed over): the same float32 ops in the same order, so
  # differences are at most a few ulps of O(1-10) lps.
  np.testing.assert_allclose(got, reference(module, prefix, ids_NxT, mask_NxT, bos_id=3), **TOL)
  # The prefix matters: without it the lps change by O(0.1) or more.
  alone = reference(module, [], ids_NxT, mask_NxT, bos_id=3)
  assert np.nanmax(np.abs(got - alone)) > 0.05


def test_lstm_default_forward_is_unchanged_by_the_carry_arguments():
  """The training path (no carry arguments) gives exactly what it gave before: zero initial carries."""
  module = lstm()
  ids_NxT, mask_NxT = texts([5, 7], 7)
  plain = module(jnp.asarray(ids_NxT))
  logits, carries = module(jnp.asarray(ids_NxT), jnp.asarray(mask_NxT), return_carries=True)
  np.testing.assert_array_equal(plain, logits)
  zeros = tuple((jnp.zeros((2, 24)), jnp.zeros((2, 24))) for _ in range(2))
  np.testing.assert_array_equal(plain, module(jnp.asarray(ids_NxT), initial_carries=zeros))
  assert len(carries) == 2 and carries[0][0].shape == (2, 24)


def test_no_recompilation_across_calls_sizes_and_ragged_batches():
  module = neox(max_positions=999)  # a config no other test uses: its own compile cache
  graphdef = nnx.split(module)[0]
  ids_NxT, mask_NxT = texts([6, 2, 8, 5, 1, 7, 3], 8)
  assert prefix_lp.compile_count(graphdef) == 0
  prefix_lp.conditional_lp(module, [1, 2, 3], ids_NxT, mask_NxT, batch_size=4)
  first = prefix_lp.compile_count(graphdef)
  assert first == 2  # one prefix function, one text function
  # Other N (ragged last batches of 1 and 3 rows), another prefix length in the same bucket, new weights.
  prefix_lp.conditional_lp(module, [4, 5, 6, 7, 8], ids_NxT[:5], mask_NxT[:5], batch_size=4)
  other = neox(max_positions=999, seed=1)
  prefix_lp.conditional_lp(other, [9], ids_NxT[:3], mask_NxT[:3], batch_size=4)
  assert prefix_lp.compile_count(graphdef) == first
  prefix_lp.pair_lp(module, ids_NxT, mask_NxT, rows=[0, 1, 2], batch_size=4, prefix_batch=2)
  after_pairs = prefix_lp.compile_count(graphdef)
  prefix_lp.pair_lp(module, ids_NxT, mask_NxT, rows=[4], batch_size=4, prefix_batch=2)
  prefix_lp.pair_lp(module, ids_NxT[:6], mask_NxT[:6], rows=[5, 1, 2, 0, 3], batch_size=4, prefix_batch=2)
  assert prefix_lp.compile_count(graphdef) == after_pairs


def test_too_long_prefix_is_refused_before_any_work(monkeypatch):
  module = neox(max_positions=16)
  ids_NxT, mask_NxT = texts([6, 8], 8)
  monkeypatch.setattr(prefix_lp, "_prefix_fn", lambda g: pytest.fail("work started"))
  with pytest.raises(InputError, match=r"prefix \(9 tokens\) \+ text \(8 tokens\) = 17 tokens exceeds.*= 16"):
    prefix_lp.conditional_lp(module, list(range(9)), ids_NxT, mask_NxT)
  with pytest.raises(InputError, match=r"\+ BOS.*exceeds"):
    prefix_lp.conditional_lp(module, list(range(8)), ids_NxT, mask_NxT, bos_id=0)
  long_ids, long_mask = texts([9, 2], 9)
  with pytest.raises(InputError, match="exceeds the model's context"):
    prefix_lp.pair_lp(module, long_ids, long_mask, rows=[1])  # row 1 is short, but text 0 as prefix is not
  with pytest.raises(InputError, match="right-padded"):
    prefix_lp.conditional_lp(module, [1], ids_NxT, mask_NxT[:, ::-1])  # left padding
  with pytest.raises(InputError, match="empty prefix needs bos_id"):
    prefix_lp.conditional_lp(module, [], ids_NxT, mask_NxT)


def test_cached_path_matches_hugging_face_past_key_values():
  """Our prefill + extend against transformers' PyTorch GPTNeoXForCausalLM run with use_cache / past_key_values."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  config = tiny_config(rotary_pct=0.5)
  tensors = random_params(config)
  hf_config = transformers.GPTNeoXConfig(**config.to_hf_dict(), attn_implementation="eager")
  model = transformers.GPTNeoXForCausalLM(hf_config).eval()
  state = {k: torch.from_numpy(v) for k, v in tensors.items()}
  state["lm_head.weight"] = state.pop("embed_out.weight")
  model.load_state_dict(state, strict=True)
  module = GPTNeoXForCausalLM(config, rngs=nnx.Rngs(0))
  nnx.update(module, hf_convert.params_from_hf(config, tensors))
  rng = np.random.default_rng(3)
  prefix_1xS, text_1xT = rng.integers(0, V, (1, 6)), rng.integers(0, V, (1, 5))
  with torch.no_grad():
    past = model(torch.from_numpy(prefix_1xS), use_cache=True).past_key_values
    want = model(torch.from_numpy(text_1xT), past_key_values=past).logits.numpy()
  _, cache = module.prefill(jnp.asarray(prefix_1xS), jnp.ones((1, 6), bool))
  got = np.asarray(module.extend(jnp.asarray(text_1xT), cache))
  # torch and XLA order float32 sums differently: ~1e-6 on O(1-10) logits (as test_gpt_neox's parity tests).
  np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["lstm", "pythia"])
def test_shadow_model_loader_reproduces_the_runs_losses(tmp_path, monkeypatch, config):
  """A loaded shadow model with the empty prefix (BOS alone) scores the canaries as losses.npy stores them."""
  import os
  from experiments.configs import lstm as lstm_configs
  from training import data as data_lib
  from training import pipeline
  from training import run_data
  from training.shadow_model import load_shadow_model
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: data_lib.load_chitchat()[:400])
  from experiments.configs import pythia
  cfg = lstm_configs.get_config("tiny") if config == "lstm" else pythia.get_config("tiny")
  assert pipeline.run(cfg, str(tmp_path), progress=False)
  module, tokenizer, bos_id = load_shadow_model(str(tmp_path), 4)  # second model of group 1 (groups of 3)
  assert bos_id == data_lib.bos_id(tokenizer)
  canaries_NxT = np.load(os.path.join(tmp_path, "canaries.npy"))
  lp_NxT = prefix_lp.conditional_lp(module, [], canaries_NxT, np.ones(canaries_NxT.shape, bool), bos_id=bos_id)
  # Same parameters, the trainer's vmapped group forward against this single-model cached path: rounding only
  # (~1e-6 on O(1-10) losses).
  np.testing.assert_allclose(-lp_NxT, np.load(os.path.join(tmp_path, "losses.npy"))[4], **TOL)
  with pytest.raises(InputError, match="outside the run's 6 models"):
    load_shadow_model(str(tmp_path), 6)
