"""GPT-NeoX against Hugging Face's PyTorch GPTNeoXForCausalLM, and the HF folder conversion both ways.

Tests that need torch and transformers skip without them; the rest (config parsing, causality, padding, the name
map's refusals, bfloat16) run everywhere.
"""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models import get_model
from models import hf_convert
from models.gpt_neox import GPTNeoXConfig, GPTNeoXForCausalLM

T = 12
# Rows: no padding, right padding (last 3 are pads), left padding (first 4 are pads).
MASK_BxT = np.ones((3, T), np.int64)
MASK_BxT[1, T - 3:] = 0
MASK_BxT[2, :4] = 0
# (use_parallel_residual, rotary_pct, extra config): head dim 16, so 0.25 rotates 4 dims (2 frequencies).
VARIANTS = [(True, 0.25, {}), (False, 0.25, {}), (True, 1.0, {}), (False, 1.0, {}),
            (True, 0.5, dict(hidden_act="gelu_new", tie_word_embeddings=True, attention_bias=False,
                             rotary_emb_base=500.0))]


def tiny_config(parallel=True, rotary_pct=0.25, **kw):
  return GPTNeoXConfig(vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=96, rotary_pct=rotary_pct, use_parallel_residual=parallel, **kw)


def tokens(B=3, seed=0, vocab=101):
  return np.random.default_rng(seed).integers(0, vocab, (B, T))


def random_params(config, seed=0, std=0.2):
  """Params far from init (std 0.2, layernorm scales near 1) so attention is sharp and rotary matters."""
  rng = np.random.default_rng(seed)
  tensors = {}
  for name, (_, shape, _) in hf_convert.name_table(config).items():
    base = 1.0 if name.endswith("layernorm.weight") or name == "gpt_neox.final_layer_norm.weight" else 0.0
    tensors[name] = (base + std * rng.normal(size=shape)).astype(np.float32)
  return tensors


def forward(config, params, tokens_BxT, mask_BxT=None, **kw):
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: GPTNeoXForCausalLM(config, rngs=nnx.Rngs(0))))
  mask_BxT = None if mask_BxT is None else jnp.asarray(mask_BxT)
  return np.asarray(nnx.merge(graphdef, params)(jnp.asarray(tokens_BxT), mask_BxT, **kw))


# ---------------------------------------------------------------- without torch


def test_config_reads_both_rope_key_styles_and_round_trips():
  base = dict(model_type="gpt_neox", vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64)
  old = GPTNeoXConfig.from_hf_dict({**base, "rotary_pct": 0.5, "rotary_emb_base": 500})
  new = GPTNeoXConfig.from_hf_dict({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0,
                                                                "partial_rotary_factor": 0.5}})
  top_theta = GPTNeoXConfig.from_hf_dict({**base, "rotary_pct": 0.5, "rope_theta": 500.0})
  assert old == new == top_theta
  assert (old.rotary_pct, old.rotary_emb_base, old.rotary_ndims) == (0.5, 500.0, 4)
  default = GPTNeoXConfig.from_hf_dict(base)  # HF's defaults: 0.25 of each head, theta 10000
  assert (default.rotary_pct, default.rotary_emb_base) == (0.25, 10000.0)
  assert GPTNeoXConfig.from_hf_dict(json.loads(json.dumps(old.to_hf_dict()))) == old
  with pytest.raises(ValueError, match="rope type 'linear'"):
    GPTNeoXConfig.from_hf_dict({**base, "rope_scaling": {"type": "linear", "factor": 2.0}})
  with pytest.raises(ValueError, match="gpt2"):
    GPTNeoXConfig.from_hf_dict({**base, "model_type": "gpt2"})
  with pytest.raises(ValueError, match="hidden_act"):
    GPTNeoXConfig.from_hf_dict({**base, "hidden_act": "relu"})


