"""PixelCNN++ layers written for speed, against their direct forms: the sub-pixel transposed convolution against a
loop over taps, concat_elu against jax.nn.elu of the concatenation (values and gradients), and the packed dropout
mask against the bits it is cut from, its keep rate and its independence of vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.pixelcnn_pp import concat_elu, dropout_keep, mask_bits, transposed_conv


def transposed_loop(x_BxHxWxI, w_KhxKwxIxO, s):
  """y[s r + i, s c + j] += x[r, c] @ w[i, j] over every input pixel and tap, float64 (torch's ConvTranspose2d)."""
  B, H, W, _ = x_BxHxWxI.shape
  kh, kw, _, O = w_KhxKwxIxO.shape
  y = np.zeros((B, s * (H - 1) + kh, s * (W - 1) + kw, O))
  for r in range(H):
    for c in range(W):
      for i in range(kh):
        for j in range(kw):
          y[:, s * r + i, s * c + j] += x_BxHxWxI[:, r, c] @ w_KhxKwxIxO[i, j]
  return y


@pytest.mark.parametrize("kh,kw,s", [(2, 3, 2), (2, 2, 2), (1, 3, 2), (3, 3, 2), (2, 3, 3)])
def test_transposed_conv_equals_the_loop_over_taps(kh, kw, s):
  rng = np.random.default_rng(kh * 10 + kw + s)
  x = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
  w = rng.normal(size=(kh, kw, 5, 6)).astype(np.float32)
  ref = transposed_loop(x.astype(np.float64), w.astype(np.float64), s)
  got = np.asarray(transposed_conv(jnp.asarray(x), jnp.asarray(w), s))
  n, m = ref.shape[1:3]
  # Each output sums at most kh kw 5 float32 products of O(1) terms: a few ulps of ~10 in float32 error.
  np.testing.assert_allclose(got[:, :n, :m], ref, rtol=0, atol=1e-5)
  assert not np.any(got[:, n:]) and not np.any(got[:, :, m:])  # rows / columns beyond the full output are zero


def test_concat_elu_equals_elu_of_the_concatenation_in_value_and_gradient():
  x = jnp.asarray([-30.0, -3.0, -1e-8, 0.0, -0.0, 1e-8, 2.0, 30.0], jnp.float32).reshape(1, 2, 1, 4)
  ref = lambda x: jax.nn.elu(jnp.concatenate([x, -x], axis=-1))  # noqa: E731
  np.testing.assert_array_equal(concat_elu(x), ref(x))  # the same float32 operations on every entry
  np.testing.assert_array_equal(jax.jacobian(lambda v: concat_elu(v).sum(0))(x), jax.jacobian(lambda v: ref(v).sum(0))(x))


def test_mask_bits():
  assert [mask_bits(p) for p in (0.5, 0.25, 0.75, 0.125, 1 / 256, 0.3, 0.9)] == [1, 2, 2, 4, 8, 32, 32]


def test_dropout_mask_is_cut_from_the_key_bits():
  """b-bit fields of jax.random.bits, least significant first, entry k from word k // (32 / b), compared with
  keep 2^b: rebuilt here from the same words by integer arithmetic."""
  key = jax.random.key(3)
  shape = (3, 5, 7)  # 105 entries: not a multiple of any word's fields
  n = 105
  for keep, b in ((0.5, 1), (0.75, 2), (0.3, 32)):
    per_word = 32 // b
    words = np.asarray(jax.random.bits(key, (-(-n // per_word),), jnp.uint32)).astype(np.uint64)
    fields = np.array([(int(words[k // per_word]) >> (b * (k % per_word))) & (2 ** b - 1) for k in range(n)])
    expected = fields < round(keep * 2 ** b)
    np.testing.assert_array_equal(np.asarray(dropout_keep(key, keep, shape)).reshape(-1), expected)


@pytest.mark.parametrize("keep", [0.5, 0.75, 0.3])
def test_dropout_keep_rate(keep):
  n = 1 << 18
  kept = int(np.asarray(dropout_keep(jax.random.key(11), keep, (n,))).sum())
  # Binomial(n, keep): 6 standard deviations (a false failure has probability ~2e-9).
  assert abs(kept - n * keep) <= 6 * np.sqrt(n * keep * (1 - keep))


def test_dropout_masks_do_not_depend_on_vmap():
  keys = jax.random.split(jax.random.key(5), 3)
  batched = np.asarray(jax.vmap(lambda k: dropout_keep(k, 0.5, (4, 33)))(keys))
  for g in range(3):
    np.testing.assert_array_equal(batched[g], np.asarray(dropout_keep(keys[g], 0.5, (4, 33))))
