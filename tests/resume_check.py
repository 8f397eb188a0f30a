"""The killed-and-resumed check shared by the LSTM and PixelCNN++ pipeline tests."""

import os

import numpy as np
import pytest

from training import pipeline
from training import trainer


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
  for name in ("losses", "keep", "canaries"):
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(finished_run, f"{name}.npy")), err_msg=name)

  # Killed after the checkpoint was written but before its losses: restored, not retrained.
  os.remove(os.path.join(run_dir, "losses", "group_0001.npy"))
  os.remove(os.path.join(run_dir, "losses.npy"))
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a checkpointed group"))
  assert pipeline.run(cfg, run_dir, progress=False)
  np.testing.assert_array_equal(np.load(os.path.join(run_dir, "losses.npy")),
                                np.load(os.path.join(finished_run, "losses.npy")))


def pipeline_groups(cfg):
  """Number of groups a run of cfg trains."""
  return -(-cfg.shadow.num_models // cfg.shadow.group_size)
