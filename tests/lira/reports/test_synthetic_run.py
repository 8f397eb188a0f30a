"""lira.reports.synthetic_run: a synthetic run folder written, never silently replacing a run."""

import os

import pytest

import run_folder
from lira.errors import InputError
from lira.reports import synthetic_run


def test_synthetic_run_refuses_to_replace_a_run(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path), num_models=6, num_canaries=20, seq_len=4, ragged=True)
  before = {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)}
  with pytest.raises(InputError, match="already holds a run .*--overwrite"):
    synthetic_run.write_synthetic_run(str(tmp_path), num_models=8, num_canaries=20, seq_len=4)
  assert {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)} == before
  synthetic_run.write_synthetic_run(str(tmp_path), overwrite=True, num_models=8, num_canaries=20, seq_len=4)
  run = run_folder.load_run(str(tmp_path))
  assert run.loss_MxNxT.shape == (8, 20, 4) and run.mask_NxT is None  # the old ragged run's mask is gone
  assert run.config["source"] == "synthetic" and run.config["population_size"] == 5