def test_get_model_interface_and_causality():
  """Changing token t changes logits at >= t only; the functional init/apply gives float32 [B, T, V]."""
  model = get_model("gpt_neox", vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=96)
  params = model.init(jax.random.key(0))
  params = jax.tree.map(lambda p: p * 10, params)  # sharpen attention so leaks would show
  x_BxT = tokens(B=2)
  t = 5
  y_BxT = x_BxT.copy()
  y_BxT[:, t] = (y_BxT[:, t] + 1) % 101
  apply = jax.jit(model.apply)
  a_BxTxV, b_BxTxV = apply(params, x_BxT), apply(params, y_BxT)
  assert a_BxTxV.shape == (2, T, 101) and a_BxTxV.dtype == jnp.float32
  np.testing.assert_array_equal(a_BxTxV[:, :t], b_BxTxV[:, :t])
  assert np.all(np.abs(a_BxTxV[:, t:] - b_BxTxV[:, t:]).max(-1) > 1e-3)  # O(1) changes; rounding is ~1e-6
  # The init structure is exactly what the converter builds: HF names out and back in reproduce the params.
  back = hf_convert.params_from_hf(model.config, hf_convert.params_to_hf(model.config, params))
  assert jax.tree.structure(back) == jax.tree.structure(params)
  jax.tree.map(np.testing.assert_array_equal, back, params)


def test_padding_is_never_attended_and_masked_rows_are_finite():
  config = tiny_config()
  params = hf_convert.params_from_hf(config, random_params(config))
  x_BxT = tokens()
  other_BxT = np.where(MASK_BxT == 1, x_BxT, (x_BxT + 7) % 101)  # same real tokens, different pad tokens
  a_BxTxV = forward(config, params, x_BxT, MASK_BxT)
  b_BxTxV = forward(config, params, other_BxT, MASK_BxT)
  keep = MASK_BxT == 1
  np.testing.assert_array_equal(a_BxTxV[keep], b_BxTxV[keep])
  assert np.isfinite(a_BxTxV).all()  # left-padding queries see no key at all
  assert np.isfinite(forward(config, params, x_BxT, np.zeros_like(MASK_BxT))).all()
  # A right-padded row's real prefix equals the unpadded prefix.
  prefix_1xSxV = forward(config, params, x_BxT[1:2, :T - 3])
  # Shorter T changes the shapes, so XLA may order the sums differently; masked keys add exact zeros. Logits are
  # O(1-10) after 2 layers of <= 96-term float32 dot products: ~1e-6 rounding, 10x below the tolerance.
  np.testing.assert_allclose(a_BxTxV[1, :T - 3], prefix_1xSxV[0], rtol=1e-5, atol=1e-5)


def test_bfloat16_compute_close_to_float32():
  config = tiny_config()
  params = hf_convert.params_from_hf(config, random_params(config, std=0.1))
  ref_BxTxV = forward(config, params, tokens(), MASK_BxT)
  bf16_BxTxV = forward(dataclasses.replace(config, dtype="bfloat16"), params, tokens(), MASK_BxT)
  keep = MASK_BxT == 1
  assert bf16_BxTxV.dtype == np.float32
  err = np.abs(bf16_BxTxV[keep] - ref_BxTxV[keep]).max() / np.abs(ref_BxTxV[keep]).max()
  # bfloat16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3); 2 layers of 64-96-term products and a
  # 101-way head grow that to ~1e-2 of the largest logit; float32 rounding would be 1e-6, a wrong op O(1).
  assert err < 0.05, err
  assert not np.array_equal(bf16_BxTxV, ref_BxTxV)  # it did compute in bfloat16


