"""Tests for training.dp and the trainer's DP-SGD step: clipping against a per-example loop, the noise's standard
deviation, the accountant against dp_accounting, Poisson batches, and noise 0 / no clipping equal to the plain
trainer."""

import dataclasses
import math

import dp_accounting
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from lira.errors import InputError
from training import dp as dp_lib
from training import trainer
from tests.training.test_trainer import assert_trained_alike, tiny_model, tiny_task, LOSS_TOL


def flat(tree):
  return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])


def test_clipped_gradient_equals_a_loop_of_per_example_grads_clipped_then_summed():
  model = tiny_model()
  examples, _, _, _ = tiny_task()
  params = model.init(jax.random.PRNGKey(3))
  batch = jnp.asarray(examples[:6])
  weight = jnp.asarray([1.0, 1.0, 1.0, 1.0, 0.0, 1.0])  # one empty slot: it must add nothing
  clip = 0.05  # below most per-example norms here, so clipping is active (checked below)
  dp = dp_lib.DPConfig(noise_multiplier=0.0, clip_norm=clip, batch_size=4)
  _, got = trainer._dp_gradient(model, 0, dp, params, batch, weight, None, jax.random.key(0))
  total, norms = 0.0, []
  grad = jax.jit(jax.grad(lambda p, x_1xT: model.loss(p, x_1xT, 0, None).mean()))
  for i in range(6):
    g = grad(params, batch[i:i + 1])
    g = flat(g) * float(weight[i])
    norms.append(np.linalg.norm(g))
    total = total + g * min(1.0, clip / max(norms[-1], 1e-30))
  assert sum(n > clip for n in norms) >= 3
  # float32 gradients of a few thousand entries summed in another order: ~1e-7 relative each.
  np.testing.assert_allclose(flat(got), total / 4, rtol=1e-4, atol=1e-7)


def test_noise_standard_deviation_is_multiplier_times_clip_norm():
  model = tiny_model()
  examples, _, _, _ = tiny_task()
  params = model.init(jax.random.PRNGKey(0))
  sigma, clip, B = 1.7, 0.3, 8
  dp = dp_lib.DPConfig(noise_multiplier=sigma, clip_norm=clip, batch_size=B)
  weight = jnp.zeros(4)  # nothing sampled: the gradient is the noise alone, divided by the expected batch size
  _, got = trainer._dp_gradient(model, 0, dp, params, jnp.asarray(examples[:4]), weight, None, jax.random.key(1))
  noise = flat(got) * B
  K = noise.size
  # The sample std of K iid normals has relative standard error 1 / sqrt(2 K); 6 of them bound a false alarm.
  assert K > 1000
  assert abs(noise.std() / (sigma * clip) - 1) < 6 / math.sqrt(2 * K)
  assert abs(noise.mean()) < 6 * sigma * clip / math.sqrt(K)


def test_accountant_epsilon_equals_dp_accounting_queried_directly():
  steps, n, B, sigma, delta = 40, 300, 16, 1.1, 1e-5
  for sampling, max_batch_size in (("poisson", 0), ("poisson", 24), ("shuffle", 0)):
    dp = dp_lib.DPConfig(noise_multiplier=sigma, clip_norm=1.0, batch_size=B, sampling=sampling,
                         max_batch_size=max_batch_size, delta=delta)
    truncated = dp_lib.max_batch(dp, B) if sampling == "poisson" else None
    if truncated is None:
      event = dp_accounting.PoissonSampledDpEvent(B / n, dp_accounting.GaussianDpEvent(sigma))
    else:
      event = dp_accounting.TruncatedSubsampledGaussianDpEvent(dataset_size=n, sampling_probability=B / n,
                                                              truncated_batch_size=truncated, noise_multiplier=sigma)
    accountant = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                 value_discretization_interval=dp_lib.PLD_DISCRETIZATION)
    accountant.compose(event, steps)
    assert dp_lib.epsilon(dp, B, steps, n) == pytest.approx(accountant.get_epsilon(delta), rel=1e-9)


def test_the_accountants_grid_moves_epsilon_by_under_a_tenth_of_a_percent_upwards():
  # dp_accounting's finer default grid (1e-4) against the one used, at the CPU default's shape and a small sigma.
  for sigma in (1.0, 0.45):
    fine = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                           value_discretization_interval=1e-4)
    fine.compose(dp_accounting.TruncatedSubsampledGaussianDpEvent(
      dataset_size=1500, sampling_probability=16 / 1500, truncated_batch_size=40, noise_multiplier=sigma), 564)
    eps = dp_lib.epsilon(dp_lib.DPConfig(noise_multiplier=sigma, clip_norm=1.0, batch_size=16), 16, 564, 1500)
    assert fine.get_epsilon(1e-5) <= eps <= 1.001 * fine.get_epsilon(1e-5)


