"""LSTM language model in Flax NNX: embedding, stacked LSTM layers, linear head (Rossi et al. 2025, Sec. 4.1).

The parameters are nnx.RNN + nnx.OptimizedLSTMCell's (the same initialisation and checkpoint paths), but a layer is
computed as cuDNN and oneDNN do it: the input projection x W_i of all T steps is one matmul before the recurrence,
so only h W_h stays inside the scan, and the backward pass (a custom VJP) runs the recurrence on the gate gradients
alone (the gates' derivative factors computed for all T steps before it), then forms the weight gradients as three
matmuls over all B x T positions instead of accumulating B x 4H outer products at every step (BENCHMARKS.md,
"Shadow-model trainer"). Gate order i, f, g, o, as OptimizedLSTMCell.
The family's training loss (`lm_loss`) computes the head and the per-token loss in chunks of positions.

Compute dtype (`LSTMConfig.dtype`, models/precision.py): the layer computes in its input's dtype. In bfloat16 the
embeddings, each layer's outputs h and every matmul operand (forward and backward) are bfloat16; every matmul of the
layer sums in float32, the gates, the cell state c and the recurrence's carries stay float32 (c is a sum over all T
steps), and the weight gradients are float32 sums over the B x T positions; the head's logits are float32 sums.
"""

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from models import precision
from models import token_loss


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
  vocab_size: int
  embed_dim: int = 192
  hidden_dim: int = 192
  num_layers: int = 2
  dtype: str = "float32"  # compute dtype, "float32" or "bfloat16" (models/precision.py); parameters stay float32

  def __post_init__(self):
    precision.check(self.dtype, "LSTMConfig.dtype")


def _activate(z_Bx4H):
  """Gates i, f, g, o from their pre-activations (sigmoid on i, f, o, tanh on g) as one [B, 4H] array."""
  i, f, g, o = jnp.split(z_Bx4H, 4, axis=-1)
  return jnp.concatenate([jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)], axis=-1)


def _cell(xw_Bx4H, c_BxH, h_BxH, w_h_Hx4H, b_4H, dtype):
  """One step from the precomputed input projection: (c, h, gates_Bx4H), as OptimizedLSTMCell computes them; the
  h W_h product in `dtype`, summed in float32."""
  hw_Bx4H = precision.matmul(h_BxH, w_h_Hx4H, dtype)
  gates_Bx4H = _activate(xw_Bx4H + (hw_Bx4H + b_4H))  # dense_i(x) + dense_h(h), the cell's order
  i, f, g, o = jnp.split(gates_Bx4H, 4, axis=-1)
  c_BxH = f * c_BxH + i * g
  return c_BxH, o * jnp.tanh(c_BxH), gates_Bx4H


def _recurrence(xw_TxBx4H, c_BxH, h_BxH, w_h_Hx4H, b_4H, dtype):
  """((c, h) after the last step, h_TxBxH in `dtype`, per-step (c_TxBxH, gates_TxBx4H)); the carries are float32.
  Step t overwrites row t of the input projection, read only there, with its gates: the gates need no zero-filled
  buffer of their own."""
  def step(carry, t):
    c_BxH, h_BxH, xw_or_gates_TxBx4H = carry
    c_BxH, h_BxH, gates_Bx4H = _cell(xw_or_gates_TxBx4H[t], c_BxH, h_BxH, w_h_Hx4H, b_4H, dtype)
    return (c_BxH, h_BxH, xw_or_gates_TxBx4H.at[t].set(gates_Bx4H)), (h_BxH.astype(dtype), c_BxH)

  w_h_Hx4H = w_h_Hx4H.astype(dtype)  # rounded once, not at every step
  carry = (c_BxH.astype(jnp.float32), h_BxH.astype(jnp.float32), xw_TxBx4H)
  (c_BxH, h_BxH, gates_TxBx4H), (h_TxBxH, c_TxBxH) = jax.lax.scan(step, carry, jnp.arange(xw_TxBx4H.shape[0]))
  return (c_BxH, h_BxH), h_TxBxH, (c_TxBxH, gates_TxBx4H)


