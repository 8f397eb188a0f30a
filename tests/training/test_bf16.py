"""bfloat16 mixed precision (train.compute_dtype, models/precision.py): what each family's bfloat16 step computes in,
that bfloat16 training memorises, that extraction is the float32 model's, that float32 is untouched, and the
config field."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import models
import run_folder
from experiments.configs import lstm as lstm_configs
from experiments.configs import pixelcnn as pixelcnn_configs
from experiments.configs import pythia as pythia_configs
from lira.errors import InputError
from models import token_loss
from tests.training.test_trainer import tiny_model, tiny_task
from training import pipeline
from training import run_config
from training import run_data
from training import trainer

FAMILIES = {
    "lstm": (dict(vocab_size=24, embed_dim=8, hidden_dim=16), "tokens"),
    "gpt_neox": (dict(vocab_size=24, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32), "tokens"),
    "pixelcnn_pp": (dict(image_shape=(4, 4, 1), num_levels=5, nr_resnet=1, nr_filters=4, nr_logistic_mix=2,
                         dropout_p=0.5), "images"),
}


def examples(kind, n, seed=0):
  rng = np.random.default_rng(seed)
  if kind == "images":
    return rng.integers(0, 5, (n, 4, 4, 1)).astype(np.int32)
  return rng.integers(1, 24, (n, 6)).astype(np.int32)


def products(jaxpr):
  """Every dot_general and convolution of a jaxpr, inside scans, custom VJPs and jits too."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in ("dot_general", "conv_general_dilated"):
      yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
          yield from products(sub.jaxpr)
        elif hasattr(sub, "eqns"):
          yield from products(sub)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_bfloat16_step_multiplies_bfloat16_and_keeps_float32_weights_losses_and_gradients(name):
  fields, kind = FAMILIES[name]
  model = models.get_model(name, **fields)
  bf16 = model.with_compute_dtype("bfloat16")
  assert bf16.config.dtype == "bfloat16" and bf16 == model.with_compute_dtype("bfloat16")  # one compiled step
  params = model.init(trainer.model_key(0, 0))
  x = jnp.asarray(examples(kind, 4))
  bos = 0 if kind == "tokens" else None
  key = jax.random.PRNGKey(1) if model.dropout else None

  def mean_loss(m):
    return lambda p: m.loss(p, x, bos, key).mean()

  jaxpr = jax.make_jaxpr(jax.value_and_grad(mean_loss(bf16)))(params).jaxpr
  operand_dtypes = {str(v.aval.dtype) for eqn in products(jaxpr) for v in eqn.invars}
  assert operand_dtypes == {"bfloat16"}  # forward and backward: no float32 product left in the step
  assert {str(v.aval.dtype) for v in jaxpr.outvars} == {"float32"}  # the loss and every gradient
  assert "bf16" not in str(jax.make_jaxpr(jax.value_and_grad(mean_loss(model)))(params).jaxpr)  # float32: no rounding

  # One training step of the bfloat16 model (G = 1, a batch of 4), against the float32 loss of the same weights.
  step = trainer.make_step(bf16, 1e-2, 0.0, bos, single=True)
  stack = jax.tree.map(lambda p: p[None], params)
  keys = [trainer.dropout_key_data(0, [0], 0, 0)] if model.dropout else []
  new, opt_state, loss_1 = step(stack, trainer.opt_init(stack, 1e-2, 0.0), x[None], jnp.ones((1, 4)), *keys)
  for tree in (new, opt_state):
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(tree) if jnp.issubdtype(a.dtype, jnp.floating))
  assert all(np.isfinite(a).all() for a in jax.tree.leaves(new))
  assert loss_1.dtype == jnp.float32 and np.isfinite(loss_1).all()
  if kind == "images":  # a PixelCNN++ compiles for ~20 s a function: its float32 forward is left out
    return
  float32_loss = jax.jit(mean_loss(model))(params)
  # bfloat16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3); a few layers of <= 32-term products grow that to
  # ~1e-2 relative on O(1) losses: 0.1 absolute leaves 10x, while a wrong op or dtype changes them by O(1).
  assert abs(float(loss_1[0]) - float(float32_loss)) < 0.1
  assert float(loss_1[0]) != float(float32_loss)  # it did compute in bfloat16


