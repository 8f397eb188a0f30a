"""Llama-architecture decoder in Flax NNX, numerically matching Hugging Face's `LlamaForCausalLM` and
`Qwen2ForCausalLM` forward passes (SmolLM, TinyLlama, Llama 2/3 and Qwen2/2.5 checkpoints).

Letters: B batch, T query time, S key time, D hidden, H query heads, K key-value heads (H = K * G, G query heads per
key-value head), E head dim (head_dim, default D / H), F MLP width, V vocab. Pre-RMSNorm blocks
(h = x + attn(norm(x)); h + mlp(norm(h))), grouped-query attention (query head h reads key-value head h // G, as
Hugging Face's repeat_kv lays them out), RoPE over the whole head in the rotate_half convention, a SwiGLU MLP
down(silu(gate(x)) * up(x)). RMSNorm is x / sqrt(mean(x^2) + eps) in float32, cast to the compute dtype, then times
its weight. Biases: Llama's `attention_bias` puts one on q, k, v and o_proj, `mlp_bias` on the MLP; Qwen2 always has
them on q, k and v and never on o_proj or the MLP (`model_type` says which, and which class a saved folder names).

RoPE frequencies inv_freq_j = theta^(-2j / E), j < E / 2, as Hugging Face's modeling_rope_utils computes them for
the rope types "default", "linear" (inv_freq / factor) and "llama3" (Llama 3.1: wavelengths 2 pi / inv_freq above
original_max_position_embeddings / low_freq_factor divided by factor, below ... / high_freq_factor kept, linearly
blended between). "dynamic" (frequencies that change with the longest sequence seen), "yarn" and the rest, partial
rotary, other activations and sliding-window attention are refused.

Compute dtype (`LlamaConfig.dtype`, models/precision.py) as for GPT-NeoX and GPT-2: bfloat16 operands and
activations, RMSNorm statistics and the softmax in float32, float32 attention scores and logits
(precision.float32_output). Loading and saving Hugging Face folders is models/hf_convert.py.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lira.errors import InputError
from models import precision as precision_lib
from models.gpt_neox import _allowed, _linear, apply_rotary, tied_logits

HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}  # model_type -> transformers class
ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  """Fields of Hugging Face's Llama / Qwen2 config.json (defaults: transformers' LlamaConfig, Llama-2-7B) with the
  rope parameters flattened (rope_type, rope_factor, ...), plus `dtype`, the compute dtype."""

  vocab_size: int = 32000
  hidden_size: int = 4096
  intermediate_size: int = 11008
  num_hidden_layers: int = 32
  num_attention_heads: int = 32
  num_key_value_heads: int | None = None  # None: num_attention_heads (no grouping)
  head_dim: int | None = None  # None: hidden_size // num_attention_heads
  hidden_act: str = "silu"
  max_position_embeddings: int = 2048
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_type: str = "default"  # one of ROPE_TYPES
  rope_factor: float | None = None  # linear, llama3
  rope_low_freq_factor: float | None = None  # llama3
  rope_high_freq_factor: float | None = None  # llama3
  rope_original_max_position_embeddings: int | None = None  # llama3 (None: max_position_embeddings)
  attention_bias: bool = False  # llama: q, k, v and o_proj (qwen2: q, k, v always, never o_proj)
  mlp_bias: bool = False  # llama only
  tie_word_embeddings: bool = False
  initializer_range: float = 0.02
  bos_token_id: int | None = 1
  eos_token_id: int | tuple | None = 2
  model_type: str = "llama"  # "llama" or "qwen2": the biases, and the class a saved folder names
  dtype: str = "float32"

  def __post_init__(self):
    if self.model_type not in HF_CLASSES:
      raise InputError(f"model_type {self.model_type!r} is not a Llama architecture here; available: "
                       f"{', '.join(HF_CLASSES)}")
    if self.num_key_value_heads is None:  # resolved here, so that a config and its config.json round trip
      object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
    if self.head_dim is None:
      if self.hidden_size % self.num_attention_heads:
        raise InputError(f"hidden_size {self.hidden_size} not divisible by {self.num_attention_heads} heads")
      object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
    if self.rope_type == "llama3" and self.rope_original_max_position_embeddings is None:
      object.__setattr__(self, "rope_original_max_position_embeddings", self.max_position_embeddings)
    if self.num_attention_heads % self.num_key_value_heads:
      raise InputError(f"{self.num_attention_heads} attention heads do not split into groups over "
                       f"{self.num_key_value_heads} key-value heads")
    if self.head_dim % 2:
      raise InputError(f"head_dim {self.head_dim} must be even (RoPE rotates pairs of dims)")
    if self.hidden_act != "silu":
      raise InputError(f"hidden_act {self.hidden_act!r} unsupported; available: silu")
    if self.rope_type not in ROPE_TYPES:
      raise InputError(f"rope type {self.rope_type!r} unsupported; available: {', '.join(ROPE_TYPES)}")
    needs = {"default": (), "linear": ("rope_factor",),
             "llama3": ("rope_factor", "rope_low_freq_factor", "rope_high_freq_factor")}[self.rope_type]
    if missing := [k for k in needs if getattr(self, k) is None]:
      raise InputError(f"rope type {self.rope_type!r} needs {missing}")
    if self.model_type == "qwen2" and (self.attention_bias or self.mlp_bias):
      raise InputError("qwen2 fixes its biases (q, k and v only): attention_bias and mlp_bias must be False")
    precision_lib.check(self.dtype, "LlamaConfig.dtype")

  @property
  def qkv_bias(self):
    return self.attention_bias or self.model_type == "qwen2"

  @classmethod
  def from_hf_dict(cls, d, dtype="float32"):
    """Config from a parsed config.json (model_type llama or qwen2); reads the rope keys of transformers v5
    (`rope_parameters`) and older ones (`rope_theta`, `rope_scaling`)."""
    model_type = d.get("model_type", "llama")
    if model_type not in HF_CLASSES:
      raise InputError(f"model_type {model_type!r} is not llama or qwen2")
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    if missing := [k for k in required if k not in d]:
      raise InputError(f"config.json lacks {missing}")
    layers = d.get("layer_types") or (
        ["sliding_attention" if i >= d.get("max_window_layers", 28) else "full_attention"
         for i in range(d["num_hidden_layers"])] if d.get("use_sliding_window") and d.get("sliding_window") else [])
    if "sliding_attention" in layers:
      raise InputError(f"sliding-window attention (sliding_window={d.get('sliding_window')}) is unsupported: every "
                       "layer here attends to all earlier tokens")
    rope = d.get("rope_scaling") or d.get("rope_parameters") or {}  # transformers v5 prefers rope_scaling too
    if any(isinstance(v, dict) for v in rope.values()):
      raise InputError(f"rope parameters per layer type are unsupported: {sorted(rope)}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if float(rope.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))) != 1.0:
      raise InputError("partial rotary embeddings are unsupported for Llama-architecture models")
    fields = {f.name for f in dataclasses.fields(cls)} - {"dtype", "model_type"} - {
        f.name for f in dataclasses.fields(cls) if f.name.startswith("rope_")}
    if model_type == "qwen2":  # transformers' Qwen2 reads neither
      fields -= {"attention_bias", "mlp_bias"}
    kwargs = {k: tuple(d[k]) if isinstance(d[k], list) else d[k] for k in fields if k in d}  # eos may be a list
    llama3 = rope_type == "llama3"
    # transformers' order: a top-level key, the rope dict's, then (in __post_init__) max_position_embeddings
    original_max = d.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
    return cls(**kwargs, model_type=model_type, dtype=dtype, rope_type=rope_type,
               rope_theta=float(rope.get("rope_theta", d.get("rope_theta", cls.rope_theta))),
               rope_factor=rope.get("factor") if rope_type in ("linear", "llama3") else None,
               rope_low_freq_factor=rope.get("low_freq_factor") if llama3 else None,
               rope_high_freq_factor=rope.get("high_freq_factor") if llama3 else None,
               rope_original_max_position_embeddings=original_max if llama3 else None)

  def to_hf_dict(self):
    """config.json contents that transformers' LlamaForCausalLM / Qwen2ForCausalLM (by model_type) read, v5 and
    older (both rope key styles), float32 weights, no dropout."""
    rope = {"rope_type": self.rope_type}
    for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
      if getattr(self, "rope_" + key) is not None:
        rope[key] = getattr(self, "rope_" + key)
    d = {k: v for k, v in dataclasses.asdict(self).items() if k != "dtype" and not k.startswith("rope_")}
    if self.model_type == "qwen2":
      d = {k: v for k, v in d.items() if k not in ("attention_bias", "mlp_bias")}
      d["use_sliding_window"] = False
    return {"architectures": [HF_CLASSES[self.model_type]], **d, "rope_theta": self.rope_theta,
            "rope_parameters": {**rope, "rope_theta": self.rope_theta},
            "rope_scaling": None if self.rope_type == "default" else rope, "attention_dropout": 0.0,
            "use_cache": True, "dtype": "float32"}


def rope_inv_freq(config):
  """inv_freq [E / 2] float32 of the config's rope type, in the float32 operations of Hugging Face's
  modeling_rope_utils (a static constant of the compiled model)."""
  E = config.head_dim
  inv_freq = 1.0 / np.float32(config.rope_theta) ** (np.arange(0, E, 2, dtype=np.float32) / np.float32(E))
  if config.rope_type == "linear":
    return inv_freq / np.float32(config.rope_factor)
  if config.rope_type == "llama3":
    factor, low, high = config.rope_factor, config.rope_low_freq_factor, config.rope_high_freq_factor
    old_context = config.rope_original_max_position_embeddings
    wavelen = np.float32(2 * math.pi) / inv_freq
    scaled = np.where(wavelen > old_context / low, inv_freq / np.float32(factor), inv_freq)
    smooth = (np.float32(old_context) / wavelen - np.float32(low)) / np.float32(high - low)
    blended = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return np.where(medium, blended, scaled).astype(np.float32)
  return inv_freq


def rotary_cos_sin(positions_BxT, inv_freq_E2):
  """cos, sin [B, T, E] of the RoPE angles (Su et al. 2021), laid out for rotate_half."""
  freqs_BxTxE2 = positions_BxT[..., None].astype(jnp.float32) * jnp.asarray(inv_freq_E2)
  angles_BxTxE = jnp.concatenate([freqs_BxTxE2, freqs_BxTxE2], axis=-1)
  return jnp.cos(angles_BxTxE), jnp.sin(angles_BxTxE)


class RMSNorm(nnx.Module):
  """weight * (x / sqrt(mean(x^2) + eps)): the statistics in float32, the normalised x rounded to the compute dtype
  before the weight multiplies it, as Hugging Face's LlamaRMSNorm does."""

  def __init__(self, config):
    self.weight = nnx.Param(jnp.ones((config.hidden_size,), jnp.float32))
    self.eps = config.rms_norm_eps

  def __call__(self, x_BxTxD):
    x32_BxTxD = x_BxTxD.astype(jnp.float32)
    normed_BxTxD = x32_BxTxD * jax.lax.rsqrt(jnp.mean(jnp.square(x32_BxTxD), -1, keepdims=True) + self.eps)
    return self.weight[...].astype(x_BxTxD.dtype) * normed_BxTxD.astype(x_BxTxD.dtype)


