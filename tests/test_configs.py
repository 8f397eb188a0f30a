"""Every named shadow-training config passes the checks train_shadows runs first; the reproduction configs' data."""

import numpy as np
import pytest

from experiments.configs import lstm, pixelcnn, pythia
from training import pipeline

NAMED = [(lstm, a) for a in ("cpu", "paper", "tiny", "reproduce_worst", "reproduce_average")] + \
        [(pythia, a) for a in ("pythia", "pythia_tiny", "tiny")] + [(pixelcnn, a) for a in ("cpu", "paper", "tiny")]


@pytest.mark.parametrize("module,arg", NAMED, ids=[f"{m.__name__.split('.')[-1]}:{a}" for m, a in NAMED])
def test_named_configs_pass_validation(module, arg):
  pipeline.validate(module.get_config(arg))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["worst", "average"])
def test_reproduction_configs_build_their_data_from_the_installed_corpus(tmp_path, kind):
  """64 models, 5,000 canaries of 128 tokens: the corpus has the sequences (average-case: distinct held-out ones)."""
  cfg = lstm.get_config(f"reproduce_{kind}")
  data = pipeline.prepare_data(cfg, str(tmp_path), progress=False)
  assert data.canaries_NxT.shape == (5000, 128) and data.keep_MxN.shape == (64, 5000)
  assert data.num_train == 1500
  assert (data.keep_MxN.sum(axis=0) == 32).all()  # every canary IN for exactly half the models
  if kind == "average":  # real held-out text: no canary repeats, none is a training sequence
    train = {row.tobytes() for row in data.examples_ExT[:data.num_train]}
    assert len(np.unique(data.canaries_NxT, axis=0)) == 5000
    assert not any(row.tobytes() in train for row in data.canaries_NxT)
