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

  def __call__(self, tokens_BxT, attention_mask=None):
    del attention_mask  # causal by construction; padding only ever follows the scored tokens
    x_BxTxD = self.embed(tokens_BxT)
    for layer in self.layers:
      zeros_BxH = jnp.zeros(x_BxTxD.shape[:1] + (self.config.hidden_dim,), x_BxTxD.dtype)
      x_BxTxD = layer(x_BxTxD, initial_carry=(zeros_BxH, zeros_BxH))
    return self.head(x_BxTxD).astype(jnp.float32)
