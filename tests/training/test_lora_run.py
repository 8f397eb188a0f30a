"""A LoRA shadow run (experiments/configs/gpt2.py:tiny with train.lora.rank) end to end: the group checkpoints hold
the adapters alone, the base losses are the base's, a copy loaded from the run folder and written back as a Hugging
Face folder (merged) gives the stored losses in transformers' PyTorch model, WBC-against-the-base scores it, and a
resume with other LoRA settings is refused."""

import os

import ml_collections
import numpy as np
import pytest

from experiments.configs import gpt2 as gpt2_configs
import run_folder
from lira.errors import InputError
from training import pipeline
from training import run_data
from training import shadow_model
from tests.training.test_lm_runs import torch_losses

RANK = 4


def lora_config():
  cfg = gpt2_configs.get_config("tiny")
  cfg.train.lora.rank = RANK
  cfg.train.learning_rate = 1e-2
  return cfg


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, small_corpus):
  mp = pytest.MonkeyPatch()
  mp.setattr(run_data, "_corpus", lambda cfg: small_corpus)
  run_dir = str(tmp_path_factory.mktemp("gpt2_lora"))
  assert pipeline.run(lora_config(), run_dir, progress=False)
  yield run_dir
  mp.undo()


def _bytes(folder):
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


@pytest.mark.slow
def test_a_lora_copy_written_back_gives_the_stored_losses_in_transformers(lora_run, tmp_path):
  from models import hf_convert
  from models import lora
  cfg = lora_config()
  data = run_data.prepare_data(cfg, lora_run, progress=False)
  run = run_folder.load_run(lora_run)
  canaries_NxT = np.load(os.path.join(lora_run, "canaries.npy"))
  base_folder = os.path.join(lora_run, "base_model")
  # float32 on both sides, sums in other orders: losses of size ~6 a few ulps apart; 1e-4 is 20x that
  loss, top1 = torch_losses(base_folder, canaries_NxT, data.bos_id)
  np.testing.assert_allclose(np.load(os.path.join(lora_run, "base_losses.npy")), loss, rtol=0, atol=1e-4)
  # a group checkpoint (3 copies' adapters) is far smaller than the base's weights
  base_bytes = os.path.getsize(os.path.join(base_folder, "model.safetensors"))
  assert _bytes(run_folder.group_paths(lora_run, 1)[0]) < 0.5 * base_bytes
  module, _, _ = shadow_model.load_shadow_model(lora_run, 4)
  assert any(isinstance(m, lora.LoRALinear) for _, m in __import__("flax").nnx.iter_modules(module))
  hf_convert.save_pretrained(module, str(tmp_path / "copy4"))  # merged: W + alpha / r * A @ B
  loss, top1 = torch_losses(str(tmp_path / "copy4"), canaries_NxT, data.bos_id)
  np.testing.assert_allclose(run.loss_MxNxT[4], loss, rtol=0, atol=1e-4)
  np.testing.assert_array_equal(np.load(os.path.join(lora_run, "top1.npy"))[4], top1)
  assert np.abs(run.loss_MxNxT[4] - np.load(os.path.join(lora_run, "base_losses.npy"))).max() > 1e-2  # it moved


@pytest.mark.slow
def test_wbc_against_the_base_scores_the_lora_copies_and_other_lora_settings_are_refused(lora_run):
  from attacks import shadow
  chosen = shadow.choose(lora_run, ["wbc_base"])
  scores_MxN = chosen.attacks[0].leave_one_out(chosen.run, chosen.settings)
  assert scores_MxN.shape == (6, 16) and np.isfinite(scores_MxN).all()
  cfg = ml_collections.ConfigDict(lora_config().to_dict())
  cfg.train.lora.rank = RANK * 2
  with pytest.raises(InputError, match=r"train.lora.rank: run folder has 4, this command has 8"):
    pipeline.run(cfg, lora_run, progress=False)


def test_a_folder_recorded_before_the_lora_block_resumes_with_lora_off_only(tmp_path):
  from training import run_config
  run_dir = str(tmp_path / "run")
  os.makedirs(run_dir)
  cfg = gpt2_configs.get_config("tiny")
  run_config.check_config(cfg, run_dir)
  config = run_folder.load_config(run_dir)
  del config["train"]["lora"]
  run_folder.save_config(run_dir, config)
  run_config.check_config(cfg, run_dir)  # LoRA off: the same config
  with pytest.raises(InputError, match=r"train.lora: run folder has '<missing>'"):
    run_config.check_config(lora_config(), run_dir)