def test_save_load_round_trip_and_overwrite(tmp_path):
  config = tiny_config(parallel=False, rotary_pct=0.5)
  params = hf_convert.params_from_hf(config, random_params(config))
  path = tmp_path / "model"
  hf_convert.save_hf_folder(config, params, path)
  # Saving again over an existing folder (as transformers allows) replaces the files, and a stale sharded index
  # that would otherwise shadow the new weights is removed with its shards.
  (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "model-00001.safetensors"}}))
  (path / "model-00001.safetensors").write_bytes(b"stale")
  other = hf_convert.params_from_hf(config, random_params(config, seed=1))
  hf_convert.save_hf_folder(config, other, path)
  hf_convert.save_hf_folder(config, params, path)
  assert sorted(os.listdir(tmp_path)) == ["model"]
  assert sorted(os.listdir(path)) == ["config.json", "model.safetensors"]  # no temporary files left behind
  loaded_config, loaded = hf_convert.load_hf_folder(str(path))
  assert loaded_config == config
  jax.tree.map(np.testing.assert_array_equal, loaded, params)


def test_from_pretrained_and_save_pretrained_round_trip_every_tensor(tmp_path):
  config = tiny_config(rotary_pct=0.5)
  tensors = random_params(config)
  hf_convert.save_hf_folder(config, hf_convert.params_from_hf(config, tensors), tmp_path / "a")
  model = hf_convert.from_pretrained(str(tmp_path / "a"), dtype=jnp.float32)
  assert isinstance(model, GPTNeoXForCausalLM) and model.config == config
  logits_BxTxV = model(jnp.asarray(tokens()), attention_mask=jnp.asarray(MASK_BxT))
  assert logits_BxTxV.shape == (3, T, config.vocab_size) and logits_BxTxV.dtype == jnp.float32
  tok = tmp_path / "tokenizer.json"
  tok.write_text("{}")
  hf_convert.save_pretrained(model, tmp_path / "b", tokenizer_file=str(tok))
  assert sorted(os.listdir(tmp_path / "b")) == ["config.json", "model.safetensors", "tokenizer.json"]
  from safetensors.numpy import load_file
  again = load_file(str(tmp_path / "b" / "model.safetensors"))
  assert sorted(again) == sorted(tensors)
  for name, array in tensors.items():
    np.testing.assert_array_equal(again[name], array, err_msg=name)
  assert hf_convert.from_pretrained(str(tmp_path / "b"), dtype=jnp.bfloat16).config.dtype == "bfloat16"


