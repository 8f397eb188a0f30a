"""LSTM language model in Flax NNX: embedding, stacked LSTM layers, linear head (Rossi et al. 2025, Sec. 4.1).

The parameters are nnx.RNN + nnx.OptimizedLSTMCell's (the same initialisation and checkpoint paths), but a layer is
computed as cuDNN and oneDNN do it: the input projection x W_i of all T steps is one matmul before the recurrence,
so only h W_h stays inside the scan, and the backward pass (a custom VJP) runs the recurrence on the gate gradients
alone, then forms the weight gradients as three matmuls over all B x T positions instead of accumulating B x 4H
outer products at every step (BENCHMARKS.md, "Shadow-model trainer"). Gate order i, f, g, o, as OptimizedLSTMCell.
The family's training loss (`lm_loss`) computes the head and the per-token loss in chunks of positions.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
  vocab_size: int
  embed_dim: int = 192
  hidden_dim: int = 192
  num_layers: int = 2


def _activate(z_Bx4H):
  """Gates i, f, g, o from their pre-activations: sigmoid on i, f, o and tanh on g, as one elementwise op over 4H."""
  H = z_Bx4H.shape[-1] // 4
  return jnp.where(jnp.arange(4 * H) // H == 2, jnp.tanh(z_Bx4H), jax.nn.sigmoid(z_Bx4H))


def _cell(xw_Bx4H, c_BxH, h_BxH, w_h_Hx4H, b_4H):
  """One step from the precomputed input projection: (c, h, gates_Bx4H), as OptimizedLSTMCell computes them."""
  gates_Bx4H = _activate(xw_Bx4H + (h_BxH @ w_h_Hx4H + b_4H))  # dense_i(x) + dense_h(h), the cell's order
  i, f, g, o = jnp.split(gates_Bx4H, 4, axis=-1)
  c_BxH = f * c_BxH + i * g
  return c_BxH, o * jnp.tanh(c_BxH), gates_Bx4H


def _active_SxL(T, L):
  """Wavefront schedule: step s runs layer l on time s - l, so layer l is active at steps l <= s < l + T."""
  s_S, l_L = np.arange(T + L - 1)[:, None], np.arange(L)[None]
  return (l_L <= s_S) & (s_S < l_L + T)


def _wavefront(x_TxBxD, c_LxBxH, h_LxBxH, weights):
  """All L layers in one scan over T + L - 1 steps: at step s layer l computes time s - l from layer l - 1's output
  of the step before, with the layer-0 input projection x W_i done for all T steps first. A layer's state stays put
  on the steps where it is idle. Returns ((c, h) after the last step, per-step c_SxLxBxH, h_SxLxBxH, gates_SxLxBx4H)."""
  L, T = len(weights), x_TxBxD.shape[0]
  xw_SxBx4H = jnp.pad(x_TxBxD @ weights[0][0], ((0, L - 1), (0, 0), (0, 0)))
  active_SxLx1x1 = jnp.asarray(_active_SxL(T, L))[:, :, None, None]

  def step(carry, xs):
    c_LxBxH, h_LxBxH = carry
    xw_Bx4H, active_Lx1x1 = xs
    z = [xw_Bx4H + (h_LxBxH[0] @ weights[0][1] + weights[0][2])]  # dense_i(x) + dense_h(h), the cell's order
    z += [h_LxBxH[l - 1] @ w_i + (h_LxBxH[l] @ w_h + b) for l, (w_i, w_h, b) in enumerate(weights) if l > 0]
    gates_LxBx4H = _activate(jnp.stack(z))
    i, f, g, o = jnp.split(gates_LxBx4H, 4, axis=-1)
    c_LxBxH = jnp.where(active_Lx1x1, f * c_LxBxH + i * g, c_LxBxH)
    h_LxBxH = jnp.where(active_Lx1x1, o * jnp.tanh(c_LxBxH), h_LxBxH)
    return (c_LxBxH, h_LxBxH), (c_LxBxH, h_LxBxH, gates_LxBx4H)

  carry, per_step = jax.lax.scan(step, (c_LxBxH, h_LxBxH), (xw_SxBx4H, active_SxLx1x1))
  return carry, per_step


@jax.custom_vjp
def lstm_stack(x_TxBxD, c_LxBxH, h_LxBxH, weights):
  """((c_LxBxH, h_LxBxH) after the last step, the last layer's h_TxBxH) of L stacked LSTM layers over time-major
  inputs; `weights` holds each layer's (w_i, w_h, b)."""
  carry, (_, h_SxLxBxH, _) = _wavefront(x_TxBxD, c_LxBxH, h_LxBxH, weights)
  return carry, h_SxLxBxH[len(weights) - 1:, -1]


def _stack_fwd(x_TxBxD, c_LxBxH, h_LxBxH, weights):
  carry, (c_SxLxBxH, h_SxLxBxH, gates) = _wavefront(x_TxBxD, c_LxBxH, h_LxBxH, weights)
  saved = (x_TxBxD, c_LxBxH, h_LxBxH, weights, c_SxLxBxH, h_SxLxBxH, gates)
  return (carry, h_SxLxBxH[len(weights) - 1:, -1]), saved


def _backward_factors(active_SxLx1x1, c_prev_SxLxBxH, c_SxLxBxH, gates_SxLxBx4H):
  """Per-step factors of the gate gradient, computed for all steps at once outside the recurrence: d z_i, d z_f,
  d z_g = dc times the first three, d z_o = dh times the fourth, dc += dh * the fifth, and dc_prev = dc * the sixth.
  On a layer's idle steps they are 0, 0, 0, 0, 0, 1: no gate gradient, and dc passes through unchanged."""
  i, f, g, o = jnp.split(gates_SxLxBx4H, 4, axis=-1)
  tanh_c = jnp.tanh(c_SxLxBxH)
  zero_when_idle = lambda a: jnp.where(active_SxLx1x1, a, 0.0)  # noqa: E731
  return (zero_when_idle(g * (i * (1 - i))), zero_when_idle(c_prev_SxLxBxH * (f * (1 - f))),
          zero_when_idle(i * (1 - g * g)), zero_when_idle(tanh_c * (o * (1 - o))),
          zero_when_idle(o * (1 - tanh_c * tanh_c)), jnp.where(active_SxLx1x1, f, 1.0))


def _stack_bwd(saved, cotangents):
  """Backpropagation through time as one reverse wavefront on the gates (layer l's d h at time t needs layer l + 1's
  d z at time t and its own at t + 1, both from the step before); weight gradients as matmuls over all steps after."""
  x_TxBxD, c0_LxBxH, h0_LxBxH, weights, c_SxLxBxH, h_SxLxBxH, gates_SxLxBx4H = saved
  (dc_last_LxBxH, dh_last_LxBxH), dh_out_TxBxH = cotangents
  L, T, H = len(weights), x_TxBxD.shape[0], c0_LxBxH.shape[-1]
  active_SxL = _active_SxL(T, L)
  c_prev_SxLxBxH = jnp.concatenate([c0_LxBxH[None], c_SxLxBxH[:-1]])
  h_prev_SxLxBxH = jnp.concatenate([h0_LxBxH[None], h_SxLxBxH[:-1]])
  # What reaches each layer's d h from outside the stack: the loss's d h_out on the last layer, the final carry's
  # cotangent on each layer's last time step.
  dh_in_SxLxBxH = jnp.zeros_like(h_SxLxBxH).at[L - 1:, L - 1].set(dh_out_TxBxH)
  dh_in_SxLxBxH = dh_in_SxLxBxH.at[np.arange(L) + T - 1, np.arange(L)].add(dh_last_LxBxH)
  factors = _backward_factors(jnp.asarray(active_SxL)[:, :, None, None], c_prev_SxLxBxH, c_SxLxBxH, gates_SxLxBx4H)
  w_hT_4HxH = weights[0][1].T
  w_catT = [jnp.concatenate([w_i, w_h], axis=0).T for w_i, w_h, _ in weights[1:]]  # [4H, H + H]: d x, d h at once

  def step(carry, xs):
    dc_LxBxH, dh0_rec_BxH, back = carry  # back[l - 1] = d z_l [W_i; W_h]^T of the step before, for l >= 1
    dh_in_LxBxH, dz_dc_i, dz_dc_f, dz_dc_g, dz_dh_o, dc_dh, f_LxBxH = xs
    dh_rec = [dh0_rec_BxH] + [b[:, H:] for b in back]  # from the layer's own next time step
    from_above = [b[:, :H] for b in back] + [jnp.zeros_like(dh0_rec_BxH)]  # from layer l + 1 at the same time
    dh_LxBxH = jnp.stack([r + a for r, a in zip(dh_rec, from_above)]) + dh_in_LxBxH
    dc_LxBxH = dc_LxBxH + dh_LxBxH * dc_dh
    dz_LxBx4H = jnp.concatenate([dc_LxBxH * dz_dc_i, dc_LxBxH * dz_dc_f, dc_LxBxH * dz_dc_g, dh_LxBxH * dz_dh_o], -1)
    back = tuple(dz_LxBx4H[l] @ w for l, w in enumerate(w_catT, start=1))
    return (dc_LxBxH * f_LxBxH, dz_LxBx4H[0] @ w_hT_4HxH, back), dz_LxBx4H

  B = h0_LxBxH.shape[1]
  back0 = tuple(jnp.zeros((B, 2 * H), h0_LxBxH.dtype) for _ in weights[1:])
  (dc0_LxBxH, dh0_rec_BxH, _), dz_SxLxBx4H = jax.lax.scan(
      step, (dc_last_LxBxH, jnp.zeros_like(h0_LxBxH[0]), back0), (dh_in_SxLxBxH,) + factors, reverse=True)
  flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731  (steps x B positions as rows; idle steps have d z = 0)
  dh0_LxBxH = jnp.stack([dh0_rec_BxH] + [dz_SxLxBx4H[l, l] @ w_h.T for l, (_, w_h, _) in enumerate(weights) if l])
  dz0_TxBx4H = dz_SxLxBx4H[:T, 0]
  d_weights = []
  for l in range(L):
    dz_Nx4H = flat(dz_SxLxBx4H[:, l])
    d_w_i = flat(x_TxBxD).T @ flat(dz0_TxBx4H) if l == 0 else flat(h_prev_SxLxBxH[:, l - 1]).T @ dz_Nx4H
    d_weights.append((d_w_i, flat(h_prev_SxLxBxH[:, l]).T @ dz_Nx4H, dz_Nx4H.sum(axis=0)))
  return dz0_TxBx4H @ weights[0][0].T, dc0_LxBxH, dh0_LxBxH, tuple(d_weights)


lstm_stack.defvjp(_stack_fwd, _stack_bwd)


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
    logits_BxTxV = self.head(jnp.swapaxes(h_TxBxH, 0, 1)).astype(jnp.float32)
    return (logits_BxTxV, carries) if return_carries else logits_BxTxV

  def features(self, tokens_BxT, attention_mask=None, initial_carries=None, return_carries=False):
    """(h_TxBxH, the last layer's outputs time-major; each layer's final carry, as __call__ returns them)."""
    x_TxBxD = self.embed(tokens_BxT.T)  # time-major inside: each step reads one contiguous [B, D] slice
    lengths_B = None
    if return_carries and attention_mask is not None:
      lengths_B = jnp.sum(jnp.asarray(attention_mask) > 0, axis=-1)
    L, B = len(self.layers), x_TxBxD.shape[1]
    if initial_carries is None:
      c_LxBxH = h_LxBxH = jnp.zeros((L, B, self.config.hidden_dim), x_TxBxD.dtype)
    else:
      c_LxBxH, h_LxBxH = (jnp.stack([carry[k] for carry in initial_carries]) for k in (0, 1))
    weights = tuple((layer.cell.dense_i.kernel[...], layer.cell.dense_h.kernel[...], layer.cell.dense_h.bias[...])
                    for layer in self.layers)
    if lengths_B is None:  # causal by construction; padding only ever follows the scored tokens
      (c_LxBxH, h_LxBxH), x_TxBxD = lstm_stack(x_TxBxD, c_LxBxH, h_LxBxH, weights)
    else:  # the carry after each row's last real token (as nnx.RNN's seq_lengths); outputs as without a mask
      _, (c_SxLxBxH, h_SxLxBxH, _) = _wavefront(x_TxBxD, c_LxBxH, h_LxBxH, weights)
      x_TxBxD = h_SxLxBxH[L - 1:, L - 1]
      step_LxB = (lengths_B - 1)[None, :] + jnp.arange(L)[:, None]  # layer l computed time t at step t + l
      at_last = lambda a_SxLxBxH: a_SxLxBxH[step_LxB, jnp.arange(L)[:, None], jnp.arange(B)[None]]  # noqa: E731
      c_LxBxH, h_LxBxH = at_last(c_SxLxBxH), at_last(h_SxLxBxH)
    carries = [(c_LxBxH[l], h_LxBxH[l]) for l in range(L)]
    return x_TxBxD, tuple(carries)


def lm_loss(module, tokens_BxT, bos_id, key):
  """models.lm_loss of the LSTM, -ln p(x_t | BOS, x_<t) [B, T], with the head and loss computed in chunks of positions
  (training.extract.linear_token_loss), so the [B, T, V] logits and their gradient are never materialised whole."""
  from training import extract
  del key
  h_TxBxH, _ = module.features(extract.with_bos(tokens_BxT, bos_id))
  T, B, H = h_TxBxH.shape
  loss_N = extract.linear_token_loss(h_TxBxH.reshape(T * B, H), module.head.kernel[...], module.head.bias[...],
                                     tokens_BxT.T.reshape(-1), ROWS)
  return loss_N.reshape(T, B).T

ROWS = None
