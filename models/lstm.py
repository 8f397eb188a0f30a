"""LSTM language model in Flax NNX: embedding, stacked LSTM layers, linear head (Rossi et al. 2025, Sec. 4.1)."""

import dataclasses

import jax.numpy as jnp
from flax import nnx


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
  vocab_size: int
  embed_dim: int = 192
  hidden_dim: int = 192
  num_layers: int = 2


class LSTMLanguageModel(nnx.Module):
  """Next-token model: logits_BxTxV[b, t] predicts token t + 1 from tokens <= t."""

  def __init__(self, config: LSTMConfig, *, rngs: nnx.Rngs):
    self.config = config
    self.embed = nnx.Embed(config.vocab_size, config.embed_dim, rngs=rngs)
    dims = [config.embed_dim] + [config.hidden_dim] * config.num_layers
    self.layers = nnx.List([nnx.RNN(nnx.OptimizedLSTMCell(d_in, d_out, rngs=rngs), rngs=False)
                            for d_in, d_out in zip(dims[:-1], dims[1:])])
    self.head = nnx.Linear(config.hidden_dim, config.vocab_size, rngs=rngs)

  def __call__(self, tokens_BxT, attention_mask=None, initial_carries=None, return_carries=False):
    """logits_BxTxV; with `return_carries`, also each layer's (c, h) after the last real token of each row (right
    padding: the mask counts the real tokens), which `initial_carries` takes back to continue the rows."""
    x_BxTxD = self.embed(tokens_BxT)
    lengths_B = None
    if return_carries and attention_mask is not None:
      lengths_B = jnp.sum(jnp.asarray(attention_mask) > 0, axis=-1)
    carries = []
    for i, layer in enumerate(self.layers):
      if initial_carries is None:
        zeros_BxH = jnp.zeros(x_BxTxD.shape[:1] + (self.config.hidden_dim,), x_BxTxD.dtype)
        carry = (zeros_BxH, zeros_BxH)
      else:
        carry = initial_carries[i]
      if return_carries:
        carry, x_BxTxD = layer(x_BxTxD, initial_carry=carry, seq_lengths=lengths_B, return_carry=True)
        carries.append(carry)
      else:  # causal by construction; padding only ever follows the scored tokens
        x_BxTxD = layer(x_BxTxD, initial_carry=carry)
    logits_BxTxV = self.head(x_BxTxD).astype(jnp.float32)
    return (logits_BxTxV, tuple(carries)) if return_carries else logits_BxTxV
