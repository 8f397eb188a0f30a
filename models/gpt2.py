"""GPT-2 decoder in Flax NNX, numerically matching Hugging Face's `GPT2LMHeadModel` forward pass.

Letters: B batch, T query time, S key time, D hidden (n_embd), H heads, E head dim (D = H * E), F MLP width (n_inner,
default 4D), P positions (n_positions), V vocab. Learned absolute positions, pre-LayerNorm blocks (x + attn(ln_1(x));
h + mlp(ln_2(h))), a GELU MLP and, by default, the output head tied to the token embedding. Hugging Face stores the
linear layers as Conv1D, weights [in, out]: the NNX kernels' own layout (models/hf_convert.py maps the names).

Compute dtype (`GPT2Config.dtype`, models/precision.py) as for GPT-NeoX: bfloat16 operands and activations, layer
norms and softmax in float32, float32 attention scores and logits (precision.float32_output).
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from lira.errors import InputError
from models import precision as precision_lib
from models.gpt_neox import _GELU_APPROXIMATE, _allowed, _linear, LayerNorm, tied_logits


@dataclasses.dataclass(frozen=True)
class GPT2Config:
  """Fields of Hugging Face's GPT-2 config.json (defaults: GPT-2 small) plus `dtype`, the compute dtype."""

  vocab_size: int = 50257
  n_positions: int = 1024
  n_embd: int = 768
  n_layer: int = 12
  n_head: int = 12
  n_inner: int | None = None  # None: 4 * n_embd
  activation_function: str = "gelu_new"
  layer_norm_epsilon: float = 1e-5
  initializer_range: float = 0.02
  scale_attn_weights: bool = True
  scale_attn_by_inverse_layer_idx: bool = False
  tie_word_embeddings: bool = True
  bos_token_id: int | None = 50256
  eos_token_id: int | None = 50256
  dtype: str = "float32"

  def __post_init__(self):
    if self.n_embd % self.n_head:
      raise InputError(f"n_embd {self.n_embd} not divisible by {self.n_head} heads")
    if self.activation_function not in _GELU_APPROXIMATE:
      raise InputError(f"activation_function {self.activation_function!r} unsupported; available: "
                       f"{sorted(_GELU_APPROXIMATE)}")
    precision_lib.check(self.dtype, "GPT2Config.dtype")

  # the names models/gpt_neox.py's shared layers read
  @property
  def hidden_size(self):
    return self.n_embd

  @property
  def layer_norm_eps(self):
    return self.layer_norm_epsilon

  @property
  def intermediate_size(self):
    return self.n_inner or 4 * self.n_embd

  @property
  def head_dim(self):
    return self.n_embd // self.n_head

  @property
  def num_hidden_layers(self):
    return self.n_layer

  @property
  def max_position_embeddings(self):
    return self.n_positions

  @classmethod
  def from_hf_dict(cls, d, dtype="float32"):
    """Config from a parsed config.json (model_type gpt2)."""
    if d.get("model_type", "gpt2") != "gpt2":
      raise InputError(f"model_type {d['model_type']!r} is not gpt2")
    if d.get("add_cross_attention"):
      raise InputError("GPT-2 with cross-attention (an encoder-decoder) is not a causal language model here")
    fields = {f.name for f in dataclasses.fields(cls)} - {"dtype"}
    kwargs = {k: d[k] for k in fields if k in d}
    return cls(**kwargs, dtype=dtype)

  def to_hf_dict(self):
    """config.json contents that transformers' GPT2LMHeadModel reads (float32 weights, no dropout)."""
    d = {k: v for k, v in dataclasses.asdict(self).items() if k != "dtype"}
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", **d, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0, "use_cache": True, "dtype": "float32"}


