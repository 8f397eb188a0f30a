"""LoRA shadow copies in the trainer: adapters alone stacked and stepped (AdamW over them only), the base shared and
left untouched, a copy trained in a group equal to it trained alone, DP-SGD clipping the adapters' per-example
gradients (against a loop), the extraction equal to each copy's own losses, and the group's memory per added copy
(the compiled step's) far below a copy of the base's AdamW state."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from models import get_model
from models import lora
from training import dp as dp_lib
from training import group_plan
from training import trainer
from tests.training.test_trainer import LOSS_TOL, assert_trained_alike, tiny_task

VOCAB, T = 24, 6
SETTINGS = lora.LoRASettings(rank=2, alpha=4.0, targets=("attention",))


def lora_model(settings=SETTINGS, vocab=VOCAB, **arch):
  """LoRA copies of a random tiny GPT-2 (its weights stand for a pretrained base)."""
  fm = get_model("gpt2", vocab_size=vocab, n_embd=16, n_layer=2, n_head=2, n_positions=16, **arch)
  base = nnx.merge(fm.graphdef, fm.init(jax.random.PRNGKey(11)))
  return lora.functional("gpt2", base.config, base, settings), base


def flat(tree):
  return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])


def test_the_stack_and_the_optimiser_hold_the_adapters_alone_and_the_base_stays_as_it_was():
  model, base = lora_model()
  examples_ExT, _, keep_MxN, ids = tiny_task(vocab=VOCAB, seq_len=T)
  frozen_before = jax.tree.map(np.array, model.frozen)
  cfg = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=1e-2, seed=3)
  params, _ = trainer.train_group(model, examples_ExT, ids[:2], [0, 1], cfg, bos_id=0, progress=False)
  paths = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(params)]
  assert paths and all(p.endswith((".lora_a", ".lora_b")) for p in paths)
  assert len(paths) == 2 * 2 * 2  # two layers, c_attn and c_proj, A and B
  opt = trainer.opt_init(jax.tree.map(jnp.asarray, params), 1e-2, 0.0)
  assert sum(x.size for x in jax.tree.leaves(opt)) <= 2 * flat(params).size + 8  # moments of the adapters + counts
  jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, model.frozen), frozen_before)
  assert np.abs(np.asarray(params["h"][0]["attn"]["c_attn"]["lora_b"])).max() > 0  # B moved off zero


def test_copies_trained_together_equal_copies_trained_alone_and_their_losses_are_extracted():
  model, _ = lora_model()
  examples_ExT, canaries_NxT, keep_MxN, ids = tiny_task(vocab=VOCAB, seq_len=T)
  cfg = trainer.TrainConfig(epochs=3, batch_size=4, learning_rate=1e-2, weight_decay=1e-3, seed=7)
  length = 12 + int(keep_MxN.sum(1).max())
  together, loss_G = trainer.train_group(model, examples_ExT, ids, [0, 1, 2, 3], cfg, bos_id=0, length=length,
                                         progress=False)
  steps = cfg.epochs * -(-length // cfg.batch_size)
  for m in (0, 3):
    alone, loss_1 = trainer.train_group(model, examples_ExT, ids[m:m + 1], [m], cfg, bos_id=0, length=length,
                                        progress=False)
    assert_trained_alike(jax.tree.map(lambda x: x[m], together), jax.tree.map(lambda x: x[0], alone),
                         learning_rate=cfg.learning_rate, steps=steps)
    assert loss_G[m] == pytest.approx(loss_1[0], rel=LOSS_TOL["rtol"])
  loss_GxNxT, *_ = trainer.canary_statistics(model, together, canaries_NxT, bos_id=0, batch_size=3)
  for m in range(4):
    one = jax.tree.map(lambda x: x[m], together)
    own = model.module(one)  # the base's weights with model m's adapters, merged outside any jit
    ref = trainer.token_losses(model.with_compute_dtype("float32"), one, jnp.asarray(canaries_NxT), 0)
    np.testing.assert_allclose(loss_GxNxT[m], ref, rtol=1e-5, atol=1e-6)
    merged = lora.merged(own)  # W + scale A B: the same function up to float32 rounding
    logits = merged(jnp.concatenate([jnp.zeros((len(canaries_NxT), 1), jnp.int32), canaries_NxT[:, :-1]], 1))
    np.testing.assert_allclose(-jax.nn.log_softmax(logits)[np.arange(8)[:, None], np.arange(T), canaries_NxT],
                               loss_GxNxT[m], rtol=1e-4, atol=1e-5)


def test_dp_clips_the_adapters_per_example_gradients_as_a_loop_does():
  model, _ = lora_model()
  examples, _, _, _ = tiny_task(vocab=VOCAB, seq_len=T)
  params = jax.tree.map(lambda x: x + 0.1, model.init(jax.random.PRNGKey(3)))  # B off zero: A gets gradients too
  batch = jnp.asarray(examples[:6])
  weight = jnp.asarray([1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
  clip = 0.05
  dp = dp_lib.DPConfig(noise_multiplier=0.0, clip_norm=clip, batch_size=4)
  frozen = jax.device_put(model.frozen)
  _, got = trainer._dp_gradient(model, 0, dp, params, batch, weight, None, jax.random.key(0), frozen)
  grad = jax.jit(jax.grad(lambda p, x_1xT: model.loss(p, x_1xT, 0, None, frozen).mean()))
  total, norms = 0.0, []
  for i in range(6):
    g = flat(grad(params, batch[i:i + 1])) * float(weight[i])
    norms.append(np.linalg.norm(g))
    total = total + g * min(1.0, clip / max(norms[-1], 1e-30))
  assert sum(n > clip for n in norms) >= 3  # clipping is active
  assert flat(got).size == flat(params).size  # the adapters' gradient, nothing of the base
  np.testing.assert_allclose(flat(got), total / 4, rtol=1e-4, atol=1e-7)  # float32 sums in another order


def test_a_dp_step_trains_lora_copies_in_a_group():
  model, _ = lora_model()
  examples_ExT, _, keep_MxN, ids = tiny_task(vocab=VOCAB, seq_len=T)
  dp = dp_lib.DPConfig(noise_multiplier=0.5, clip_norm=1.0, batch_size=4, sampling="shuffle")
  cfg = trainer.TrainConfig(epochs=1, batch_size=4, learning_rate=1e-2, seed=1, dp=dp)
  params, loss_G = trainer.train_group(model, examples_ExT, ids[:2], [0, 1], cfg, bos_id=0, progress=False)
  assert np.isfinite(loss_G).all()
  b = np.asarray(params["h"][1]["attn"]["c_proj"]["lora_b"])
  assert np.abs(b).max() > 0 and not np.allclose(b[0], b[1])  # noisy, independent copies


def _step_bytes(model, G, batch=2):
  shapes = group_plan.Shapes(example_shape=(T,), example_dtype="int32", batch_size=batch, eval_batch_size=batch,
                             learning_rate=1e-3, weight_decay=0.0, bos_id=0)
  return group_plan.program_bytes(group_plan.compile_step(model, G, shapes))


def test_the_memory_of_an_added_copy_is_its_adapters_state_and_activations_not_a_base():
  """XLA's memory estimate of the compiled step (what --plan and group_size=auto read), G = 2 -> 4. A whole copy
  adds its parameters and two AdamW moments (3 x the base's bytes) on top of what a LoRA copy adds; a LoRA copy adds
  its adapters' state and its activations: at batch 2 x 6 positions, D = 64, V = 300, about 12 x (V + ~20 L D)
  float32 = ~140 KB, against the base's 481 KB."""
  settings = lora.LoRASettings(rank=2, alpha=4.0, targets=("attention",))
  arch = dict(vocab_size=300, n_embd=64, n_layer=2, n_head=2, n_positions=16)
  fm = get_model("gpt2", **arch)
  base = nnx.merge(fm.graphdef, fm.init(jax.random.PRNGKey(11)))
  lora_copies = lora.functional("gpt2", base.config, base, settings)
  whole = dataclasses.replace(fm, init=lambda key: nnx.split(base)[1])
  base_bytes = sum(x.nbytes for x in jax.tree.leaves(nnx.split(base)[1]))
  adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(lora_copies.init(jax.random.PRNGKey(0))))
  per_lora = (_step_bytes(lora_copies, 4) - _step_bytes(lora_copies, 2)) / 2
  per_whole = (_step_bytes(whole, 4) - _step_bytes(whole, 2)) / 2
  assert per_whole - per_lora >= 3 * (base_bytes - adapter_bytes), (per_whole, per_lora, base_bytes)
  assert 3 * adapter_bytes <= per_lora < base_bytes, (per_lora, base_bytes)


def test_bfloat16_lora_copies_keep_their_adapters_and_compute_close_to_float32():
  model, _ = lora_model()
  params = jax.tree.map(lambda x: x + 0.1, model.init(jax.random.PRNGKey(5)))  # B off zero: the adapters count
  tokens = jnp.asarray(np.random.default_rng(5).integers(0, VOCAB, (3, T)))
  bf16 = model.with_compute_dtype("bfloat16")
  assert isinstance(bf16.module(params).h[0].attn.c_attn, lora.LoRALinear) and bf16.frozen is model.frozen
  ref, low = np.asarray(model.apply(params, tokens)), np.asarray(bf16.apply(params, tokens))
  assert low.dtype == np.float32 and not np.array_equal(low, ref)
  # bfloat16's unit roundoff 2^-9 through two layers of 16-48-term products: ~1e-2 of the largest logit
  assert np.abs(low - ref).max() / np.abs(ref).max() < 0.05
