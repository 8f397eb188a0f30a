"""PixelCNN++ shadow runs: grouping, resumption, memorisation of worst-case canaries, bad input (the run sharded over
simulated devices: tests/e2e/test_sharded_pixelcnn_run.py).

Every test uses the `tiny` config's network (8 x 8 digits, 8 filters, 1 block per stage, dropout 0.5), built once per
process (models.get_model caches it), so the compiled steps are shared.
"""

import json
import os

import jax
import numpy as np
import pytest

import models
from experiments.configs import pixelcnn as pixelcnn_configs
import run_folder
from resume_check import assert_killed_run_resumes
from test_trainer import assert_trained_alike
from training import canaries as canaries_lib
from training import images
from training import pipeline
from training import run_data
from training import trainer


def tiny_cfg(**overrides):
  cfg = pixelcnn_configs.get_config("tiny")
  for key, value in overrides.items():
    section, field = key.split("__")
    cfg[section][field] = value
  return cfg


def tiny_model():
  kwargs = dict(tiny_cfg().model)
  return models.get_model(kwargs.pop("name"), **kwargs)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  run_dir = str(tmp_path_factory.mktemp("pixelcnn"))
  assert pipeline.run(tiny_cfg(), run_dir, progress=False)
  return run_dir


def test_the_family_loss_is_the_per_pixel_nll_with_dropout_only_in_training():
  model = tiny_model()
  params = model.init(trainer.model_key(0, 0))
  x_BxHxWxC = images.load_digits()[:3]
  module = __import__("flax").nnx.merge(model.graphdef, params)
  (stats,) = model.statistics(params, x_BxHxWxC)
  np.testing.assert_array_equal(model.loss(params, x_BxHxWxC), stats)  # evaluation: no dropout, same function
  np.testing.assert_array_equal(stats, module.per_position_loss(x_BxHxWxC))
  assert stats.shape == (3, 64) and model.stat_names == ()
  key = trainer.dropout_key(trainer.dropout_key_data(0, [0], 0, 0)[0])
  dropped = model.loss(params, x_BxHxWxC, key=key)
  np.testing.assert_array_equal(dropped, module.per_position_loss(x_BxHxWxC, train=True, key=key))
  assert not np.allclose(dropped, stats)  # dropout 0.5 changes every pixel's distribution


def restore_group(run_dir, g):
  import orbax.checkpoint as ocp
  return ocp.StandardCheckpointer().restore(os.path.join(os.path.abspath(run_dir), "checkpoints", f"group_{g:04d}"))


