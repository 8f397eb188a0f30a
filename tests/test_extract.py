"""training.extract: per-token loss, mu and sigma against a float64 numpy computation from the full softmax."""

import jax.numpy as jnp
import numpy as np
import pytest

from training import extract


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
  loss, mu, sigma = (np.asarray(a) for a in extract.token_statistics(jnp.asarray(logits_BxTxV),
                                                                     jnp.asarray(targets_BxT)))
  for b in range(2):
    ref = numpy_stats(logits_BxTxV[b], targets_BxT[b])
    for ours, theirs in zip((loss[b], mu[b], sigma[b]), ref):
      np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)
  assert mu[1, 2] == pytest.approx(-np.log(37), abs=1e-5) and sigma[1, 2] == pytest.approx(0.0, abs=1e-3)
  assert np.isfinite(sigma).all() and (sigma >= 0).all()


def fake_apply(inputs_BxT, mask_BxT):
  """A 'model' whose logits at t depend on tokens <= t only (a causal cumulative sum)."""
  V = 11
  onehot_BxTxV = jnp.eye(V)[inputs_BxT]
  return jnp.cumsum(onehot_BxTxV * jnp.arange(1, V + 1), axis=1) * 0.3


def test_sequence_statistics_with_bos_score_every_position():
  tokens_BxT = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])
  loss, mu, sigma = (np.asarray(a) for a in extract.sequence_statistics(fake_apply, tokens_BxT, bos_id=0))
  inputs_BxT = np.concatenate([np.zeros((2, 1), int), tokens_BxT[:, :-1]], axis=1)
  logits_BxTxV = np.asarray(fake_apply(jnp.asarray(inputs_BxT), None))
  for b in range(2):
    for ours, theirs in zip((loss[b], mu[b], sigma[b]), numpy_stats(logits_BxTxV[b], tokens_BxT[b])):
      np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)


def test_sequence_statistics_without_bos_leave_the_first_token_and_padding_unscored():
  tokens_BxT = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 0, 0]])
  mask_BxT = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
  loss, mu, sigma = (np.asarray(a) for a in extract.sequence_statistics(fake_apply, tokens_BxT, jnp.asarray(mask_BxT)))
  logits_BxTxV = np.asarray(fake_apply(jnp.asarray(tokens_BxT), None))
  for s in (loss, mu, sigma):
    assert np.isnan(s[:, 0]).all() and np.isnan(s[1, 3:]).all()
    assert np.isfinite(s[0, 1:]).all() and np.isfinite(s[1, 1:3]).all()
  ref = numpy_stats(logits_BxTxV[0, :-1], tokens_BxT[0, 1:])
  for ours, theirs in zip((loss[0, 1:], mu[0, 1:], sigma[0, 1:]), ref):
    np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=2e-5)
