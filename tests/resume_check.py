"""The killed-and-resumed check shared by the LSTM and PixelCNN++ pipeline tests."""

import os

import numpy as np
import pytest

from training import pipeline
from training import trainer


_POPULATION = ("population", "population_losses")  # compared when the run has RMIA's population


class Killed(BaseException):
  """Stands in for SIGKILL/KeyboardInterrupt: not an Exception, so nothing catches it on the way."""


def assert_killed_run_resumes(cfg, run_dir, finished_run, monkeypatch):
  """Kill a run in its second group, rerun it (the first group skipped), and also restore a group whose checkpoint was
  written but whose losses were not; every array must equal the uninterrupted run's (finished_run)."""
  real_train = trainer.train_group
  calls = []

  def killed_in_second_group(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise Killed()
    return real_train(*args, **kwargs)

  monkeypatch.setattr(trainer, "train_group", killed_in_second_group)
  with pytest.raises(Killed):
    pipeline.run(cfg, run_dir, progress=False)
  assert os.path.exists(os.path.join(run_dir, "losses", "group_0000.npy"))
  assert not os.path.exists(os.path.join(run_dir, "losses", "group_0001.npy"))
  assert not os.path.exists(os.path.join(run_dir, "losses.npy"))

  calls.clear()
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: (calls.append(1), real_train(*a, **k))[1])
  assert pipeline.run(cfg, run_dir, progress=False)
  assert len(calls) == pipeline_groups(cfg) - 1  # the finished group was skipped
  population = list(_POPULATION) if os.path.exists(os.path.join(finished_run, "population.npy")) else []
  for name in ["losses", "keep", "canaries"] + population:
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(finished_run, f"{name}.npy")), err_msg=name)

  # Killed after the checkpoint (and the population losses) were written but before its losses: restored, not
  # retrained. Killed before the population losses: they are computed from the checkpoint too.
  for lost in (("group_0001.npy",), ("group_0001.npy", "group_0001_population.npy")):
    for name in lost:
      if os.path.exists(os.path.join(run_dir, "losses", name)):
        os.remove(os.path.join(run_dir, "losses", name))
    for name in ("losses.npy", "population_losses.npy"):  # assembled only once every group is done
      if os.path.exists(os.path.join(run_dir, name)):
        os.remove(os.path.join(run_dir, name))
    monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a checkpointed group"))
    assert pipeline.run(cfg, run_dir, progress=False)
    for name in ["losses"] + population[1:]:
      np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                    np.load(os.path.join(finished_run, f"{name}.npy")), err_msg=name)


def pipeline_groups(cfg):
  """Number of groups a run of cfg trains."""
  return -(-cfg.shadow.num_models // cfg.shadow.group_size)
