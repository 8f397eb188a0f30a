"""GPT-NeoX (Pythia) decoder in Flax NNX, numerically matching Hugging Face's `GPTNeoXForCausalLM` forward pass.

Letters: B batch, T query time, S key time, D hidden, H heads, E head dim (D = H * E), R rotary dims, P pass-through
dims (E - R), F MLP width, V vocab, C cached prefixes. Loading and saving Hugging Face folders is
models/hf_convert.py.

Compute dtype (`GPTNeoXConfig.dtype`, models/precision.py): in bfloat16 the embeddings, the residual stream and every
linear layer's operands and outputs are bfloat16; layer norms and the softmax are float32, the attention scores
and the output head's logits are float32 products of bfloat16 operands (precision.float32_output: no bfloat16
rounding of the logits the loss reads; their backward pass in bfloat16).

KV cache: `prefill` runs prefixes once and keeps every layer's keys and values after rotary; `extend` runs new
tokens against them. Positions count real tokens only (cumsum(mask) - 1), in the prefix and after it, so padding
never shifts a real token's RoPE angle and the cached path computes what the full forward pass on the unpadded
concatenation computes; only the order of float sums differs (other shapes, other matmul blocking).
"""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from lira.errors import InputError
from models import precision as precision_lib

# Hugging Face activation names -> GELU variant; "gelu" is the exact erf form, the rest the tanh approximation.
_GELU_APPROXIMATE = {"gelu": False, "gelu_new": True, "gelu_fast": True, "gelu_pytorch_tanh": True}


@dataclasses.dataclass(frozen=True)
class GPTNeoXConfig:
  """Fields of Hugging Face's config.json (defaults: Pythia-160M) plus `dtype`, the compute dtype."""

  vocab_size: int
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  rotary_pct: float = 0.25  # fraction of each head's dims that get rotary embeddings
  rotary_emb_base: float = 10000.0  # rope theta
  max_position_embeddings: int = 2048
  layer_norm_eps: float = 1e-5
  use_parallel_residual: bool = True
  hidden_act: str = "gelu"
  tie_word_embeddings: bool = False
  attention_bias: bool = True
  initializer_range: float = 0.02
  bos_token_id: int | None = 0
  eos_token_id: int | None = 0
  dtype: str = "float32"  # compute dtype (models/precision.py); params, softmax and layernorm stay float32

  def __post_init__(self):
    if self.hidden_size % self.num_attention_heads:
      raise InputError(f"hidden_size {self.hidden_size} not divisible by {self.num_attention_heads} heads")
    if self.hidden_act not in _GELU_APPROXIMATE:
      raise InputError(f"hidden_act {self.hidden_act!r} unsupported; available: {sorted(_GELU_APPROXIMATE)}")
    if self.rotary_ndims % 2:
      raise InputError(f"rotary dims int({self.head_dim} * {self.rotary_pct}) = {self.rotary_ndims} must be even")
    precision_lib.check(self.dtype, "GPTNeoXConfig.dtype")

  @property
  def head_dim(self):
    return self.hidden_size // self.num_attention_heads

  @property
  def rotary_ndims(self):
    return int(self.head_dim * self.rotary_pct)  # as Hugging Face rounds it

  @classmethod
  def from_hf_dict(cls, d, dtype="float32"):
    """Config from a parsed config.json; reads the rope keys of transformers v5 (`rope_parameters`) and older ones."""
    if d.get("model_type", "gpt_neox") != "gpt_neox":
      raise InputError(f"model_type {d['model_type']!r} is not gpt_neox")
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    if missing := [k for k in required if k not in d]:
      raise InputError(f"config.json lacks {missing}")
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
      raise InputError(f"rope type {rope.get('rope_type', rope.get('type'))!r} unsupported; only default rope")
    theta = rope.get("rope_theta", d.get("rotary_emb_base", d.get("rope_theta", cls.rotary_emb_base)))
    fields = {f.name for f in dataclasses.fields(cls)} - {"dtype", "rotary_pct", "rotary_emb_base"}
    kwargs = {k: tuple(d[k]) if isinstance(d[k], list) else d[k] for k in fields if k in d}  # eos may be a list
    return cls(**kwargs, dtype=dtype, rotary_emb_base=float(theta),
               rotary_pct=float(rope.get("partial_rotary_factor", d.get("rotary_pct", cls.rotary_pct))))

  def to_hf_dict(self):
    """config.json contents that transformers v5 and older both read (both rope key styles, float32 weights)."""
    d = {k: v for k, v in dataclasses.asdict(self).items() if k != "dtype"}
    d["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rotary_emb_base,
                            "partial_rotary_factor": self.rotary_pct}
    return {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", **d, "hidden_dropout": 0.0,
            "attention_dropout": 0.0, "use_cache": True, "dtype": "float32"}


