"""models.lstm's hand-written layer against nnx.RNN + OptimizedLSTMCell, and the chunked head + loss against the
whole-logits token_loss (models.token_loss.linear_token_loss)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models import get_model
from models import lstm
from models import token_loss

V, D, H = 24, 8, 16


def module_and_reference(num_layers=2):
  """Our module, and a function computing its logits with nnx.RNN layers (the flax reference) on the same params."""
  config = lstm.LSTMConfig(vocab_size=V, embed_dim=D, hidden_dim=H, num_layers=num_layers)
  module = lstm.LSTMLanguageModel(config, rngs=nnx.Rngs(0))
  graphdef, params = nnx.split(module)

  def reference(params, tokens_BxT, seq_lengths=None):
    m = nnx.merge(graphdef, params)
    x_BxTxD = m.embed(tokens_BxT)
    carries = []
    for layer in m.layers:
      zeros_BxH = jnp.zeros((tokens_BxT.shape[0], H))
      carry, x_BxTxD = layer(x_BxTxD, initial_carry=(zeros_BxH, zeros_BxH), seq_lengths=seq_lengths,
                             return_carry=True)
      carries.append(carry)
    return m.head(x_BxTxD), carries

  return graphdef, params, reference


def tokens(B=3, T=7, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(0, V, (B, T)), jnp.int32)


LAYERS_AND_T = [(1, 7), (2, 7), (3, 7), (2, 1), (3, 1)]


@pytest.mark.parametrize("num_layers, T", LAYERS_AND_T)
def test_logits_and_carries_equal_nnx_rnn(num_layers, T):
  graphdef, params, reference = module_and_reference(num_layers)
  tokens_BxT, lengths_B = tokens(T=T), jnp.minimum(jnp.array([7, 3, 5]), T)
  mask_BxT = jnp.arange(T)[None] < lengths_B[:, None]
  logits_BxTxV, carries = nnx.merge(graphdef, params)(tokens_BxT, mask_BxT, return_carries=True)
  want_BxTxV, want_carries = reference(params, tokens_BxT, lengths_B)
  # The same float32 operations per entry (the input projection is one matmul over all T x B rows instead of T of
  # B rows; each entry is the same length-D dot product): equal up to a few ulps of O(1) values, seen bit for bit.
  np.testing.assert_allclose(logits_BxTxV, want_BxTxV, rtol=1e-6, atol=1e-6)
  assert len(carries) == len(want_carries) == num_layers
  for (c, h), (want_c, want_h) in zip(carries, want_carries):
    np.testing.assert_allclose(c, want_c, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h, want_h, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("num_layers, T", LAYERS_AND_T)
def test_custom_vjp_gradients_equal_autodiff_of_nnx_rnn(num_layers, T):
  graphdef, params, reference = module_and_reference(num_layers)
  tokens_BxT = tokens(T=T)
  weights_BxTxV = jnp.asarray(np.random.default_rng(1).normal(size=(3, T, V)), jnp.float32)
  ours = jax.grad(lambda p: jnp.sum(jnp.sin(nnx.merge(graphdef, p)(tokens_BxT)) * weights_BxTxV))(params)
  want = jax.grad(lambda p: jnp.sum(jnp.sin(reference(p, tokens_BxT)[0]) * weights_BxTxV))(params)
  for (path, a), b in zip(jax.tree.leaves_with_path(ours), jax.tree.leaves(want)):
    # Weight gradients are sums over the B x T <= 21 positions, here one matmul, there accumulated step by step, and
    # each gate gradient a product of the same factors grouped differently (a few ulps): a reordered float32 sum of
    # n terms moves by <= n * 2^-24 of the terms' magnitude (~1.3e-6 here; measured 2.3e-7 of the leaf's largest
    # entry at 2 layers). A wrong gate derivative or a dropped term moves them by O(10%).
    np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 * float(np.abs(b).max()))
    # At T = 1 the recurrent kernel only ever multiplies the zero initial h, so its gradient is exactly 0 in both.
    assert float(np.abs(b).max()) > 0 or (T == 1 and "dense_h" in jax.tree_util.keystr(path) and "kernel" in
                                          jax.tree_util.keystr(path))


def test_token_loss_gradient_is_softmax_minus_one_hot_to_float32_rounding():
  rng = np.random.default_rng(2)
  logits_NxV = rng.normal(size=(1, 9, 50)) * 6
  targets_N = rng.integers(0, 50, (1, 9))
  grad = jax.grad(lambda z: token_loss.token_loss(z, jnp.asarray(targets_N)).sum())(
      jnp.asarray(logits_NxV, jnp.float32))
  p = np.exp(logits_NxV - logits_NxV.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  want = p - (np.arange(50) == targets_N[..., None])
  # Entries in [-1, 1], from float32 exp and one division each: a few ulps of 1 (2^-24 ~ 6e-8 each); a wrong term
  # (a missing - 1 at the target, an unnormalised p) is off by O(0.1).
  np.testing.assert_allclose(np.asarray(grad, np.float64), want, rtol=0, atol=5e-7)


def test_linear_token_loss_equals_token_loss_of_whole_logits_with_padded_chunks():
  rng = np.random.default_rng(3)
  x_NxH = jnp.asarray(rng.normal(size=(7, H)), jnp.float32)
  kernel_HxV = jnp.asarray(rng.normal(size=(H, V)), jnp.float32)
  bias_V = jnp.asarray(rng.normal(size=V), jnp.float32)
  targets_N = jnp.asarray(rng.integers(0, V, 7), jnp.int32)
  g_N = jnp.asarray(rng.normal(size=7), jnp.float32)

  def whole(x, k, b):
    return token_loss.token_loss((x @ k + b)[None], targets_N[None])[0]

  for rows in (3, 7):  # 3: chunks 3 + 3 + 1 real rows, the last padded with two rows that must not count
    chunked = lambda x, k, b: token_loss.linear_token_loss(x, k, b, targets_N, rows)  # noqa: E731
    # Each row's logits are the same length-H dot products and its loss the same operations: a few ulps at most.
    np.testing.assert_allclose(chunked(x_NxH, kernel_HxV, bias_V), whole(x_NxH, kernel_HxV, bias_V), rtol=1e-6)
    ours = jax.grad(lambda *a: jnp.sum(chunked(*a) * g_N), argnums=(0, 1, 2))(x_NxH, kernel_HxV, bias_V)
    want = jax.grad(lambda *a: jnp.sum(whole(*a) * g_N), argnums=(0, 1, 2))(x_NxH, kernel_HxV, bias_V)
    for a, b in zip(ours, want):
      # d W and d b are sums over N = 7 rows, accumulated chunk by chunk here: a reordered float32 sum, <= 7 * 2^-24
      # of the terms' magnitude; a padding row counted or a chunk dropped changes them by O(10%).
      np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * float(np.abs(b).max()))


def test_chunk_rows_keep_a_cpus_cache_sized_chunks_and_give_an_accelerator_whole_steps():
  assert token_loss.chunk_rows(512, "cpu") == 256 and token_loss.chunk_rows(50_304, "cpu") == 1024
  # The paper's step (batch 64, T = 128: 8,192 positions) is one chunk on a GPU or TPU, whose float32 logits stay
  # within ACCELERATOR_CHUNK_BYTES; a vocabulary too large for 1,024 rows in the budget still gets 1,024.
  for backend in ("gpu", "tpu"):
    rows = token_loss.chunk_rows(50_304, backend)
    assert 8192 <= rows and rows * 50_304 * 4 <= token_loss.ACCELERATOR_CHUNK_BYTES
    assert token_loss.chunk_rows(2**22, backend) == 1024
  assert token_loss.chunk_rows(50_304) == token_loss.chunk_rows(50_304, jax.default_backend())


def test_the_lstm_family_loss_is_the_token_loss_of_its_logits_in_a_jitted_step():
  model = get_model("lstm", vocab_size=V, embed_dim=D, hidden_dim=H)
  params = model.init(jax.random.PRNGKey(4))
  tokens_BxT = tokens(B=4, T=5, seed=5)
  loss_BxT = jax.jit(lambda p: model.loss(p, tokens_BxT, 0))(params)
  want_BxT = token_loss.token_loss(model.apply(params, token_loss.with_bos(tokens_BxT, 0)), tokens_BxT)
  np.testing.assert_allclose(loss_BxT, want_BxT, rtol=1e-6)  # same operations per row; jit may fuse differently
