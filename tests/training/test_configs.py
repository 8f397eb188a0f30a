"""Every named shadow-training config passes the checks train_shadows runs first; the reproduction configs' data."""

import numpy as np
import pytest

from experiments.configs import llama, lstm, pixelcnn, pythia
from training import pipeline
from training import run_data

NAMED = [(lstm, a) for a in ("cpu", "paper", "tiny", "reproduce_worst", "reproduce_average")] + \
        [(pythia, a) for a in ("pythia", "pythia_tiny", "tiny", "reproduce_worst", "reproduce_average")] + \
        [(pixelcnn, a) for a in ("cpu", "paper", "tiny", "reproduce_average", "reproduce_worst")] + \
        [(llama, a) for a in ("llama_tiny", "smollm2", "tiny")]


@pytest.mark.parametrize("module,arg", NAMED, ids=[f"{m.__name__.split('.')[-1]}:{a}" for m, a in NAMED])
def test_named_configs_pass_validation(module, arg):
  pipeline.validate(module.get_config(arg))


@pytest.mark.slow
@pytest.mark.parametrize("module,kind,num_canaries,num_train", [
    (lstm, "worst", 5000, 1500), (lstm, "average", 5000, 1500), (pythia, "average", 2500, 750)])
def test_reproduction_configs_build_their_data_from_the_installed_corpus(tmp_path, module, kind, num_canaries,
                                                                         num_train):
  """64 models, canaries of 128 tokens: the corpus has the sequences (average-case: distinct held-out ones)."""
  cfg = module.get_config(f"reproduce_{kind}")
  data = run_data.prepare_data(cfg, str(tmp_path), progress=False)
  assert data.canaries_NxT.shape == (num_canaries, 128) and data.keep_MxN.shape == (64, num_canaries)
  assert data.num_train == num_train
  assert (data.keep_MxN.sum(axis=0) == 32).all()  # every canary IN for exactly half the models
  if kind == "average":  # real held-out text: no canary repeats, none is a training sequence
    train = {row.tobytes() for row in data.examples_ExT[:data.num_train]}
    assert len(np.unique(data.canaries_NxT, axis=0)) == num_canaries
    assert not any(row.tobytes() in train for row in data.canaries_NxT)
  if module is pythia:  # the base model pretrains on the rest of the train split, never on a fine-tuning sequence
    assert len(data.pretrain_SxT) >= cfg.pretrain.max_sequences


@pytest.mark.parametrize("kind", ["average", "worst"])
def test_image_reproduction_configs_use_all_digits_and_distinct_held_out_canaries(tmp_path, kind):
  cfg = pixelcnn.get_config(f"reproduce_{kind}")
  data = run_data.prepare_data(cfg, str(tmp_path), progress=False)
  assert data.canaries_NxT.shape == (700, 8, 8, 1) and data.keep_MxN.shape == (64, 700)
  assert data.num_train == 1078  # digits' 1,797 images less the 40% held out (719)
  if kind == "average":
    train = {img.tobytes() for img in data.examples_ExT[:data.num_train]}
    assert len(np.unique(data.canaries_NxT.reshape(700, -1), axis=0)) == 700
    assert not any(img.tobytes() in train for img in data.canaries_NxT)