def test_calibrated_noise_multiplier_meets_the_target_and_no_less_would():
  dp = dp_lib.DPConfig(noise_multiplier=0.0, clip_norm=1.0, batch_size=16)
  sigma = dp_lib.calibrate(2.0, dp, 16, 50, 400)
  assert dp_lib.epsilon(dataclasses.replace(dp, noise_multiplier=sigma), 16, 50, 400) <= 2.0
  assert dp_lib.epsilon(dataclasses.replace(dp, noise_multiplier=sigma - 0.01), 16, 50, 400) > 2.0


def test_from_config_calibrates_on_the_model_with_fewest_examples():
  cfg = dp_lib.config_defaults()
  cfg.epsilon = 3.0
  dp, record = dp_lib.from_config(cfg, 16, 30, np.array([200, 180, 200]))
  assert record["epsilon"] <= 3.0 and record["epsilon_per_model"][1] == record["epsilon"]
  assert record["epsilon_per_model"][0] < record["epsilon_per_model"][1]
  assert record["noise_multiplier"] == dp.noise_multiplier and record["sampling_prob"][1] == 16 / 180
  assert dp_lib.from_config(dp_lib.config_defaults(), 16, 30, [200]) == (None, None)


def test_poisson_slots_sample_each_example_with_probability_q_and_truncate():
  ids = np.arange(100, 300)  # n = 200 examples, q = 10 / 200
  steps = 400
  slots = np.concatenate([dp_lib.poisson_slots(ids, 10, 14, steps, 0, 5, e) for e in range(3)])
  assert slots.shape == (3 * steps, 14)
  real = slots[slots >= 0]
  assert set(np.unique(real)) <= set(ids)
  sizes = (slots >= 0).sum(axis=1)
  assert sizes.max() == 14  # Binomial(200, 0.05) exceeds 14 in about 8% of steps: truncated there
  # Untruncated mean 10; truncation removes E[(X - 14)+] ~ 0.13 per step. Standard error of the mean over
  # 1,200 steps ~ 3.1 / sqrt(1200) = 0.09: 5 standard errors.
  assert abs(sizes.mean() - (10 - 0.13)) < 0.45
  for row in slots:  # no example twice in one batch
    r = row[row >= 0]
    assert len(np.unique(r)) == len(r)
  again = dp_lib.poisson_slots(ids, 10, 14, steps, 0, 5, 1)
  np.testing.assert_array_equal(again, slots[steps:2 * steps])  # a function of (seed, model, epoch) only