@pytest.fixture(scope="module")
def bf16_trained():
  """4 LSTMs trained in bfloat16 on 8 training rows and their IN canaries of 16 (tests/training/test_trainer.py's
  memorisation task, fewer epochs)."""
  model = tiny_model(24)
  examples_ExT, canaries_NxT, keep_MxN, ids = tiny_task(num_models=4, num_train=8, num_canaries=16, seq_len=8,
                                                        vocab=24, seed=3)
  cfg = trainer.TrainConfig(epochs=25, batch_size=8, learning_rate=3e-2, seed=0, compute_dtype="bfloat16")
  params, _ = trainer.train_group(model, examples_ExT, ids, [0, 1, 2, 3], cfg, bos_id=0, progress=False)
  return model, params, canaries_NxT, keep_MxN


def auc(scores_in, scores_out):
  """Probability that an IN pair scores above an OUT pair (ties count half): the ROC AUC."""
  diff = np.asarray(scores_in)[:, None] - np.asarray(scores_out)[None, :]
  return float(np.mean(diff > 0) + 0.5 * np.mean(diff == 0))


def test_bfloat16_training_memorises_the_in_canaries(bf16_trained):
  model, params, canaries_NxT, keep_MxN = bf16_trained
  loss_MxNxT = trainer.canary_statistics(model, params, canaries_NxT, bos_id=0)[0]
  score_MxN = -loss_MxNxT.mean(axis=2)
  # A model that ignored its IN set scores IN and OUT canaries alike: AUC 0.5 +- 0.07 for 32 + 32 pairs.
  assert auc(score_MxN[keep_MxN], score_MxN[~keep_MxN]) > 0.9


def test_extraction_from_a_bfloat16_trained_model_is_the_float32_extraction(bf16_trained):
  model, params, canaries_NxT, _ = bf16_trained
  bf16 = model.with_compute_dtype("bfloat16")
  loss, mu, sigma, top1 = trainer.canary_statistics(bf16, params, canaries_NxT, bos_id=0)
  for a, b in zip((loss, mu, sigma, top1), trainer.canary_statistics(model, params, canaries_NxT, bos_id=0)):
    assert a.dtype == (bool if a is top1 else np.float32)
    np.testing.assert_array_equal(a, b)  # whichever model it is handed, extraction runs the float32 one
  for m in range(4):
    one = jax.tree.map(lambda x: x[m], params)
    # The float32 loss function on one model, unbatched: only the forward pass's rounding order differs from the
    # vmapped extraction, ~1e-7 relative on O(1) losses (as test_trainer's extraction test).
    float32_T = trainer.token_losses(model, one, jnp.asarray(canaries_NxT), 0)
    np.testing.assert_allclose(loss[m], float32_T, rtol=1e-5, atol=1e-6)
    # and the bfloat16 model's losses of the same weights are farther off than that tolerance
    assert np.abs(trainer.token_losses(bf16, one, jnp.asarray(canaries_NxT), 0) - float32_T).max() > 1e-4


def test_float32_training_is_the_default_path_bit_for_bit():
  model = tiny_model(24)
  assert model.with_compute_dtype("float32") is model
  examples_ExT, _, _, ids = tiny_task(num_models=2)
  runs = [trainer.train_group(model, examples_ExT, ids, [0, 1], trainer.TrainConfig(epochs=1, batch_size=4, **kw),
                              bos_id=0, progress=False) for kw in ({}, {"compute_dtype": "float32"})]
  for a, b in zip(jax.tree.leaves(runs[0]), jax.tree.leaves(runs[1])):
    assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("margin", [0, 10, 20, 40])