@jax.custom_vjp
def lstm_layer(x_TxBxD, c_BxH, h_BxH, w_i_Dx4H, w_h_Hx4H, b_4H):
  """((c, h) after the last step, h_TxBxH) of one LSTM layer over time-major inputs, computed in x's dtype."""
  return _layer_fwd(x_TxBxD, c_BxH, h_BxH, w_i_Dx4H, w_h_Hx4H, b_4H)[0]


def _layer_fwd(x_TxBxD, c_BxH, h_BxH, w_i_Dx4H, w_h_Hx4H, b_4H):
  dtype = x_TxBxD.dtype
  xw_TxBx4H = precision.matmul(x_TxBxD, w_i_Dx4H, dtype)
  carry, h_TxBxH, (c_TxBxH, gates) = _recurrence(xw_TxBx4H, c_BxH, h_BxH, w_h_Hx4H, b_4H, dtype)
  return (carry, h_TxBxH), (x_TxBxD, c_BxH, h_BxH, w_i_Dx4H, w_h_Hx4H, h_TxBxH, c_TxBxH, gates)


def _backward_factors(c_prev_TxBxH, c_TxBxH, gates_TxBx4H):
  """Per-step factors of the gate gradient, computed for all T steps at once outside the recurrence: d z_i, d z_f,
  d z_g = dc times the first three, d z_o = dh times the fourth, dc += dh * the fifth, and dc_prev = dc * f."""
  i, f, g, o = jnp.split(gates_TxBx4H, 4, axis=-1)
  tanh_c = jnp.tanh(c_TxBxH)
  return (g * (i * (1 - i)), c_prev_TxBxH * (f * (1 - f)), i * (1 - g * g), tanh_c * (o * (1 - o)),
          o * (1 - tanh_c * tanh_c), f)


def _layer_bwd(saved, cotangents):
  """Backpropagation through time on the gates; weight gradients as matmuls over all T x B positions afterwards."""
  x_TxBxD, c0_BxH, h0_BxH, w_i_Dx4H, w_h_Hx4H, h_TxBxH, c_TxBxH, gates_TxBx4H = saved
  dtype = x_TxBxD.dtype
  (dc_last_BxH, dh_last_BxH), dh_out_TxBxH = cotangents
  dh_out_TxBxH = dh_out_TxBxH.astype(jnp.float32)
  c_prev_TxBxH = jnp.concatenate([c0_BxH[None].astype(jnp.float32), c_TxBxH[:-1]])
  h_prev_TxBxH = jnp.concatenate([h0_BxH[None].astype(dtype), h_TxBxH[:-1]])
  w_h_rounded_Hx4H = w_h_Hx4H.astype(dtype)  # rounded once, not at every step

  def step(carry, xs):
    dc_BxH, dh_BxH = carry
    dh_out_BxH, dz_dc_i, dz_dc_f, dz_dc_g, dz_dh_o, dc_dh_BxH, f_BxH = xs
    dh_BxH = dh_BxH + dh_out_BxH
    dc_BxH = dc_BxH + dh_BxH * dc_dh_BxH
    dz_Bx4H = jnp.concatenate([dc_BxH * dz_dc_i, dc_BxH * dz_dc_f, dc_BxH * dz_dc_g, dh_BxH * dz_dh_o], axis=-1)
    return (dc_BxH * f_BxH, precision.matmul(dz_Bx4H, w_h_rounded_Hx4H.T, dtype)), dz_Bx4H

  xs = (dh_out_TxBxH,) + _backward_factors(c_prev_TxBxH, c_TxBxH, gates_TxBx4H)
  (dc0_BxH, dh0_BxH), dz_TxBx4H = jax.lax.scan(step, (dc_last_BxH, dh_last_BxH), xs, reverse=True)
  flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731  (T x B positions as rows)
  dz_Nx4H = flat(dz_TxBx4H)
  matmul = lambda a, b: precision.matmul(a, b, dtype)  # noqa: E731
  return (matmul(dz_TxBx4H, w_i_Dx4H.T).astype(dtype), dc0_BxH.astype(c0_BxH.dtype), dh0_BxH.astype(h0_BxH.dtype),
          matmul(flat(x_TxBxD).T, dz_Nx4H), matmul(flat(h_prev_TxBxH).T, dz_Nx4H), dz_Nx4H.sum(axis=0))


