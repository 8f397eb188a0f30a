"""Fine-tuning GPT-NeoX copies from one base checkpoint with the shadow trainer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import models
from models.gpt_neox import GPTNeoXConfig, GPTNeoXForCausalLM
from test_trainer import LOSS_TOL, assert_trained_alike, tiny_task
from training import trainer

VOCAB, T = 40, 8


def base_model(seed=0):
  """A 'pretrained' tiny GPT-NeoX: random weights of a fixed seed, wrapped so every copy starts from them."""
  config = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)
  module = GPTNeoXForCausalLM(config, rngs=nnx.Rngs(params=seed))
  return models.pretrained("gpt_neox", config, module), module


def task(num_models, num_canaries=8, num_train=16, seed=0):
  return tiny_task(num_models, num_train, num_canaries, seq_len=T, vocab=VOCAB, seed=seed)


def test_every_copy_starts_from_the_base_checkpoint():
  model, module = base_model()
  params = trainer.init_stack(model, jnp.stack([trainer.model_key(0, m) for m in range(3)]))
  base = nnx.state(module, nnx.Param)
  for m in range(3):
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[m], params), base)


@pytest.mark.slow
def test_fine_tuning_lowers_the_loss_of_the_in_canaries_only():
  model, module = base_model()
  examples_ExT, canaries_NxT, keep_MxN, ids = task(num_models=2, num_canaries=8, num_train=8)
  cfg = trainer.TrainConfig(epochs=15, batch_size=8, learning_rate=1e-2, weight_decay=1e-4, seed=0)
  params, _ = trainer.train_group(model, examples_ExT, ids, [0, 1], cfg, bos_id=0, progress=False)
  before_NxT = trainer.canary_statistics(model, trainer.init_stack(model, jnp.zeros((1, 2), jnp.uint32)),
                                         canaries_NxT, bos_id=0)[0][0].mean(axis=1)
  after_MxN = trainer.canary_statistics(model, params, canaries_NxT, bos_id=0)[0].mean(axis=2)
  for m in range(2):
    inside, outside = keep_MxN[m], ~keep_MxN[m]
    assert after_MxN[m, inside].mean() < 0.5 * before_NxT[inside].mean(), (after_MxN[m], before_NxT)
    assert after_MxN[m, inside].mean() < 0.5 * after_MxN[m, outside].mean()  # behaviour, not rounding: ~1 if not


@pytest.mark.slow
def test_copies_fine_tuned_together_equal_copies_fine_tuned_one_by_one():
  model, _ = base_model(seed=1)
  examples_ExT, canaries_NxT, _, ids = task(num_models=4)
  cfg = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=3e-3, weight_decay=1e-4, seed=5)
  length = max(len(i) for i in ids)  # the run-wide step count, as the pipeline passes it
  together, loss_G = trainer.train_group(model, examples_ExT, ids[1:4], [1, 2, 3], cfg, bos_id=0, length=length,
                                         progress=False)
  assert np.isfinite(loss_G).all()
  for i, m in enumerate([1, 2, 3]):
    alone, _ = trainer.train_group(model, examples_ExT, [ids[m]], [m], cfg, bos_id=0, length=length,
                                   progress=False)
    # A vmapped and a single matmul round differently; AdamW amplifies that as assert_trained_alike argues.
    assert_trained_alike(jax.tree.map(lambda x: x[i], together), jax.tree.map(lambda x: x[0], alone),
                         learning_rate=cfg.learning_rate, steps=cfg.epochs * -(-length // cfg.batch_size))
    stats_together = trainer.canary_statistics(model, jax.tree.map(lambda x: x[i:i + 1], together), canaries_NxT,
                                               bos_id=0)
    for a, b in zip(stats_together[:3], trainer.canary_statistics(model, alone, canaries_NxT, bos_id=0)[:3]):
      np.testing.assert_allclose(a, b, **LOSS_TOL)  # loss, mu, sigma (top1 is bool)
  # different data orders and IN sets give different models
  assert not np.allclose(together["embed_in"]["embedding"][0], together["embed_in"]["embedding"][1])