def test_losses_of_bfloat16_features_stay_exact_at_large_margins(margin):
  """linear_token_loss with bfloat16 features: logits are float32 sums, so a memorised token keeps its tiny loss.

  One-hot features select one kernel column per row; the margins and zeros are exact in bfloat16, so the logits are
  exactly [0, ..., margin, ..., 0] and the loss is token_loss's of float32 logits (16 ulps of the exact value:
  tests/models/test_token_loss.py, large margins)."""
  V, H, target = 512, 4, 7
  kernel_HxV = np.zeros((H, V), np.float32)
  kernel_HxV[1, target] = margin
  x_NxH = jnp.asarray(np.eye(H, dtype=np.float32)[[1, 1]], jnp.bfloat16)
  targets_N = jnp.full((2,), target)
  loss_N = token_loss.linear_token_loss(x_NxH, jnp.asarray(kernel_HxV), jnp.zeros(V), targets_N)
  logits_1x1xV = np.zeros((1, 1, V), np.float32)
  logits_1x1xV[0, 0, target] = margin
  expected = np.log1p((V - 1) * np.exp(-np.float64(margin)))
  assert loss_N.dtype == jnp.float32
  assert float(loss_N[0]) == float(token_loss.token_loss(jnp.asarray(logits_1x1xV), jnp.full((1, 1), target))[0, 0])
  assert abs(float(loss_N[0]) - expected) <= 16 * np.finfo(np.float32).eps * expected


CONFIGS = [(lstm_configs, "tiny"), (pythia_configs, "tiny"), (pixelcnn_configs, "tiny")]


@pytest.mark.parametrize("module,arg", CONFIGS)
def test_train_compute_dtype_is_validated_by_name(module, arg):
  cfg = module.get_config(arg)
  assert run_config.compute_dtype(cfg) == "float32"
  cfg.train.compute_dtype = "bfloat16"
  pipeline.validate(cfg)
  cfg.train.compute_dtype = "float16"
  with pytest.raises(InputError, match=r"^train.compute_dtype must be one of float32, bfloat16, got 'float16'$"):
    pipeline.validate(cfg)


def test_model_dtype_is_an_alias_that_must_agree(tmp_path):
  cfg = pythia_configs.get_config("tiny")
  cfg.model.dtype = "bfloat16"  # a config written when GPT-NeoX's compute dtype was model.dtype
  with pytest.raises(InputError, match=r"model.dtype='bfloat16' is an alias of train.compute_dtype='float32'"):
    pipeline.validate(cfg)
  cfg.train.compute_dtype = "bfloat16"
  assert run_config.compute_dtype(cfg) == "bfloat16"
  # A run folder written before train.compute_dtype (model.dtype float32, no train.compute_dtype) resumes with
  # today's config, and is refused by a bfloat16 one, naming the field.
  old = run_config.config_dict(pythia_configs.get_config("tiny"))
  old["model"]["dtype"] = "float32"
  del old["train"]["compute_dtype"]
  run_folder.save_config(str(tmp_path), old)
  run_config.check_config(pythia_configs.get_config("tiny"), str(tmp_path))
  bf16 = pythia_configs.get_config("tiny")
  bf16.train.compute_dtype = "bfloat16"
  with pytest.raises(InputError, match=r"train.compute_dtype: run folder has 'float32', this command has 'bfloat16'"):
    run_config.check_config(bf16, str(tmp_path))
  lstm_old = run_config.config_dict(lstm_configs.get_config("tiny"))
  del lstm_old["train"]["compute_dtype"]
  run_folder.save_config(str(tmp_path / "lstm"), lstm_old)
  run_config.check_config(ml_collections.ConfigDict(lstm_configs.get_config("tiny")), str(tmp_path / "lstm"))


@pytest.mark.slow
def test_a_bfloat16_run_records_its_compute_dtype_and_writes_float32_losses(tmp_path, monkeypatch, small_corpus):
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: small_corpus)
  cfg = lstm_configs.get_config("tiny")
  cfg.train.compute_dtype = "bfloat16"
  cfg.population.size = 0
  run_dir = str(tmp_path / "run")
  assert pipeline.run(cfg, run_dir, progress=False)
  assert run_folder.load_config(run_dir)["train"]["compute_dtype"] == "bfloat16"
  loss_MxNxT = run_folder.load_npy(f"{run_dir}/{run_folder.names.LOSSES}")
  assert loss_MxNxT.dtype == np.float32 and loss_MxNxT.shape == (6, 16, 12) and np.isfinite(loss_MxNxT).all()