def test_pickled_checkpoint_refused(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(tiny_config().to_hf_dict()))
  (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not loaded")
  with pytest.raises(ValueError, match="pickled PyTorch checkpoints are refused.*safe_serialization=True"):
    hf_convert.load_hf_folder(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="does not exist"):
    hf_convert.load_hf_folder(str(tmp_path / "absent"))


def test_hub_id_downloads_only_json_and_safetensors(tmp_path, monkeypatch):
  """A hub id goes through snapshot_download (faked here: no network) asking for no pickles."""
  huggingface_hub = pytest.importorskip("huggingface_hub")
  config = tiny_config()
  hf_convert.save_hf_folder(config, hf_convert.params_from_hf(config, random_params(config)), tmp_path / "snap")
  (tmp_path / "bin_only").mkdir()
  (tmp_path / "bin_only" / "config.json").write_text(json.dumps(config.to_hf_dict()))
  calls = []

  def fake_snapshot_download(repo_id, revision, allow_patterns):
    calls.append((repo_id, revision, allow_patterns))
    return str(tmp_path / ("snap" if revision is None else "bin_only"))

  monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
  assert hf_convert.load_hf_folder("EleutherAI/pythia-tiny")[0] == config
  with pytest.raises(ValueError, match="no safetensors weights; pickled PyTorch checkpoints are refused"):
    hf_convert.load_hf_folder("EleutherAI/pythia-tiny", revision="step1000")
  assert calls == [("EleutherAI/pythia-tiny", None, ["*.json", "*.safetensors"]),
                   ("EleutherAI/pythia-tiny", "step1000", ["*.json", "*.safetensors"])]


def test_name_map_names_wrong_shape_unknown_and_missing_tensors():
  config = tiny_config()
  good = random_params(config)
  buffers = {"gpt_neox.layers.0.attention.bias": np.tril(np.ones((1, 1, 4, 4), bool)),
             "gpt_neox.layers.0.attention.masked_bias": np.array(-1e9, np.float32),
             "gpt_neox.layers.1.attention.rotary_emb.inv_freq": np.ones(2, np.float32)}
  hf_convert.params_from_hf(config, {**good, **buffers})  # old files' buffers are skipped
  bad = {**good, "gpt_neox.layers.1.mlp.dense_h_to_4h.weight": np.zeros((96, 65), np.float32)}
  with pytest.raises(ValueError, match=r"gpt_neox\.layers\.1\.mlp\.dense_h_to_4h\.weight: shape \(96, 65\)"):
    hf_convert.params_from_hf(config, bad)
  with pytest.raises(ValueError, match=r"unknown tensors \['gpt_neox\.layers\.0\.attention\.mystery'\]"):
    hf_convert.params_from_hf(config, {**good, "gpt_neox.layers.0.attention.mystery": np.zeros(3)})
  del good["gpt_neox.final_layer_norm.bias"]
  with pytest.raises(ValueError, match=r"missing \['gpt_neox\.final_layer_norm\.bias'\]"):
    hf_convert.params_from_hf(config, good)


# ---------------------------------------------------------------- against Hugging Face (torch)


@pytest.fixture(scope="module")
def hf():
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  torch.manual_seed(0)
  return torch, transformers


def hf_model(hf, config, tensors, attn="eager"):
  """transformers' GPTNeoXForCausalLM from our config.json and the same tensors."""
  torch, transformers = hf
  hf_config = transformers.GPTNeoXConfig(**config.to_hf_dict(), attn_implementation=attn)
  model = transformers.GPTNeoXForCausalLM(hf_config).eval()
  state = {k: torch.from_numpy(v) for k, v in tensors.items()}
  if config.tie_word_embeddings:
    state["embed_out.weight"] = state["gpt_neox.embed_in.weight"]
  state["lm_head.weight"] = state.pop("embed_out.weight")
  model.load_state_dict(state, strict=True)
  return model


def hf_logits(hf, model, tokens_BxT, mask_BxT=None, **kw):
  torch, _ = hf
  with torch.no_grad():
    mask = None if mask_BxT is None else torch.from_numpy(mask_BxT)
    return model(torch.from_numpy(tokens_BxT), attention_mask=mask, **kw).logits.numpy()


def assert_logits_close(ours, ref, keep=None):
  """Float32 parity: torch and XLA order the same sums differently (matmul blocking, SIMD width), ~1e-6 on these
  O(1-10) logits after 2 layers of <= 96-term products (observed <= 4e-6 absolute); the tolerance is 1e-5 + 1e-5
  |logit|, while a wrong rotary half, mask or residual order moves logits by O(0.1-1)."""
  keep = np.ones(ours.shape[:2], bool) if keep is None else keep
  np.testing.assert_allclose(ours[keep], ref[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parallel,rotary_pct,extra", VARIANTS)
def test_logits_match_hf(hf, parallel, rotary_pct, extra):
  config = tiny_config(parallel, rotary_pct, **extra)
  tensors = random_params(config)
  params = hf_convert.params_from_hf(config, tensors)
  model = hf_model(hf, config, tensors)
  x_BxT = tokens()
  assert_logits_close(forward(config, params, x_BxT), hf_logits(hf, model, x_BxT))
  ours = forward(config, params, x_BxT, MASK_BxT)
  assert_logits_close(ours, hf_logits(hf, model, x_BxT, MASK_BxT), MASK_BxT == 1)
  # generate()-style positions for left padding, passed explicitly to both.
  positions_BxT = np.maximum(MASK_BxT.cumsum(-1) - 1, 0)
  torch, _ = hf
  ours = forward(config, params, x_BxT, MASK_BxT, position_ids=jnp.asarray(positions_BxT))
  ref = hf_logits(hf, model, x_BxT, MASK_BxT, position_ids=torch.from_numpy(positions_BxT))
  assert_logits_close(ours, ref, MASK_BxT == 1)


def test_default_attention_backend_matches_too(hf):
  config = tiny_config()
  tensors = random_params(config)
  model = hf_model(hf, config, tensors, attn="sdpa")
  ours = forward(config, hf_convert.params_from_hf(config, tensors), tokens(), MASK_BxT)
  assert_logits_close(ours, hf_logits(hf, model, tokens(), MASK_BxT), MASK_BxT == 1)


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_load_hf_save_pretrained_folder(hf, tmp_path, shard):
  config = tiny_config(rotary_pct=0.5, rotary_emb_base=500.0)
  model = hf_model(hf, config, random_params(config))
  kw = {} if shard is None else {"max_shard_size": shard}
  model.save_pretrained(tmp_path, safe_serialization=True, **kw)
  files = os.listdir(tmp_path)
  assert ("model.safetensors.index.json" in files) == (shard is not None)
  assert sum(f.endswith(".safetensors") for f in files) > (1 if shard else 0)
  loaded_config, params = hf_convert.load_hf_folder(str(tmp_path))
  assert loaded_config == config
  assert_logits_close(forward(config, params, tokens(), MASK_BxT), hf_logits(hf, model, tokens(), MASK_BxT),
                      MASK_BxT == 1)


@pytest.mark.parametrize("style", ["rotary_pct", "rope_parameters"])
def test_load_rope_key_variants(hf, tmp_path, style):
  """A config.json with only one rope key style is read as transformers reads it (non-default pct and theta)."""
  _, transformers = hf
  config = tiny_config(rotary_pct=0.5, rotary_emb_base=500.0)
  hf_convert.save_hf_folder(config, hf_convert.params_from_hf(config, random_params(config)), tmp_path / "m")
  d = json.loads((tmp_path / "m" / "config.json").read_text())
  drop = ("rope_parameters",) if style == "rotary_pct" else ("rotary_pct", "rotary_emb_base")
  d = {k: v for k, v in d.items() if k not in drop}
  (tmp_path / "m" / "config.json").write_text(json.dumps(d))
  loaded_config, params = hf_convert.load_hf_folder(str(tmp_path / "m"))
  assert (loaded_config.rotary_pct, loaded_config.rotary_emb_base) == (0.5, 500.0)
  model = transformers.GPTNeoXForCausalLM.from_pretrained(tmp_path / "m", attn_implementation="eager").eval()
  assert model.config.rope_parameters["partial_rotary_factor"] == 0.5
  assert model.config.rope_parameters["rope_theta"] == 500.0
  assert_logits_close(forward(loaded_config, params, tokens()), hf_logits(hf, model, tokens()))


@pytest.mark.parametrize("tied", [False, True])
def test_save_hf_folder_loads_in_transformers(hf, tmp_path, tied):
  torch, transformers = hf
  config = tiny_config(parallel=False, tie_word_embeddings=tied)
  params = hf_convert.params_from_hf(config, random_params(config))
  hf_convert.save_hf_folder(config, params, tmp_path / "m")
  model, info = transformers.GPTNeoXForCausalLM.from_pretrained(tmp_path / "m", output_loading_info=True)
  assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
  assert model.dtype == torch.float32
  assert_logits_close(forward(config, params, tokens(), MASK_BxT), hf_logits(hf, model.eval(), tokens(), MASK_BxT),
                      MASK_BxT == 1)
  # And HF's own save of it reads back to the same params.
  model.save_pretrained(tmp_path / "again", safe_serialization=True)
  _, again = hf_convert.load_hf_folder(str(tmp_path / "again"))
  jax.tree.map(np.testing.assert_array_equal, again, params)