def test_noise_zero_without_clipping_equals_the_plain_trainer():
  examples, _, keep, ids = tiny_task()
  model = tiny_model()
  config = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=1e-2)
  dp = dp_lib.DPConfig(noise_multiplier=0.0, clip_norm=math.inf, batch_size=4, sampling="shuffle")
  length = max(map(len, ids))
  plain, loss_plain = trainer.train_group(model, examples, ids, [0, 1, 2, 3], config, bos_id=0, length=length,
                                          progress=False)
  private, loss_dp = trainer.train_group(model, examples, ids, [0, 1, 2, 3], dataclasses.replace(config, dp=dp),
                                         bos_id=0, length=length, progress=False)
  steps = 2 * -(-length // 4)
  assert_trained_alike(private, plain, learning_rate=1e-2, steps=steps)
  np.testing.assert_allclose(loss_dp, loss_plain, **LOSS_TOL)


def test_dp_models_trained_together_equal_models_trained_alone():
  examples, _, _, ids = tiny_task()
  model = tiny_model()
  dp = dp_lib.DPConfig(noise_multiplier=0.8, clip_norm=1.0, batch_size=4)
  config = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=1e-2, dp=dp)
  length = max(map(len, ids))
  group, _ = trainer.train_group(model, examples, ids, [0, 1, 2, 3], config, bos_id=0, length=length, progress=False)
  alone, _ = trainer.train_group(model, examples, [ids[2]], [2], config, bos_id=0, length=length, progress=False)
  assert_trained_alike(jax.tree.map(lambda x: x[2:3], group), alone, learning_rate=1e-2, steps=2 * -(-length // 4))
  noiseless, _ = trainer.train_group(model, examples, [ids[2]], [2],
                                     dataclasses.replace(config, dp=dataclasses.replace(dp, noise_multiplier=0.0)),
                                     bos_id=0, length=length, progress=False)
  assert np.abs(flat(noiseless) - flat(alone)).max() > 1e-3  # the noise is there


@pytest.mark.parametrize("field, value, words", [
  ("epsilon", 0.0, "train.dp.epsilon must be > 0"),
  ("epsilon", -1.0, "train.dp.epsilon must be > 0"),
  ("epsilon", float("inf"), "train.dp.epsilon must be a finite number"),
  ("delta", 1.0, "train.dp.delta must be in (0, 1)"),
  ("delta", 0.0, "train.dp.delta must be in (0, 1)"),
  ("clip_norm", 0.0, "train.dp.clip_norm must be > 0"),
  ("clip_norm", -2.0, "train.dp.clip_norm must be > 0"),
  ("noise_multiplier", -0.5, "train.dp.noise_multiplier must be >= 0"),
  ("noise_multiplier", float("nan"), "train.dp.noise_multiplier must be a finite number"),
  ("sampling", "uniform", "train.dp.sampling must be one of poisson, shuffle"),
  ("max_batch_size", 3, "train.dp.max_batch_size must be 0 or >= train.batch_size"),
  # the accountant's cost grows as the noise shrinks: refused before any work, not after minutes of calibration
  ("epsilon", 1e9, "is above the ceiling 100: calibrating the noise to it would take the accountant minutes"),
  ("noise_multiplier", 0.01, "train.dp.noise_multiplier=0.01 is below the floor 0.1"),
])
def test_bad_dp_settings_name_the_field(field, value, words):
  cfg = dp_lib.config_defaults()
  if field != "epsilon":
    cfg.noise_multiplier = 1.0
  cfg[field] = value
  with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
    dp_lib.validate(cfg, 16)


def test_both_epsilon_and_noise_multiplier_are_refused():
  cfg = dp_lib.config_defaults()
  cfg.epsilon, cfg.noise_multiplier = 2.0, 1.0
  with pytest.raises(InputError, match="both set"):
    dp_lib.validate(cfg, 16)
  assert isinstance(cfg, ml_collections.ConfigDict)


def test_default_truncation_costs_almost_no_epsilon():
  # The CPU default's shape: batch 16, 1,500 examples, 6 epochs of 94 steps. Truncating Poisson batches at
  # 16 + 6 * 4 = 40 (six standard deviations) must cost under 0.1% of the untruncated epsilon; at 2 x 16 it costs a
  # third (so the check can fail).
  poisson = dp_lib.DPConfig(noise_multiplier=1.0, clip_norm=1.0, batch_size=16)
  untruncated = dp_lib.epsilon(dataclasses.replace(poisson, sampling="shuffle"), 16, 564, 1500)
  assert dp_lib.max_batch(poisson, 16) == 40
  assert dp_lib.epsilon(poisson, 16, 564, 1500) == pytest.approx(untruncated, rel=1e-3)
  assert dp_lib.epsilon(dataclasses.replace(poisson, max_batch_size=32), 16, 564, 1500) > 1.2 * untruncated


def test_a_resumed_run_reuses_its_accountant_record_only_for_the_same_settings():
  cfg = dp_lib.config_defaults()
  cfg.epsilon = 3.0
  dp, record = dp_lib.from_config(cfg, 16, 30, [200, 180])
  again, same = dp_lib.from_config(cfg, 16, 30, [200, 180], previous=record)
  assert same is record and again == dp
  _, other = dp_lib.from_config(cfg, 16, 31, [200, 180], previous=record)  # one step more: accounted again
  assert other is not record and other["steps"] == 31
  cfg.epsilon, cfg.noise_multiplier = None, 0.7
  _, given = dp_lib.from_config(cfg, 16, 30, [200, 180], previous=record)
  assert given["noise_multiplier"] == 0.7


def test_poisson_steps_run_at_two_widths():
  dp = dp_lib.DPConfig(noise_multiplier=1.0, clip_norm=1.0, batch_size=16)
  assert [dp_lib.step_width(dp, 16, n) for n in (0, 16, 24, 25, 40)] == [24, 24, 24, 40, 40]
  big = dp_lib.DPConfig(noise_multiplier=1.0, clip_norm=1.0, batch_size=64)
  assert [dp_lib.step_width(big, 64, n) for n in (70, 80, 81)] == [80, 80, 112]


@pytest.mark.parametrize("field,value", [("clip_norm", 0.5), ("sampling", "shuffle"), ("delta", 1e-6),
                                         ("max_batch_size", 40)])
def test_a_dp_setting_with_dp_off_is_refused_not_ignored(field, value):
  cfg = dp_lib.config_defaults()
  cfg[field] = value
  with pytest.raises(InputError, match=rf"train\.dp\.{field}=.* acts only with DP-SGD on, which this config leaves "
                                       r"off: set train\.dp\.epsilon or train\.dp\.noise_multiplier"):
    dp_lib.validate(cfg, 16)
  cfg.noise_multiplier = 1.0  # with DP on the same setting acts
  assert getattr(dp_lib.validate(cfg, 16), field) == value
  assert dp_lib.validate(dp_lib.config_defaults(), 16).epsilon is None  # the defaults, DP off: accepted
