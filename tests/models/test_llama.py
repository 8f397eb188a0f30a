"""Llama and Qwen2 against Hugging Face's PyTorch LlamaForCausalLM and Qwen2ForCausalLM: per-token log-probabilities
of random tiny configs (several seeds, ragged padding, 1, 2 and 4 key-value heads, tied and untied heads, linear and
llama3 rope scaling, Llama's biases, Qwen2's q/k/v biases), the RoPE frequencies against transformers' own rope
functions, a training step's loss and gradients, and the HF folder both ways (models/hf_convert.py). Folders are
written by transformers' save_pretrained from random configs: nothing is downloaded. The config and name-map checks
run without torch."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lira.errors import InputError
from models import get_model
from models import hf_convert
from tests.models.lm_parity import hf_lp, our_lp
from models import token_loss
from models.llama import LlamaConfig, LlamaForCausalLM, rope_inv_freq
from training.pretraining import prefix_lp

T = 12
V = 61
# Rows: no padding, and right padding (the last 3 and the last 7 are pads), as a batch of ragged texts has it.
MASK_BxT = np.ones((3, T), np.int64)
MASK_BxT[1, T - 3:] = 0
MASK_BxT[2, T - 7:] = 0
# Float32 end to end on both sides: logits of size <= ~5 carry rounding of a few ulps (~1e-6) per layer from sums
# taken in other orders (XLA against torch's kernels; the RoPE frequencies from another pow), so log-probabilities
# agree to 2e-5 absolute, 20x that (observed: at most 2.3e-6 over CASES).
ATOL = 2e-5
# theta 100 over head dim 8: wavelengths 6, 20, 63 and 199 positions, so that llama3's rule (original context 64,
# low 1, high 4: wavelengths above 64 scaled, 16-64 blended, below 16 kept) takes all three branches in T = 12
LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
# (model_type, seed, config): the default grouping (4 query heads over 2 key-value heads) in three seeds, then
# multi-query (1) and multi-head (4) attention, the tied head, Llama's biases, head_dim != hidden / heads, rope
# scaling; Qwen2 (its q/k/v biases) likewise
CASES = [("llama", 0, {}), ("llama", 1, {}), ("llama", 2, {}),
         ("llama", 3, dict(num_key_value_heads=1, tie_word_embeddings=True)),
         ("llama", 4, dict(num_key_value_heads=4, attention_bias=True, mlp_bias=True)),
         ("llama", 5, dict(head_dim=16, rope_theta=100.0, rope_scaling=dict(rope_type="linear", factor=2.0))),
         ("llama", 6, dict(rope_theta=100.0, rope_scaling=LLAMA3)),
         ("qwen2", 0, {}), ("qwen2", 1, dict(num_key_value_heads=1, tie_word_embeddings=True, rope_theta=1e6)),
         ("qwen2", 2, dict(num_key_value_heads=4))]


def test_config_reads_both_rope_key_styles_round_trips_and_refuses_what_it_cannot_run():
  config = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, rope_type="llama3", rope_factor=8.0,
                       rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, max_position_embeddings=128)
  assert config.head_dim == 4 and config.rope_original_max_position_embeddings == 128
  assert hf_convert.config_from_hf_dict(json.loads(json.dumps(config.to_hf_dict()))) == config
  qwen = LlamaConfig(vocab_size=50, hidden_size=16, num_attention_heads=2, model_type="qwen2", eos_token_id=(3, 4))
  assert qwen.num_key_value_heads == 2 and qwen.qkv_bias and not qwen.attention_bias
  assert hf_convert.config_from_hf_dict(json.loads(json.dumps(qwen.to_hf_dict()))) == qwen
  assert hf_convert.architecture(qwen).hf_class == "Qwen2ForCausalLM"
  assert hf_convert.architecture(config).hf_class == "LlamaForCausalLM"
  base = dict(model_type="llama", vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
              num_attention_heads=4)
  # transformers before v5: rope_theta and rope_scaling ("type" in the oldest configs) at the top level
  old = hf_convert.config_from_hf_dict({**base, "rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 4.0}})
  assert (old.rope_type, old.rope_theta, old.rope_factor) == ("linear", 5e5, 4.0)
  new = hf_convert.config_from_hf_dict({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
  assert (new.rope_type, new.rope_theta, new.rope_factor) == ("default", 1e6, None)
  for rope_type in ("dynamic", "yarn", "longrope"):
    with pytest.raises(InputError, match=f"rope type '{rope_type}' unsupported; available: default, linear, llama3"):
      hf_convert.config_from_hf_dict({**base, "rope_scaling": {"rope_type": rope_type, "factor": 2.0}})
  with pytest.raises(InputError, match="sliding-window attention"):
    hf_convert.config_from_hf_dict({**base, "model_type": "qwen2", "use_sliding_window": True,
                                    "sliding_window": 8, "max_window_layers": 1})
  with pytest.raises(InputError, match="sliding-window attention"):
    hf_convert.config_from_hf_dict({**base, "layer_types": ["full_attention", "sliding_attention"]})
  # transformers' Qwen2 default: use_sliding_window false, whatever sliding_window says
  assert hf_convert.config_from_hf_dict({**base, "model_type": "qwen2", "sliding_window": 8}).model_type == "qwen2"
  with pytest.raises(InputError, match="partial rotary"):
    hf_convert.config_from_hf_dict({**base, "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.5}})
  with pytest.raises(InputError, match="4 attention heads do not split into groups over 3 key-value heads"):
    LlamaConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=3)
  with pytest.raises(InputError, match="hidden_act 'gelu' unsupported"):
    LlamaConfig(hidden_act="gelu")
  with pytest.raises(InputError, match="qwen2 fixes its biases"):
    LlamaConfig(model_type="qwen2", attention_bias=True)
  with pytest.raises(InputError, match=r"rope type 'llama3' needs \['rope_low_freq_factor'"):
    LlamaConfig(rope_type="llama3", rope_factor=8.0, rope_high_freq_factor=4.0)
  with pytest.raises(InputError, match="model_type 'mistral' has no conversion here; available: gpt_neox, gpt2, "
                                       "llama, qwen2"):
    hf_convert.config_from_hf_dict({**base, "model_type": "mistral"})


def test_the_family_builds_a_causal_model_whose_name_map_covers_it():
  fm = get_model("llama", vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2)
  module = nnx.merge(fm.graphdef, fm.init(jax.random.key(0)))
  tokens = np.random.default_rng(0).integers(0, 40, (2, T))
  logits = np.asarray(module(jnp.asarray(tokens)))
  changed = tokens.copy()
  changed[:, 7] = (changed[:, 7] + 1) % 40
  after = np.asarray(module(jnp.asarray(changed)))
  np.testing.assert_array_equal(logits[:, :7], after[:, :7])  # position t never sees tokens after t
  assert not np.allclose(logits[:, 7:], after[:, 7:])
  table = hf_convert.name_table(module.config)
  assert table["model.layers.1.self_attn.k_proj.weight"][1] == (8, 16)  # 2 key-value heads of 4 dims
  assert "lm_head.weight" in table and not any(name.endswith(".bias") for name in table)
  qwen = hf_convert.name_table(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                           num_attention_heads=4, tie_word_embeddings=True, model_type="qwen2"))
  assert sorted(n for n in qwen if n.endswith(".bias")) == [f"model.layers.0.self_attn.{p}_proj.bias" for p in "kqv"]
  assert "lm_head.weight" not in qwen
  # the LoRA targets by name (models/lora.py): every projection a plain nnx.Linear under self_attn or mlp
  linear = sorted(".".join(map(str, p)) for p, m in nnx.iter_modules(module) if type(m) is nnx.Linear)
  assert linear[:7] == [f"layers.0.{g}.{p}_proj" for g, p in (("mlp", "down"), ("mlp", "gate"), ("mlp", "up"),
                                                               ("self_attn", "k"), ("self_attn", "o"),
                                                               ("self_attn", "q"), ("self_attn", "v"))]
  with pytest.raises(InputError, match="prefix log-probabilities need a GPT-NeoX or LSTM module, got LlamaForCausalLM"):
    prefix_lp.conditional_lp(module, [1, 2], tokens, np.ones_like(tokens, bool))  # no key-value cache here


def test_bfloat16_compute_close_to_float32():
  arch = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2)
  for tied in (True, False):
    model = get_model("llama", **arch, tie_word_embeddings=tied)
    params = jax.tree.map(lambda x: x * 5.0, model.init(jax.random.key(1)))  # far from init: sharp attention
    tokens = jnp.asarray(np.random.default_rng(5).integers(0, V, (3, T)))
    ref = np.asarray(model.apply(params, tokens, jnp.asarray(MASK_BxT)))
    bf16 = np.asarray(model.with_compute_dtype("bfloat16").apply(params, tokens, jnp.asarray(MASK_BxT)))
    keep = MASK_BxT == 1
    assert bf16.dtype == np.float32  # float32 logits whatever the compute dtype
    err = np.abs(bf16[keep] - ref[keep]).max() / np.abs(ref[keep]).max()
    # bfloat16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3); two layers of 32-48-term products and a
    # 61-way head grow that to ~1e-2 of the largest logit; float32 rounding would be 1e-6, a wrong op O(1)
    assert err < 0.05, (tied, err)
    assert not np.array_equal(bf16, ref)  # it did compute in bfloat16


# ---------------------------------------------------------------- against transformers

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
HF = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
      "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}


@pytest.mark.parametrize("rope", [dict(rope_type="default", rope_theta=1e6),
                                  dict(rope_type="linear", rope_theta=130000.0, factor=3.90625),
                                  dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                       high_freq_factor=4.0, original_max_position_embeddings=8192)],
                         ids=["default", "linear", "llama3"])
def test_rope_frequencies_equal_transformers_at_checkpoint_sizes(rope):
  """Qwen2.5's, SmolLM2's and Llama 3.1's rope settings at head_dim 64 and 128: inv_freq against transformers'."""
  for head_dim in (64, 128):
    hf = transformers.LlamaConfig(hidden_size=32 * head_dim, num_attention_heads=32, head_dim=head_dim,
                                  max_position_embeddings=131072, rope_parameters=dict(rope))
    if rope["rope_type"] == "default":
      theirs, _ = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(hf)
    else:
      theirs, _ = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope["rope_type"]](hf, None)
    ours = rope_inv_freq(hf_convert.config_from_hf_dict(hf.to_dict()))
    assert ours.dtype == np.float32
    # float32 pow and division in numpy against torch's kernels: within 2 ulps (2.4e-7 relative)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=2.4e-7, atol=0)


def hf_model(model_type, seed, **extra):
  """A random tiny model (4 query heads over 2 key-value heads unless `extra` says otherwise), its weights far from
  init (std 0.2; the RMSNorm weights near 1) so that attention is sharp."""
  config_cls, model_cls = HF[model_type]
  config = config_cls(**{**dict(vocab_size=V, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                bos_token_id=0, eos_token_id=0), **extra})
  torch.manual_seed(seed)
  model = model_cls(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_((1.0 if "norm" in name else 0.0) + 0.2 * torch.randn_like(p))
  return model


@pytest.mark.parametrize("model_type, seed, extra", CASES,
                         ids=["gqa0", "gqa1", "gqa2", "mqa_tied", "mha_biases", "head_dim16_linear", "llama3",
                              "qwen2_gqa", "qwen2_mqa_tied", "qwen2_mha"])
def test_per_token_log_probabilities_equal_transformers(tmp_path, model_type, seed, extra):
  hf = hf_model(model_type, seed, **extra)
  hf.save_pretrained(tmp_path)
  module = hf_convert.from_pretrained(str(tmp_path))
  assert isinstance(module, LlamaForCausalLM) and module.config.model_type == model_type
  tokens = np.random.default_rng(seed).integers(0, V, (3, T))
  ours, theirs = our_lp(module, tokens, MASK_BxT), hf_lp(hf, tokens, MASK_BxT)
  scored = MASK_BxT[:, 1:].astype(bool)  # positions whose token is real
  np.testing.assert_allclose(ours[scored], theirs[scored], rtol=0, atol=ATOL)
  assert np.abs(theirs[scored]).max() > 1.0  # not a near-uniform model: the comparison has something to see


@pytest.mark.parametrize("model_type, extra", [("llama", dict(rope_theta=100.0, rope_scaling=LLAMA3)),
                                               ("qwen2", dict(tie_word_embeddings=True))], ids=["llama", "qwen2"])
def test_modified_params_saved_load_in_transformers_with_the_same_log_probabilities(tmp_path, model_type, extra):
  hf = hf_model(model_type, 7, **extra)
  hf.save_pretrained(tmp_path / "src")
  module = hf_convert.from_pretrained(str(tmp_path / "src"))
  graphdef, params = nnx.split(module, nnx.Param)
  moved = nnx.merge(graphdef, jax.tree.map(lambda x: x * 1.1 + 0.01, params))  # not the weights it loaded
  hf_convert.save_pretrained(moved, str(tmp_path / "back"))
  back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
  assert type(back) is HF[model_type][1]
  tokens = np.random.default_rng(7).integers(0, V, (3, T))
  scored = MASK_BxT[:, 1:].astype(bool)
  ours, theirs = our_lp(moved, tokens, MASK_BxT), hf_lp(back, tokens, MASK_BxT)
  np.testing.assert_allclose(ours[scored], theirs[scored], rtol=0, atol=ATOL)
  assert not np.allclose(theirs, hf_lp(hf, tokens, MASK_BxT))  # the saved weights are the modified ones
  with open(tmp_path / "back" / "config.json") as f:
    assert hf_convert.config_from_hf_dict(json.load(f)) == module.config
  names = set(hf_convert.params_to_hf(module.config, nnx.state(module, nnx.Param)))
  assert names == set(hf.state_dict()) - ({"lm_head.weight"} if module.config.tie_word_embeddings else set())


@pytest.mark.parametrize("model_type, extra", [
    ("llama", dict(attention_bias=True, mlp_bias=True)), ("qwen2", dict(num_key_value_heads=1,
                                                                        tie_word_embeddings=True))],
    ids=["llama_biases_untied", "qwen2_mqa_tied"])
def test_a_training_steps_loss_and_gradients_equal_pytorch(tmp_path, model_type, extra):
  """The trainer's loss (models.token_loss on the logits after BOS) and its gradient, parameter by parameter,
  against torch's cross-entropy and autograd on the same weights and tokens."""
  hf = hf_model(model_type, 4, **extra).train()
  hf.save_pretrained(tmp_path)
  module = hf_convert.from_pretrained(str(tmp_path))
  graphdef, params = nnx.split(module, nnx.Param)
  tokens = np.random.default_rng(4).integers(1, V, (4, T))
  inputs = np.concatenate([np.zeros((4, 1), np.int64), tokens[:, :-1]], axis=1)  # BOS (id 0) first

  def loss_fn(p):
    logits = nnx.merge(graphdef, p)(jnp.asarray(inputs))
    return token_loss.token_loss(logits, jnp.asarray(tokens)).mean()

  loss, grads = jax.value_and_grad(loss_fn)(params)
  logits = hf(torch.tensor(inputs)).logits
  torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(tokens).reshape(-1))
  torch_loss.backward()
  # a mean of 48 float32 losses of size ~4: a few ulps (1e-6) apart
  assert float(loss) == pytest.approx(torch_loss.item(), rel=1e-5)
  ours = hf_convert.params_to_hf(module.config, grads)
  theirs = {name: p.grad.numpy() for name, p in hf.named_parameters()}
  assert set(ours) == set(theirs)
  for name, grad in ours.items():
    # gradients through two layers in float32, summed in other orders: 1e-4 relative on each tensor's norm
    assert np.linalg.norm(grad) == pytest.approx(np.linalg.norm(theirs[name]), rel=1e-4), name
    np.testing.assert_allclose(grad, theirs[name], rtol=0, atol=1e-4 * np.abs(theirs[name]).max() + 1e-7,
                               err_msg=name)