class Attention(nnx.Module):
  """Causal self-attention; c_attn's 3D outputs are [q | k | v], each D wide and split into heads."""

  def __init__(self, config, layer_idx, rngs):
    self.config = config
    self.layer_idx = layer_idx
    D = config.n_embd
    self.c_attn = _linear(D, 3 * D, config, rngs)
    self.c_proj = _linear(D, D, config, rngs)

  def __call__(self, x_BxTxD, allowed_BxTxS):
    B, T, D = x_BxTxD.shape
    H, E = self.config.n_head, self.config.head_dim
    q_BxTxD, k_BxSxD, v_BxSxD = jnp.split(self.c_attn(x_BxTxD), 3, axis=-1)
    q_BxTxHxE, k_BxSxHxE, v_BxSxHxE = (a.reshape(B, T, H, E) for a in (q_BxTxD, k_BxSxD, v_BxSxD))
    if q_BxTxHxE.dtype == jnp.float32:
      scores_BxHxTxS = jnp.einsum("bthe,bshe->bhts", q_BxTxHxE, k_BxSxHxE, preferred_element_type=jnp.float32)
    else:
      scores_BxHxTxS = precision_lib.float32_output(
          lambda q, k, p: jnp.einsum("bthe,bshe->bhts", q, k, preferred_element_type=p), q_BxTxHxE, k_BxSxHxE)
    if self.config.scale_attn_weights:
      scores_BxHxTxS = scores_BxHxTxS * E ** -0.5
    if self.config.scale_attn_by_inverse_layer_idx:
      scores_BxHxTxS = scores_BxHxTxS / float(self.layer_idx + 1)
    scores_BxHxTxS = jnp.where(allowed_BxTxS[:, None], scores_BxHxTxS, jnp.finfo(jnp.float32).min)
    probs_BxHxTxS = jax.nn.softmax(scores_BxHxTxS, axis=-1).astype(v_BxSxHxE.dtype)
    out_BxTxHxE = jnp.einsum("bhts,bshe->bthe", probs_BxHxTxS, v_BxSxHxE)
    return self.c_proj(out_BxTxHxE.reshape(B, T, D))


class MLP(nnx.Module):
  def __init__(self, config, rngs):
    self.approximate = _GELU_APPROXIMATE[config.activation_function]
    self.c_fc = _linear(config.n_embd, config.intermediate_size, config, rngs)
    self.c_proj = _linear(config.intermediate_size, config.n_embd, config, rngs)

  def __call__(self, x_BxTxD):
    return self.c_proj(jax.nn.gelu(self.c_fc(x_BxTxD), approximate=self.approximate))


class Block(nnx.Module):
  """Pre-LayerNorm block: h = x + attn(ln_1(x)); h + mlp(ln_2(h))."""

  def __init__(self, config, layer_idx, rngs):
    self.ln_1 = LayerNorm(config, rngs)
    self.attn = Attention(config, layer_idx, rngs)
    self.ln_2 = LayerNorm(config, rngs)
    self.mlp = MLP(config, rngs)

  def __call__(self, x_BxTxD, allowed_BxTxS):
    h_BxTxD = self.attn(self.ln_1(x_BxTxD), allowed_BxTxS) + x_BxTxD
    return self.mlp(self.ln_2(h_BxTxD)) + h_BxTxD


class GPT2LMHeadModel(nnx.Module):
  """Next-token model: logits_BxTxV[b, t] predicts token t + 1 from the unmasked tokens <= t."""

  def __init__(self, config: GPT2Config, *, rngs: nnx.Rngs):
    self.config = config
    dtype, init = jnp.dtype(config.dtype), nnx.initializers.normal(config.initializer_range)
    self.wte = nnx.Embed(config.vocab_size, config.n_embd, dtype=dtype, param_dtype=jnp.float32,
                         embedding_init=init, rngs=rngs)
    self.wpe = nnx.Embed(config.n_positions, config.n_embd, dtype=dtype, param_dtype=jnp.float32,
                         embedding_init=init, rngs=rngs)
    self.h = nnx.List([Block(config, i, rngs) for i in range(config.n_layer)])
    self.ln_f = LayerNorm(config, rngs)
    if not config.tie_word_embeddings:
      self.lm_head = _linear(config.n_embd, config.vocab_size, config, rngs, use_bias=False, logits=True)

  def __call__(self, tokens_BxT, attention_mask=None, position_ids=None):
    """attention_mask_BxT: 1 keep / 0 padding; masked keys are never attended to. Positions default to arange(T),
    as in HF's plain forward (right padding leaves every real token at its own position). Outputs at padded
    positions are finite but meaningless."""
    B, T = tokens_BxT.shape
    if T > self.config.n_positions:
      raise InputError(f"{T} tokens exceed GPT-2's {self.config.n_positions} learned positions")
    if position_ids is None:
      position_ids = jnp.broadcast_to(jnp.arange(T), (B, T))
    x_BxTxD = self.wte(tokens_BxT) + self.wpe(position_ids)
    allowed_BxTxS = _allowed(B, T, attention_mask)
    for block in self.h:
      x_BxTxD = block(x_BxTxD, allowed_BxTxS)
    x_BxTxD = self.ln_f(x_BxTxD)
    if self.config.tie_word_embeddings:
      return tied_logits(self.wte, x_BxTxD)
    return self.lm_head(x_BxTxD).astype(jnp.float32)