def rotary_cos_sin(positions_BxT, config):
  """cos, sin of RoPE angles (Su et al. 2021), laid out for rotate_half as Hugging Face does: [B, T, R]."""
  R = config.rotary_ndims
  inv_freq_R2 = 1.0 / (config.rotary_emb_base ** (jnp.arange(0, R, 2, dtype=jnp.float32) / R))
  freqs_BxTxR2 = positions_BxT[..., None].astype(jnp.float32) * inv_freq_R2
  angles_BxTxR = jnp.concatenate([freqs_BxTxR2, freqs_BxTxR2], axis=-1)
  return jnp.cos(angles_BxTxR), jnp.sin(angles_BxTxR)


def apply_rotary(x_BxTxHxE, cos_BxTxR, sin_BxTxR):
  """Rotate the first R dims of each head (rotate_half convention); the remaining E - R pass through."""
  R = cos_BxTxR.shape[-1]
  cos_BxTx1xR = cos_BxTxR[:, :, None].astype(x_BxTxHxE.dtype)
  sin_BxTx1xR = sin_BxTxR[:, :, None].astype(x_BxTxHxE.dtype)
  rot_BxTxHxR, pass_BxTxHxP = x_BxTxHxE[..., :R], x_BxTxHxE[..., R:]
  x1, x2 = rot_BxTxHxR[..., :R // 2], rot_BxTxHxR[..., R // 2:]
  half_rotated_BxTxHxR = jnp.concatenate([-x2, x1], axis=-1)
  rot_BxTxHxR = rot_BxTxHxR * cos_BxTx1xR + half_rotated_BxTxHxR * sin_BxTx1xR
  return jnp.concatenate([rot_BxTxHxR, pass_BxTxHxP], axis=-1)


def _float32_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
  """The head's dot_general in bfloat16: float32 logits (models.precision.float32_output)."""
  del preferred_element_type
  op = lambda a, b, p: jax.lax.dot_general(a, b, dimension_numbers, precision, preferred_element_type=p,  # noqa: E731
                                           **kwargs)
  return precision_lib.float32_output(op, lhs, rhs)


def _linear(d_in, d_out, config, rngs, use_bias=True, logits=False):
  """nnx.Linear in the compute dtype; the `logits` of a bfloat16 model come out float32."""
  dtype = jnp.dtype(config.dtype)
  extra = dict(dot_general=_float32_dot_general) if logits and dtype != jnp.float32 else {}
  return nnx.Linear(d_in, d_out, use_bias=use_bias, dtype=dtype, param_dtype=jnp.float32,
                    kernel_init=nnx.initializers.normal(config.initializer_range), rngs=rngs, **extra)


class LayerNorm(nnx.Module):
  """torch.nn.LayerNorm computed in float32 (exact two-pass variance), returned in the compute dtype."""

  def __init__(self, config, rngs):
    self.norm = nnx.LayerNorm(config.hidden_size, epsilon=config.layer_norm_eps, dtype=jnp.float32,
                              param_dtype=jnp.float32, use_fast_variance=False, rngs=rngs)

  def __call__(self, x_BxTxD):
    return self.norm(x_BxTxD.astype(jnp.float32)).astype(x_BxTxD.dtype)


class Attention(nnx.Module):
  """Causal self-attention with HF's fused query_key_value: per head the 3E outputs are [q | k | v]."""

  def __init__(self, config, rngs):
    self.config = config
    D = config.hidden_size
    self.query_key_value = _linear(D, 3 * D, config, rngs, use_bias=config.attention_bias)
    self.dense = _linear(D, D, config, rngs, use_bias=config.attention_bias)

  def __call__(self, x_BxTxD, cos_BxTxR, sin_BxTxR, allowed_BxTxS, past=None):
    """(output, (k, v) after rotary). `past` = (k_CxSxHxE, v_CxSxHxE, mask_CxS): cached keys every query also sees,
    rows grouped as in GPTNeoXForCausalLM.extend (query row b reads cache row b // (B / C))."""
    B, T, D = x_BxTxD.shape
    H, E = self.config.num_attention_heads, self.config.head_dim
    qkv_BxTxHx3E = self.query_key_value(x_BxTxD).reshape(B, T, H, 3 * E)
    q_BxTxHxE, k_BxSxHxE, v_BxSxHxE = jnp.split(qkv_BxTxHx3E, 3, axis=-1)
    q_BxTxHxE = apply_rotary(q_BxTxHxE, cos_BxTxR, sin_BxTxR)
    k_BxSxHxE = apply_rotary(k_BxSxHxE, cos_BxTxR, sin_BxTxR)
    keys_BxSxHxE, values_BxSxHxE = k_BxSxHxE, v_BxSxHxE
    if past is not None:  # each cache row serves its group of B / C query rows: [cached keys | new keys]
      past_k_CxSxHxE, past_v_CxSxHxE, past_mask_CxS = past
      C, S = past_mask_CxS.shape
      group = lambda x: jnp.repeat(x, B // C, axis=0)  # noqa: E731
      keys_BxSxHxE = jnp.concatenate([group(past_k_CxSxHxE).astype(k_BxSxHxE.dtype), k_BxSxHxE], axis=1)
      values_BxSxHxE = jnp.concatenate([group(past_v_CxSxHxE).astype(v_BxSxHxE.dtype), v_BxSxHxE], axis=1)
      allowed_BxTxS = jnp.concatenate([jnp.broadcast_to(group(past_mask_CxS)[:, None], (B, T, S)), allowed_BxTxS], -1)
    if q_BxTxHxE.dtype == jnp.float32:
      scores_BxHxTxS = jnp.einsum("bthe,bshe->bhts", q_BxTxHxE, keys_BxSxHxE, preferred_element_type=jnp.float32)
    else:
      scores_BxHxTxS = precision_lib.float32_output(
          lambda q, k, p: jnp.einsum("bthe,bshe->bhts", q, k, preferred_element_type=p), q_BxTxHxE, keys_BxSxHxE)
    scores_BxHxTxS = scores_BxHxTxS * E ** -0.5
    # A finite floor, not -inf: a row with no allowed key (a left-padding query) softmaxes to uniform, not NaN.
    scores_BxHxTxS = jnp.where(allowed_BxTxS[:, None], scores_BxHxTxS, jnp.finfo(jnp.float32).min)
    probs_BxHxTxS = jax.nn.softmax(scores_BxHxTxS, axis=-1).astype(values_BxSxHxE.dtype)
    out_BxTxHxE = jnp.einsum("bhts,bshe->bthe", probs_BxHxTxS, values_BxSxHxE)
    return self.dense(out_BxTxHxE.reshape(B, T, D)), (k_BxSxHxE, v_BxSxHxE)


class MLP(nnx.Module):
  def __init__(self, config, rngs):
    self.approximate = _GELU_APPROXIMATE[config.hidden_act]
    self.dense_h_to_4h = _linear(config.hidden_size, config.intermediate_size, config, rngs)
    self.dense_4h_to_h = _linear(config.intermediate_size, config.hidden_size, config, rngs)

  def __call__(self, x_BxTxD):
    return self.dense_4h_to_h(jax.nn.gelu(self.dense_h_to_4h(x_BxTxD), approximate=self.approximate))


class Layer(nnx.Module):
  """Parallel residual x + attn(ln1(x)) + mlp(ln2(x)) (Pythia), or sequential h = x + attn(ln1(x)); h + mlp(ln2(h))."""

  def __init__(self, config, rngs):
    self.use_parallel_residual = config.use_parallel_residual
    self.input_layernorm = LayerNorm(config, rngs)
    self.post_attention_layernorm = LayerNorm(config, rngs)
    self.attention = Attention(config, rngs)
    self.mlp = MLP(config, rngs)

  def __call__(self, x_BxTxD, cos_BxTxR, sin_BxTxR, allowed_BxTxS, past=None):
    """(output, this layer's (k, v) after rotary)."""
    attn_BxTxD, kv = self.attention(self.input_layernorm(x_BxTxD), cos_BxTxR, sin_BxTxR, allowed_BxTxS, past)
    if self.use_parallel_residual:
      return self.mlp(self.post_attention_layernorm(x_BxTxD)) + attn_BxTxD + x_BxTxD, kv  # HF's summation order
    h_BxTxD = attn_BxTxD + x_BxTxD
    return self.mlp(self.post_attention_layernorm(h_BxTxD)) + h_BxTxD, kv


class GPTNeoXForCausalLM(nnx.Module):
  """Next-token model: logits_BxTxV[b, t] predicts token t + 1 from the unmasked tokens <= t."""

  def __init__(self, config: GPTNeoXConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embed_in = nnx.Embed(config.vocab_size, config.hidden_size, dtype=jnp.dtype(config.dtype),
                              param_dtype=jnp.float32,
                              embedding_init=nnx.initializers.normal(config.initializer_range), rngs=rngs)
    self.layers = nnx.List([Layer(config, rngs) for _ in range(config.num_hidden_layers)])
    self.final_layer_norm = LayerNorm(config, rngs)
    if not config.tie_word_embeddings:
      self.embed_out = _linear(config.hidden_size, config.vocab_size, config, rngs, use_bias=False, logits=True)

  def __call__(self, tokens_BxT, attention_mask=None, position_ids=None):
    """attention_mask_BxT: 1 keep / 0 padding, left or right; masked keys are never attended to.

    Positions default to arange(T) whatever the mask, as in HF's plain forward `model(ids, attention_mask=mask)`;
    HF's generate() instead passes cumsum(mask) - 1 for left padding: give that as position_ids to match it. For
    real tokens the two differ by a shift shared by all of them, which RoPE cancels up to float rounding.
    Outputs at padded positions are finite but meaningless.
    """
    B, T = tokens_BxT.shape
    if position_ids is None:
      position_ids = jnp.broadcast_to(jnp.arange(T), (B, T))
    return self._forward(tokens_BxT, _allowed(B, T, attention_mask), position_ids)[0]

  def prefill(self, tokens_CxS, attention_mask_CxS):
    """(logits_CxSxV, KVCache) of C prefixes, left or right padded; real tokens sit at positions 0, 1, ... whatever
    the padding (cumsum(mask) - 1), so a prefix's cache is the same as that of its unpadded tokens."""
    mask_CxS = jnp.asarray(attention_mask_CxS) > 0
    positions_CxS = jnp.maximum(jnp.cumsum(mask_CxS, axis=-1) - 1, 0)
    C, S = tokens_CxS.shape
    logits_CxSxV, kvs = self._forward(tokens_CxS, _allowed(C, S, mask_CxS), positions_CxS)
    return logits_CxSxV, KVCache(tuple(k for k, _ in kvs), tuple(v for _, v in kvs), mask_CxS)

  def extend(self, tokens_BxT, cache, attention_mask_BxT=None):
    """logits_BxTxV of new tokens that follow a cached prefix: they see its real tokens and, causally, each other.

    The B rows come in C groups of B / C, one per cache row (row b continues cache row b // (B / C)): a cache of one
    prefix serves every row, a cache of C prefixes serves C groups of the same texts. A row's real tokens take the
    positions after its prefix's real tokens, so the logits equal the full forward pass on the unpadded
    concatenation (up to float rounding).
    """
    B, T = tokens_BxT.shape
    C = cache.mask_CxS.shape[0]
    if B % C:
      raise InputError(f"{B} new rows do not split into groups for {C} cached prefixes")
    mask_BxT = jnp.ones((B, T), bool) if attention_mask_BxT is None else jnp.asarray(attention_mask_BxT) > 0
    start_Bx1 = jnp.repeat(cache.mask_CxS.sum(-1), B // C)[:, None]
    positions_BxT = start_Bx1 + jnp.maximum(jnp.cumsum(mask_BxT, axis=-1) - 1, 0)
    return self._forward(tokens_BxT, _allowed(B, T, mask_BxT), positions_BxT, cache)[0]

  def _forward(self, tokens_BxT, allowed_BxTxS, position_ids_BxT, cache=None):
    """(logits_BxTxV float32, per-layer (k, v) after rotary)."""
    cos_BxTxR, sin_BxTxR = rotary_cos_sin(position_ids_BxT, self.config)
    x_BxTxD = self.embed_in(tokens_BxT)
    kvs = []
    for i, layer in enumerate(self.layers):
      past = None if cache is None else (cache.keys[i], cache.values[i], cache.mask_CxS)
      x_BxTxD, kv = layer(x_BxTxD, cos_BxTxR, sin_BxTxR, allowed_BxTxS, past)
      kvs.append(kv)
    x_BxTxD = self.final_layer_norm(x_BxTxD)
    if self.config.tie_word_embeddings:
      return tied_logits(self.embed_in, x_BxTxD), kvs
    return self.embed_out(x_BxTxD).astype(jnp.float32), kvs


def tied_logits(embed, x_BxTxD):
  """float32 logits_BxTxV of a head tied to the token embedding `embed` (nnx.Embed): x E^T, in bfloat16 operands
  with float32 products when x is bfloat16 (precision.float32_output)."""
  if x_BxTxD.dtype == jnp.float32:
    return embed.attend(x_BxTxD)
  embedding_VxD = embed.embedding[...].astype(x_BxTxD.dtype)
  return precision_lib.float32_output(lambda x, e, p: jnp.matmul(x, e.T, preferred_element_type=p), x_BxTxD,
                                      embedding_VxD)


class KVCache(NamedTuple):
  """Per-layer keys and values (after rotary) of C prefixes, [C, S, H, E] each, and which of the S are real."""

  keys: tuple
  values: tuple
  mask_CxS: jax.Array


def _allowed(B, T, attention_mask_BxT):
  """allowed_BxTxS: causal (key s <= query t), and masked keys are never attended to."""
  allowed_BxTxS = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
  if attention_mask_BxT is not None:
    allowed_BxTxS = allowed_BxTxS & (jnp.asarray(attention_mask_BxT)[:, None, :] > 0)
  return allowed_BxTxS