class Attention(nnx.Module):
  """Causal grouped-query self-attention: H query heads, K key-value heads, each read by G = H / K query heads."""

  def __init__(self, config, rngs):
    self.config = config
    D, H, K, E = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
    self.q_proj = _linear(D, H * E, config, rngs, use_bias=config.qkv_bias)
    self.k_proj = _linear(D, K * E, config, rngs, use_bias=config.qkv_bias)
    self.v_proj = _linear(D, K * E, config, rngs, use_bias=config.qkv_bias)
    self.o_proj = _linear(H * E, D, config, rngs, use_bias=config.attention_bias)

  def __call__(self, x_BxTxD, cos_BxTxE, sin_BxTxE, allowed_BxTxS):
    B, T, _ = x_BxTxD.shape
    H, K, E = self.config.num_attention_heads, self.config.num_key_value_heads, self.config.head_dim
    q_BxTxHxE = apply_rotary(self.q_proj(x_BxTxD).reshape(B, T, H, E), cos_BxTxE, sin_BxTxE)
    k_BxSxKxE = apply_rotary(self.k_proj(x_BxTxD).reshape(B, T, K, E), cos_BxTxE, sin_BxTxE)
    v_BxSxKxE = self.v_proj(x_BxTxD).reshape(B, T, K, E)
    q_BxTxKxGxE = q_BxTxHxE.reshape(B, T, K, H // K, E)  # head h = k * G + g reads key-value head k
    product = lambda q, k, p: jnp.einsum("btkge,bske->bkgts", q, k, preferred_element_type=p)  # noqa: E731
    if q_BxTxHxE.dtype == jnp.float32:
      scores_BxKxGxTxS = product(q_BxTxKxGxE, k_BxSxKxE, jnp.float32)
    else:
      scores_BxKxGxTxS = precision_lib.float32_output(product, q_BxTxKxGxE, k_BxSxKxE)
    scores_BxKxGxTxS = scores_BxKxGxTxS * E ** -0.5
    scores_BxKxGxTxS = jnp.where(allowed_BxTxS[:, None, None], scores_BxKxGxTxS, jnp.finfo(jnp.float32).min)
    probs_BxKxGxTxS = jax.nn.softmax(scores_BxKxGxTxS, axis=-1).astype(v_BxSxKxE.dtype)
    out_BxTxKxGxE = jnp.einsum("bkgts,bske->btkge", probs_BxKxGxTxS, v_BxSxKxE)
    return self.o_proj(out_BxTxKxGxE.reshape(B, T, H * E))


class MLP(nnx.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  def __init__(self, config, rngs):
    D, F = config.hidden_size, config.intermediate_size
    self.gate_proj = _linear(D, F, config, rngs, use_bias=config.mlp_bias)
    self.up_proj = _linear(D, F, config, rngs, use_bias=config.mlp_bias)
    self.down_proj = _linear(F, D, config, rngs, use_bias=config.mlp_bias)

  def __call__(self, x_BxTxD):
    return self.down_proj(jax.nn.silu(self.gate_proj(x_BxTxD)) * self.up_proj(x_BxTxD))


class DecoderLayer(nnx.Module):
  """Pre-RMSNorm block: h = x + attn(norm(x)); h + mlp(norm(h))."""

  def __init__(self, config, rngs):
    self.input_layernorm = RMSNorm(config)
    self.self_attn = Attention(config, rngs)
    self.post_attention_layernorm = RMSNorm(config)
    self.mlp = MLP(config, rngs)

  def __call__(self, x_BxTxD, cos_BxTxE, sin_BxTxE, allowed_BxTxS):
    h_BxTxD = x_BxTxD + self.self_attn(self.input_layernorm(x_BxTxD), cos_BxTxE, sin_BxTxE, allowed_BxTxS)
    return h_BxTxD + self.mlp(self.post_attention_layernorm(h_BxTxD))


class LlamaForCausalLM(nnx.Module):
  """Next-token model: logits_BxTxV[b, t] predicts token t + 1 from the unmasked tokens <= t."""

  def __init__(self, config: LlamaConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embed_tokens = nnx.Embed(config.vocab_size, config.hidden_size, dtype=jnp.dtype(config.dtype),
                                  param_dtype=jnp.float32,
                                  embedding_init=nnx.initializers.normal(config.initializer_range), rngs=rngs)
    self.layers = nnx.List([DecoderLayer(config, rngs) for _ in range(config.num_hidden_layers)])
    self.norm = RMSNorm(config)
    if not config.tie_word_embeddings:
      self.lm_head = _linear(config.hidden_size, config.vocab_size, config, rngs, use_bias=False, logits=True)

  def __call__(self, tokens_BxT, attention_mask=None, position_ids=None):
    """attention_mask_BxT: 1 keep / 0 padding; masked keys are never attended to. Positions default to arange(T),
    as in HF's plain forward (right padding leaves every real token at its own position). Outputs at padded
    positions are finite but meaningless."""
    B, T = tokens_BxT.shape
    if position_ids is None:
      position_ids = jnp.broadcast_to(jnp.arange(T), (B, T))
    cos_BxTxE, sin_BxTxE = rotary_cos_sin(position_ids, rope_inv_freq(self.config))
    allowed_BxTxS = _allowed(B, T, attention_mask)
    x_BxTxD = self.embed_tokens(tokens_BxT)
    for layer in self.layers:
      x_BxTxD = layer(x_BxTxD, cos_BxTxE, sin_BxTxE, allowed_BxTxS)
    x_BxTxD = self.norm(x_BxTxD)
    if self.config.tie_word_embeddings:
      return tied_logits(self.embed_tokens, x_BxTxD)
    return self.lm_head(x_BxTxD).astype(jnp.float32)