def tiny_steps():
  cfg = tiny_cfg()
  length = cfg.data.max_train_images + cfg.canaries.num_canaries // 2  # every model: base images + N/2 IN canaries
  return cfg.train.epochs * -(-length // cfg.train.batch_size)


@pytest.mark.slow
def test_models_trained_together_equal_models_trained_one_by_one(finished_run):
  """Model 6 of the tiny run (second group of 4, third slot) trained alone, as the pipeline would with group_size=1."""
  cfg = tiny_cfg()
  data = run_data.prepare_data(cfg, finished_run, progress=False)
  tcfg = trainer.TrainConfig(cfg.train.epochs, cfg.train.batch_size, cfg.train.learning_rate,
                             cfg.train.weight_decay, cfg.shadow.seed)
  length = data.num_train + int(data.keep_MxN.sum(axis=1).max())
  for m in (6,):  # a later group and slot: data order and dropout keys follow the model id, not the position
    ids = [canaries_lib.training_indices(data.num_train, data.keep_MxN, m)]
    alone, _ = trainer.train_group(tiny_model(), data.examples_ExT, ids, [m], tcfg, length=length, progress=False)
    together = restore_group(finished_run, m // 4)
    # Dropout keys and data order depend on (seed, model, epoch, step) only; only the rounding order differs.
    assert_trained_alike(jax.tree.map(lambda x: x[m % 4], together), jax.tree.map(lambda x: x[0], alone),
                         learning_rate=tcfg.learning_rate, steps=tiny_steps())


@pytest.mark.slow
def test_tiny_run_writes_per_pixel_losses_and_the_image_shape(finished_run):
  cfg = tiny_cfg()
  M, N = cfg.shadow.num_models, cfg.canaries.num_canaries
  run = run_folder.load_run(finished_run)
  assert run.loss_MxNxT.shape == (M, N, 64) and run.loss_MxNxT.dtype == np.float32
  assert np.isfinite(run.loss_MxNxT).all() and (run.loss_MxNxT > 0).all()
  canaries = np.load(os.path.join(finished_run, "canaries.npy"))
  assert canaries.shape == (N, 8, 8, 1) and canaries.max() <= 16
  with open(os.path.join(finished_run, "config.json")) as f:
    config = json.load(f)
  assert config["model"]["image_shape"] == [8, 8, 1] and config["model"]["num_levels"] == 17
  assert not [f for f in os.listdir(finished_run) if f in ("mu.npy", "sigma.npy")]  # no vocabulary, no moments
  assert sorted(os.listdir(os.path.join(finished_run, "losses"))) == ["group_0000.npy", "group_0000_population.npy",
                                                                       "group_0001.npy", "group_0001_population.npy"]
  assert tiny_steps() == 8 * 4  # 48 images + 8 IN canaries in batches of 16, 8 epochs (the other tests rely on it)


@pytest.mark.slow
def test_in_worst_case_canaries_have_lower_loss_than_out(finished_run):
  run = run_folder.load_run(finished_run)
  mean_MxN = run.loss_MxNxT.mean(axis=2)
  in_mean, out_mean = mean_MxN[run.keep_MxN].mean(), mean_MxN[~run.keep_MxN].mean()
  assert in_mean < out_mean, (in_mean, out_mean)  # canary by canary averaged over models: behaviour, not rounding
  per_canary_gap_N = np.array([mean_MxN[~k, n].mean() - mean_MxN[k, n].mean()
                               for n, k in enumerate(run.keep_MxN.T)])
  assert (per_canary_gap_N > 0).mean() >= 0.75, per_canary_gap_N


@pytest.mark.slow
def test_the_population_is_random_images_no_model_saw_scored_per_pixel(finished_run):
  """RMIA's population of a worst-case run: random images as the canaries are drawn (another seed stream), none a
  canary or a training image; OUT for every model, so on average lossier than the IN canaries."""
  cfg = tiny_cfg()
  data = run_data.prepare_data(cfg, finished_run, progress=False)
  pop = np.load(os.path.join(finished_run, "population.npy"))
  assert pop.shape == (cfg.population.size, 8, 8, 1) and pop.dtype == np.uint8 and pop.max() <= 16
  seen = {img.tobytes() for img in data.examples_ExT}  # training images and every canary
  assert not any(img.tobytes() in seen for img in pop)
  pop_MxZxT, mask = run_folder.load_population(finished_run)
  assert pop_MxZxT.shape == (cfg.shadow.num_models, cfg.population.size, 64) and mask is None
  run = run_folder.load_run(finished_run)
  in_mean = run.loss_MxNxT.mean(axis=2)[run.keep_MxN].mean()
  assert pop_MxZxT.mean() > in_mean, (pop_MxZxT.mean(), in_mean)


@pytest.mark.slow
def test_a_killed_run_resumes_to_identical_arrays(tmp_path, monkeypatch, finished_run):
  assert_killed_run_resumes(tiny_cfg(), str(tmp_path / "run"), finished_run, monkeypatch)


@pytest.mark.parametrize("overrides, error, message", [
    (dict(model__image_shape=(16, 16, 1)), ValueError,
     r"\(8, 8, 1\) \(H, W, C\) but model.image_shape is \(16, 16, 1\)"),
    (dict(model__num_levels=8), ValueError, r"pixel level 16, outside model.num_levels=8"),
    (dict(data__source="mnist"), ValueError, r"data.source must be one of digits, fashion_mnist, cifar10"),
    (dict(data__source="cifar10", data__data_dir="/nonexistent"), FileNotFoundError,
     r"no prepared cifar10.*tfds build cifar10 --data_dir=/nonexistent"),
    (dict(data__source="fashion_mnist", data__data_dir="/nonexistent"), FileNotFoundError,
     r"IDX folder '/nonexistent' \(data.data_dir\) does not exist"),
    (dict(canaries__kind="average", canaries__num_canaries=5000), ValueError,
     r"canaries.num_canaries=5000 is more than the \d+ distinct held-out images"),
])
def test_bad_input_is_refused_before_training(tmp_path, monkeypatch, overrides, error, message):
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(error, match=message):
    pipeline.run(tiny_cfg(**overrides), str(tmp_path / "run"), progress=False)


def test_idx_levels_outside_the_config_are_named(tmp_path, monkeypatch):
  from test_images import write_idx
  rng = np.random.default_rng(0)
  for split in ("train", "t10k"):
    write_idx(str(tmp_path / f"{split}-images-idx3-ubyte"), rng.integers(0, 256, (40, 8, 8)))
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(ValueError, match=r"data.source='fashion_mnist' training images hold pixel level 25\d, "
                                       r"outside model.num_levels=17"):
    pipeline.run(tiny_cfg(data__source="fashion_mnist", data__data_dir=str(tmp_path)), str(tmp_path / "run"),
                 progress=False)


def test_configs_hold_table_one():
  paper = pixelcnn_configs.get_config("paper")
  assert (paper.train.epochs, paper.train.learning_rate, paper.train.weight_decay, paper.train.batch_size) == (
      50, 1e-3, 0.0, 192)  # Rossi et al. 2025, Table I
  assert (paper.shadow.num_models, paper.model.nr_filters, paper.model.nr_resnet, paper.model.nr_logistic_mix) == (
      64, 192, 5, 10)
  assert paper.data.source == "cifar10" and paper.canaries.kind == "average"
  assert tuple(paper.model.image_shape) == (32, 32, 3) and paper.model.num_levels == 256
  with pytest.raises(ValueError, match="unknown PixelCNN\\+\\+ config 'big'"):
    pixelcnn_configs.get_config("big")
