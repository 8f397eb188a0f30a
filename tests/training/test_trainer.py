"""Tests for training.trainer and models.lstm: grouping invariance, memorization, sharding checks, divergence (the
sharded runs over simulated devices: tests/e2e/test_sharded_training.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import get_model
from training import canaries as canaries_lib
from training import trainer


def tiny_model(vocab=24):
  return get_model("lstm", vocab_size=vocab, embed_dim=8, hidden_dim=8, num_layers=2)


def tiny_task(num_models=4, num_train=12, num_canaries=8, seq_len=6, vocab=24, seed=0):
  # A stream apart from the canaries' (same seed would make the first canaries copies of the training rows).
  train_SxT = np.random.default_rng(seed + 1000).integers(1, vocab, size=(num_train, seq_len))
  canaries_NxT = canaries_lib.worst_case_canaries(num_canaries, seq_len, vocab, seed)
  keep_MxN = canaries_lib.keep_matrix(num_models, num_canaries, seed)
  examples_ExT = np.concatenate([train_SxT, canaries_NxT]).astype(np.int32)
  ids = [canaries_lib.training_indices(num_train, keep_MxN, m) for m in range(num_models)]
  return examples_ExT, canaries_NxT, keep_MxN, ids


# Per-token losses (and mu, sigma) of models trained alike (assert_trained_alike): the forward pass itself rounds
# them by ~1e-7 relative; the entries AdamW flipped have ~0 gradient, so they move the losses at second order only.
# Measured: <= 3e-7 relative for a group against a model alone, up to 7e-6 absolute and 6e-6 relative under FSDP
# (0.4% of a tiny GPT-NeoX's entries flipped). 1e-4 relative + 1e-5 absolute leaves >10x for other CPUs, while a
# wrong model, data order or update moves O(1) losses by ~1e-2.
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)


def assert_trained_alike(a_tree, b_tree, *, learning_rate, steps):
  """Parameters from the same training computed in another float32 reduction order (a vmapped group, a model
  alone, a sharded mesh) agree as far as AdamW lets them.

  Reordering a gradient's sums changes it by ~1e-7 relative (float32's unit roundoff times a few). AdamW divides
  by sqrt(v): where an entry's gradient is large against that noise, its update changes by about as little, so
  the entry stays within rtol 1e-4 + atol 1e-6. Where a gradient is itself near rounding level (a sum that
  cancels, e.g. a bias whose terms balance), the noise is amplified up to deciding its sign, and AdamW turns that
  into a step of up to ~lr either way; which entries, differs between CPUs (SIMD widths change the sums' order),
  so no per-entry tolerance below a step size holds on every machine. Such entries are few (seen: 0.2% of a tiny
  GPT-NeoX's in a group against alone, 0.4% under FSDP, 1 in 1,536 of an LSTM's) and, with ~0 gradient, barely
  move the loss (callers compare losses too, LOSS_TOL). A wrong data order, IN set, model index, or a missing or mis-sharded update moves most entries by a good
  part of lr * steps instead. So: >= 90% of entries within rounding, <= 1% off by more than 1% of lr * steps,
  and none beyond AdamW's bound on a step, lr (1 - beta1) / sqrt(1 - beta2) (Kingma & Ba 2015, Sec. 2.1), for
  each of the two runs (weight decay adds lr * wd * |param| per step, < 1e-4 of that here).

  Checked on other SIMD widths (XLA_FLAGS=--xla_cpu_max_isa=SSE4_2, AVX2; AVX-512 by default): at most 0.5% of
  entries outside rounding, none off by 1% of lr * steps, and losses within 6% of LOSS_TOL, in all three uses.
  """
  a = np.concatenate([np.ravel(x) for x in jax.tree.leaves(a_tree)])
  b = np.concatenate([np.ravel(x) for x in jax.tree.leaves(b_tree)])
  assert a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all()
  diff = np.abs(a - b)
  assert np.mean(diff > 1e-6 + 1e-4 * np.abs(b)) <= 0.1, f"{np.sum(diff > 1e-6 + 1e-4 * np.abs(b))} of {a.size}"
  assert np.mean(diff > 0.01 * learning_rate * steps) <= 0.01, f"{np.sum(diff > 0.01 * learning_rate * steps)}"
  assert diff.max() <= 2 * steps * learning_rate * 0.1 / np.sqrt(1 - 0.999), diff.max()


def test_lstm_is_causal_and_shapes():
  model = tiny_model()
  params = model.init(jax.random.PRNGKey(0))
  tokens_BxT = jnp.array([[1, 2, 3, 4, 5], [1, 2, 3, 9, 9]], jnp.int32)
  logits_BxTxV = model.apply(params, tokens_BxT)
  assert logits_BxTxV.shape == (2, 5, 24) and logits_BxTxV.dtype == jnp.float32
  # Same prefix in another batch row: the same per-row arithmetic (an LSTM sums nothing across rows), so equal up
  # to a few ulps of O(1) logits; reading a later token would change them by O(0.1).
  np.testing.assert_allclose(logits_BxTxV[0, :3], logits_BxTxV[1, :3], rtol=1e-6, atol=1e-6)
  assert not np.allclose(logits_BxTxV[0, 3:], logits_BxTxV[1, 3:])


def test_token_losses_equal_a_numpy_cross_entropy_with_bos_prefix():
  model = tiny_model()
  params = model.init(jax.random.PRNGKey(1))
  tokens_BxT = jnp.array([[3, 7, 1, 20], [5, 5, 2, 0]], jnp.int32)
  loss_BxT = np.asarray(trainer.token_losses(model, params, tokens_BxT, bos_id=0), np.float64)
  inputs_BxT = np.concatenate([np.zeros((2, 1), np.int32), np.asarray(tokens_BxT)[:, :-1]], axis=1)
  logits = np.asarray(model.apply(params, jnp.asarray(inputs_BxT)), np.float64)
  for b in range(2):
    for t in range(4):
      z = logits[b, t]
      expected = np.log(np.exp(z - z.max()).sum()) + z.max() - z[int(tokens_BxT[b, t])]
      # float32 against float64 from the same logits (|z| < 5, V = 24): rounding of the logit differences and
      # of the 24-term sum is a few ulps of an O(3) loss (~1e-6); 1e-5 is 10x that.
      assert loss_BxT[b, t] == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_epoch_slots_cover_each_example_once_and_pad_with_minus_one():
  ids = np.arange(10, 17)
  slots_SxB = trainer.epoch_slots(ids, length=9, batch_size=4, seed=0, model_id=3, epoch=1)
  assert slots_SxB.shape == (3, 4)
  flat = slots_SxB.ravel()
  np.testing.assert_array_equal(np.sort(flat[flat >= 0]), ids)
  assert (flat == -1).sum() == 12 - 7
  np.testing.assert_array_equal(flat[9:], -1)  # the tail beyond `length` is padding
  np.testing.assert_array_equal(slots_SxB, trainer.epoch_slots(ids, 9, 4, 0, 3, 1))
  assert not np.array_equal(slots_SxB, trainer.epoch_slots(ids, 9, 4, 0, 3, 2))  # reshuffled every epoch
  assert not np.array_equal(slots_SxB, trainer.epoch_slots(ids, 9, 4, 0, 4, 1))  # and per model


def test_init_stack_equals_each_model_initialised_alone():
  model = tiny_model()
  keys = jnp.stack([trainer.model_key(0, m) for m in range(3)])
  stacked = trainer.init_stack(model, keys)
  for m in range(3):
    alone = model.init(trainer.model_key(0, m))
    # lax.map runs each key's initialiser as the model alone does; a batched and a single QR (orthogonal init)
    # may round differently by an ulp or two of O(1) entries: 1e-6 relative (8 ulps), 1e-7 for entries near 0.
    jax.tree.map(lambda s, a: np.testing.assert_allclose(s[m], a, rtol=1e-6, atol=1e-7), stacked, alone)
  assert not np.allclose(jax.tree.leaves(stacked)[0][0], jax.tree.leaves(stacked)[0][1])


@pytest.mark.slow
def test_models_trained_together_equal_models_trained_one_by_one():
  model = tiny_model()
  examples_ExT, _, keep_MxN, ids = tiny_task()
  cfg = trainer.TrainConfig(epochs=3, batch_size=4, learning_rate=1e-2, weight_decay=1e-3, seed=7)
  length = 12 + int(keep_MxN.sum(1).max())
  together, loss_G = trainer.train_group(model, examples_ExT, ids, [0, 1, 2, 3], cfg, bos_id=0, length=length,
                                         progress=False)
  steps = cfg.epochs * -(-length // cfg.batch_size)
  for m in range(4):
    alone, loss_1 = trainer.train_group(model, examples_ExT, ids[m:m + 1], [m], cfg, bos_id=0, length=length,
                                        progress=False)
    assert_trained_alike(jax.tree.map(lambda x: x[m], together), jax.tree.map(lambda x: x[0], alone),
                         learning_rate=cfg.learning_rate, steps=steps)
    assert loss_G[m] == pytest.approx(loss_1[0], rel=LOSS_TOL["rtol"])  # last epoch's mean loss, O(1)
  leaves = jax.tree.leaves(together)
  assert not np.allclose(leaves[0][0], leaves[0][1])  # different models really are different


@pytest.mark.slow
def test_models_memorize_their_in_canaries():
  vocab = 24
  model = tiny_model(vocab)
  examples_ExT, canaries_NxT, keep_MxN, ids = tiny_task(num_models=4, num_train=8, num_canaries=16, seq_len=8,
                                                        vocab=vocab, seed=3)
  cfg = trainer.TrainConfig(epochs=40, batch_size=8, learning_rate=3e-2, seed=0)
  params, _ = trainer.train_group(model, examples_ExT, ids, [0, 1, 2, 3], cfg, bos_id=0, progress=False)
  loss_MxNxT = trainer.canary_statistics(model, params, canaries_NxT, bos_id=0, batch_size=5)[0]
  assert loss_MxNxT.shape == (4, 16, 8) and loss_MxNxT.dtype == np.float32
  mean_MxN = loss_MxNxT.mean(axis=2)
  in_mean, out_mean = mean_MxN[keep_MxN].mean(), mean_MxN[~keep_MxN].mean()
  assert in_mean < 0.7 * out_mean, (in_mean, out_mean)  # not rounding: models that ignored their IN set give ~1
  # and model by model: each one finds its own members easier than the canaries it never saw
  for m in range(4):
    assert mean_MxN[m, keep_MxN[m]].mean() < mean_MxN[m, ~keep_MxN[m]].mean()


def test_canary_statistics_losses_equal_per_model_token_losses():
  model = tiny_model()
  keys = jnp.stack([trainer.model_key(1, m) for m in range(2)])
  params = trainer.init_stack(model, keys)
  _, canaries_NxT, _, _ = tiny_task()
  loss_MxNxT = trainer.canary_statistics(model, params, canaries_NxT, bos_id=0, batch_size=3)[0]
  for m in range(2):
    one = jax.tree.map(lambda x: x[m], params)
    # Same params and the same loss function, vmapped over models and cut into batches of 3 instead of one call:
    # only the forward pass's rounding order differs, ~1e-7 relative on O(3) losses; no training in between.
    np.testing.assert_allclose(loss_MxNxT[m], trainer.token_losses(model, one, jnp.asarray(canaries_NxT), 0),
                               rtol=1e-5, atol=1e-6)


def test_a_diverging_model_is_named():
  model = tiny_model()
  examples_ExT, _, _, ids = tiny_task()
  cfg = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=float("inf"), seed=0)
  with pytest.raises(trainer.TrainingDiverged, match=r"model 5 has a non-finite training loss in epoch 1"):
    trainer.train_group(model, examples_ExT, ids[:2], [5, 6], cfg, bos_id=0, progress=False)


def test_group_size_must_divide_over_the_mesh():
  model = tiny_model()
  examples_ExT, _, _, ids = tiny_task()

  class TwoDeviceMesh:
    size = 2
    axis_names = ("models",)

  with pytest.raises(ValueError, match="group size 3 must be a multiple of the 2 devices"):
    trainer.train_group(model, examples_ExT, ids[:3], [0, 1, 2], trainer.TrainConfig(), bos_id=0,
                        mesh=TwoDeviceMesh(), progress=False)
