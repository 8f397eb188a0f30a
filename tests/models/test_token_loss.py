"""models.token_loss: per-token loss, mu and sigma against a float64 numpy computation from the full softmax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import token_loss


def numpy_stats(logits_TxV, targets_T):
  """Direct float64 reference: p = softmax(z); mu = sum p ln p; sigma^2 = sum p (ln p - mu)^2."""
  z = np.asarray(logits_TxV, np.float64)
  logp = z - z.max(-1, keepdims=True)
  logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
  p = np.exp(logp)
  mu = (p * logp).sum(-1)
  sigma = np.sqrt((p * (logp - mu[:, None]) ** 2).sum(-1))
  return -logp[np.arange(len(targets_T)), targets_T], mu, sigma


def test_token_statistics_equal_the_full_softmax_computation():
  rng = np.random.default_rng(0)
  logits_BxTxV = rng.normal(scale=3.0, size=(2, 5, 37)).astype(np.float32)
  logits_BxTxV[1, 2] = 0.0  # uniform: mu = -ln V, sigma = 0
  logits_BxTxV[1, 3, 4] = 60.0  # nearly one-hot: mu ~ 0, sigma ~ 0, finite
  targets_BxT = rng.integers(0, 37, (2, 5))
  targets_BxT[0, 0] = int(np.argmax(logits_BxTxV[0, 0]))  # one position the model gets right
  targets_BxT[1, 3] = 4
  logits_BxTxV[0, 1, :2] = logits_BxTxV[0, 1].max() + 1.0  # a tie for the top: argmax takes the first index
  targets_BxT[0, 1] = 1
  loss, mu, sigma, top1 = (np.asarray(a) for a in token_loss.token_statistics(jnp.asarray(logits_BxTxV),
                                                                           jnp.asarray(targets_BxT)))
  # top-1 correctness from its definition: numpy's argmax (first index on ties) of the same logits
  np.testing.assert_array_equal(top1, np.argmax(logits_BxTxV, axis=-1) == targets_BxT)
  assert top1.dtype == bool and top1[0, 0] and top1[1, 3] and not top1[0, 1]
  for b in range(2):
    ref = numpy_stats(logits_BxTxV[b], targets_BxT[b])
    for ours, theirs in zip((loss[b], mu[b], sigma[b]), ref):
      # float32 from the same logits: the shifted logits z - max (|.| < 75 here, with the 60) are rounded to
      # ~75 * 2^-24 = 4.5e-6 absolute, and mu, sigma and the loss inherit about that; 2e-5 is 4x it.
      np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)
  # Uniform logits: z - max is exactly 0, so mu = -ln 37 to one rounding of a log (1e-5 > 3 ulps of 3.6) and the
  # variance exactly 0.
  assert mu[1, 2] == pytest.approx(-np.log(37), abs=1e-5) and sigma[1, 2] == 0.0
  assert np.isfinite(sigma).all() and (sigma >= 0).all()


def fake_apply(inputs_BxT, mask_BxT):
  """A 'model' whose logits at t depend on tokens <= t only (a causal cumulative sum)."""
  V = 11
  onehot_BxTxV = jnp.eye(V)[inputs_BxT]
  return jnp.cumsum(onehot_BxTxV * jnp.arange(1, V + 1), axis=1) * 0.3


def test_sequence_statistics_with_bos_score_every_position():
  tokens_BxT = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
  loss, mu, sigma, top1 = (np.asarray(a)
                           for a in token_loss.sequence_statistics(fake_apply, tokens_BxT, bos_id=0))
  inputs_BxT = np.concatenate([np.zeros((2, 1), int), tokens_BxT[:, :-1]], axis=1)
  logits_BxTxV = np.asarray(fake_apply(jnp.asarray(inputs_BxT), None))
  np.testing.assert_array_equal(top1, np.argmax(logits_BxTxV, axis=-1) == tokens_BxT)
  for b in range(2):
    for ours, theirs in zip((loss[b], mu[b], sigma[b]), numpy_stats(logits_BxTxV[b], tokens_BxT[b])):
      np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)  # logits < 17: 1e-6 rounding, as above


def test_sequence_statistics_without_bos_leave_the_first_token_and_padding_unscored():
  tokens_BxT = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 0, 0]])
  mask_BxT = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
  loss, mu, sigma, top1 = (np.asarray(a)
                           for a in token_loss.sequence_statistics(fake_apply, tokens_BxT, jnp.asarray(mask_BxT)))
  logits_BxTxV = np.asarray(fake_apply(jnp.asarray(tokens_BxT), None))
  for s in (loss, mu, sigma):
    assert np.isnan(s[:, 0]).all() and np.isnan(s[1, 3:]).all()
    assert np.isfinite(s[0, 1:]).all() and np.isfinite(s[1, 1:3]).all()
  scored_BxT = np.isfinite(loss)
  want_BxT = np.zeros_like(scored_BxT)  # position t >= 1 predicted from the logits at t - 1; False where unscored
  want_BxT[:, 1:] = np.argmax(logits_BxTxV[:, :-1], axis=-1) == tokens_BxT[:, 1:]
  np.testing.assert_array_equal(top1, want_BxT & scored_BxT)
  ref = numpy_stats(logits_BxTxV[0, :-1], tokens_BxT[0, 1:])
  for ours, theirs in zip((loss[0, 1:], mu[0, 1:], sigma[0, 1:]), ref):
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)  # as above


F32_EPS = float(np.finfo(np.float32).eps)  # 2^-23, one ulp at 1


@pytest.mark.parametrize("margin", [0, 5, 10, 14, 20, 30, 40, -10, -40])
def test_loss_keeps_float32_relative_precision_for_memorised_tokens(margin):
  """V = 512, other logits 0, target logit `margin`: -ln p = log1p((V - 1) exp(-margin)) exactly.

  The textbook logsumexp(z) - z_t rounds 1 + r to 1 here: relative error 3e-5 at margin 10, 70% at 20, and a loss
  of 0 from 30 on. Ours: exp and log1p are within 1 ulp each (measured <= 0.3), and the float32 sum of the 511
  equal terms adds rounding errors that grow like u * sqrt(511) ~ 11 ulps (measured <= 4.1 ulps at margin 14), so
  the bound is 16 ulps (2e-6) at every margin; for negative margins the loss is large and nothing is small.
  """
  V, target = 512, 7
  logits_1x1xV = np.zeros((1, 1, V), np.float32)
  logits_1x1xV[0, 0, target] = margin
  targets_1x1 = jnp.full((1, 1), target)
  expected = np.log1p((V - 1) * np.exp(-np.float64(margin)))
  loss = float(token_loss.token_loss(jnp.asarray(logits_1x1xV), targets_1x1)[0, 0])
  stat_loss = float(token_loss.token_statistics(jnp.asarray(logits_1x1xV), targets_1x1)[0][0, 0])
  assert loss == stat_loss  # one formula for the trainer and the extractor
  assert loss > 0 and abs(loss - expected) <= 16 * F32_EPS * expected, (loss, expected)


def test_loss_gradient_is_the_cross_entropy_gradient_and_finite_at_any_margin():
  """d loss / dz = softmax(z) - onehot(target): the trainer differentiates this loss."""
  rng = np.random.default_rng(0)
  logits_BxTxV = rng.normal(scale=3.0, size=(2, 5, 37)).astype(np.float32)
  logits_BxTxV[1, 3, 4] = 60.0  # a memorised token
  targets_BxT = rng.integers(0, 37, (2, 5))
  targets_BxT[1, 3] = 4
  grad_BxTxV = np.asarray(jax.grad(lambda z: token_loss.token_loss(z, jnp.asarray(targets_BxT)).sum())(
      jnp.asarray(logits_BxTxV)))
  z = logits_BxTxV.astype(np.float64)
  p = np.exp(z - z.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  expected_BxTxV = p - np.eye(37)[targets_BxT]
  # p_v = exp(z_v - max) / S in float32: the rounded logit difference (|z_v - max| < 25) costs 25 * 2^-24 = 1.5e-6
  # relative, the 37-term sum a few ulps more, so rtol 1e-5; p_t - 1 cancels when p_t ~ 1, so add 2e-6 absolute
  # (16 ulps at 1). A missing or doubled term would be off by p_v itself.
  np.testing.assert_allclose(grad_BxTxV, expected_BxTxV, rtol=1e-5, atol=2e-6)
  # Beyond float32's range of exp (margin 1000, the rest underflows to 0): loss 0, gradient 0 and finite.
  huge_1x1xV = jnp.zeros((1, 1, 8)).at[0, 0, 3].set(1000.0)
  loss, grad = jax.value_and_grad(lambda z: token_loss.token_loss(z, jnp.full((1, 1), 3)).sum())(huge_1x1xV)
  assert float(loss) == 0.0 and np.isfinite(np.asarray(grad)).all()
  grad_wrong = jax.grad(lambda z: token_loss.token_loss(z, jnp.full((1, 1), 5)).sum())(huge_1x1xV)
  np.testing.assert_array_equal(np.asarray(grad_wrong)[0, 0], np.eye(8)[3] - np.eye(8)[5])