lstm_layer.defvjp(_layer_fwd, _layer_bwd)


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
    h_TxBxH, carries = self.features(tokens_BxT, attention_mask, initial_carries, return_carries)
    h_BxTxH = jnp.swapaxes(h_TxBxH, 0, 1)
    if h_BxTxH.dtype == jnp.float32:
      logits_BxTxV = self.head(h_BxTxH)
    else:  # float32 logits from float32 sums of the compute dtype's products
      kernel_HxV = self.head.kernel[...].astype(h_BxTxH.dtype)
      logits_BxTxV = precision.float32_output(lambda h, k, p: jnp.matmul(h, k, preferred_element_type=p), h_BxTxH,
                                              kernel_HxV) + self.head.bias[...]
    return (logits_BxTxV, carries) if return_carries else logits_BxTxV

  def features(self, tokens_BxT, attention_mask=None, initial_carries=None, return_carries=False):
    """(h_TxBxH, the last layer's outputs time-major; each layer's final carry, as __call__ returns them)."""
    dtype = jnp.dtype(self.config.dtype)
    x_TxBxD = self.embed(tokens_BxT.T).astype(dtype)  # time-major inside: each step reads one contiguous [B, D] slice
    lengths_B = None
    if return_carries and attention_mask is not None:
      lengths_B = jnp.sum(jnp.asarray(attention_mask) > 0, axis=-1)
    carries = []
    for i, layer in enumerate(self.layers):
      if initial_carries is None:
        zeros_BxH = jnp.zeros(x_TxBxD.shape[1:2] + (self.config.hidden_dim,), jnp.float32)
        c_BxH, h_BxH = zeros_BxH, zeros_BxH
      else:
        c_BxH, h_BxH = initial_carries[i]
      cell = layer.cell
      weights = (cell.dense_i.kernel[...], cell.dense_h.kernel[...], cell.dense_h.bias[...])
      if lengths_B is None:  # causal by construction; padding only ever follows the scored tokens
        carry, x_TxBxD = lstm_layer(x_TxBxD, c_BxH, h_BxH, *weights)
      else:  # the carry after each row's last real token (as nnx.RNN's seq_lengths); outputs as without a mask
        xw_TxBx4H = precision.matmul(x_TxBxD, weights[0], dtype)
        _, x_TxBxD, (c_TxBxH, _) = _recurrence(xw_TxBx4H, c_BxH, h_BxH, *weights[1:], dtype)
        last_1xBx1 = (lengths_B - 1)[None, :, None]
        carry = tuple(jnp.take_along_axis(a, last_1xBx1, axis=0)[0] for a in (c_TxBxH, x_TxBxD))
      carries.append(carry)
    return x_TxBxD, tuple(carries)


def lm_loss(module, tokens_BxT, bos_id, key):
  """models.lm_loss of the LSTM, -ln p(x_t | BOS, x_<t) [B, T], with the head and loss computed in chunks of positions
  (models.token_loss.linear_token_loss), so the [B, T, V] logits and their gradient are never materialised whole."""
  del key
  h_TxBxH, _ = module.features(token_loss.with_bos(tokens_BxT, bos_id))
  T, B, H = h_TxBxH.shape
  kernel_HxV = module.head.kernel[...]
  # One chunk when all logits fit in 1 MiB (the CPU default's N = V = 512): two chunks of 256 rows cost a loop and
  # the backward's accumulators for no cache gain (BENCHMARKS.md); larger ones take chunk_rows.
  rows = T * B if T * B * kernel_HxV.shape[1] <= 2**18 else None
  loss_N = token_loss.linear_token_loss(h_TxBxH.reshape(T * B, H), kernel_HxV, module.head.bias[...],
                                        tokens_BxT.T.reshape(-1), rows)
  return loss_N.reshape(T, B).T
