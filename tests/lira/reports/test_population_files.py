"""RMIA's population files: lira.reports.population_files.load_population's checks against losses.npy and of every
scored loss, and the synthetic population (lira.synthetic.synthetic_population) drawn from every model's OUT
distribution."""

import os

import numpy as np
import pytest

import lira
from lira import synthetic
from lira.errors import InputError, MissingFileError
import run_folder
from lira.reports import population_files
from lira.reports import synthetic_run


@pytest.fixture
def run(tmp_path):
  """A synthetic run of M = 6 models, N = 40 canaries, T = 5 positions and its default population (Z = N // 4)."""
  path = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(path, num_models=6, num_canaries=40, seq_len=5)
  return path


def test_make_synthetic_writes_a_population_of_n_over_4_beside_unchanged_canary_losses(run, tmp_path):
  pop_MxZxT, mask_ZxT = population_files.load_population(run)
  assert pop_MxZxT.shape == (6, 10, 5) and pop_MxZxT.dtype == np.float32 and mask_ZxT is None
  assert run_folder.load_json(os.path.join(run, "config.json"))["population_size"] == 10
  none = str(tmp_path / "none")
  synthetic_run.write_synthetic_run(none, num_models=6, num_canaries=40, seq_len=5, population_size=0)
  assert not os.path.exists(os.path.join(none, "population_losses.npy"))
  for name in ("losses", "keep"):  # a population of its own seed stream: the canaries' arrays are unchanged
    np.testing.assert_array_equal(np.load(os.path.join(run, f"{name}.npy")), np.load(os.path.join(none, f"{name}.npy")))


def test_a_ragged_synthetic_run_masks_its_population_and_overwrite_removes_stale_files(tmp_path):
  path = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(path, num_models=6, num_canaries=40, seq_len=6, ragged=True, population_size=12)
  pop_MxZxT, mask_ZxT = population_files.load_population(path)
  assert pop_MxZxT.shape == (6, 12, 6) and mask_ZxT.shape == (12, 6) and mask_ZxT.dtype == bool
  assert np.isnan(pop_MxZxT[:, ~mask_ZxT]).all() and np.isfinite(pop_MxZxT[:, mask_ZxT]).all()
  assert (mask_ZxT.sum(axis=1) >= 3).all()  # lengths T // 2 .. T, as the canaries'
  synthetic_run.write_synthetic_run(path, overwrite=True, num_models=6, num_canaries=40, seq_len=6, population_size=0)
  assert not [f for f in os.listdir(path) if f.startswith("population")]


def test_the_synthetic_population_is_out_for_every_model():
  """Population logits spread as the OUT canaries' (no membership shift), well below the IN canaries' raise of 3
  standard deviations. The mean over Z * T = 2,000 positions of mu ~ N(1, 1.5^2) has standard error 0.034 (and the
  noise adds less): 0.2 is six of them."""
  loss_MxNxT, keep_MxN, _ = synthetic.synthetic_losses(8, 400, 5, shift=3.0, frac_shifted=1.0, seed=4)
  pop_MxZxT, mask = synthetic.synthetic_population(8, 400, 5, seed=4)
  assert mask is None
  z_MxNxT, z_pop = lira.logit_scale(loss_MxNxT), lira.logit_scale(pop_MxZxT)
  out_mean, in_mean = z_MxNxT[~keep_MxN].mean(), z_MxNxT[keep_MxN].mean()
  assert abs(z_pop.mean() - out_mean) < 0.2 and in_mean - z_pop.mean() > 2.0, (z_pop.mean(), out_mean, in_mean)
  assert abs(z_pop.std() - z_MxNxT[~keep_MxN].std()) < 0.2


def test_a_missing_population_names_the_file_and_the_command(tmp_path):
  path = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(path, num_models=6, num_canaries=8, seq_len=3, population_size=0)
  with pytest.raises(MissingFileError, match=r"population_losses.npy does not exist: make it with python -m "
                                             r"experiments.population_losses --run_dir=.*run"):
    population_files.load_population(path)


@pytest.mark.parametrize("array, message", [
    (np.zeros((5, 10, 5), np.float32), r"expected \[M, Z, T\] with M and T of losses.npy \(6, 40, 5\), got \(5, 10, 5\)"),
    (np.zeros((6, 10, 4), np.float32), r"expected \[M, Z, T\] with M and T of losses.npy \(6, 40, 5\), got \(6, 10, 4\)"),
    (np.zeros((6, 10), np.float32), r"expected \[M, Z, T\]"),
    (np.zeros((6, 0, 5), np.float32), r"holds no population sequence \(Z = 0\)"),
    (np.zeros((6, 10, 5), np.int64), r"expected floating-point losses, got dtype int64"),
])
def test_a_population_unlike_the_losses_is_named(run, array, message):
  np.save(os.path.join(run, "population_losses.npy"), array)
  with pytest.raises(InputError, match=r"population_losses.npy: " + message):
    population_files.load_population(run)


def test_a_bad_mask_or_loss_is_named(run):
  pop = np.ones((6, 10, 5), np.float32)
  pop[1, 2, 3] = np.nan
  np.save(os.path.join(run, "population_losses.npy"), pop)
  with pytest.raises(InputError, match=r"loss of model 1 on population sequence 2 at position 3 is nan; .*mask them "
                                       r"out with population_mask.npy"):
    population_files.load_population(run, mmap=True)
  mask = np.ones((10, 5), bool)
  mask[2, 3] = False
  np.save(os.path.join(run, "population_mask.npy"), mask)
  loaded, loaded_mask = population_files.load_population(run)  # unscored: any value
  np.testing.assert_array_equal(loaded_mask, mask)
  pop[0, 9, 0] = -1.0
  np.save(os.path.join(run, "population_losses.npy"), pop)
  with pytest.raises(InputError, match=r"model 0 on population sequence 9 at position 0 is -1.0"):
    population_files.load_population(run)
  for bad in (np.ones((10, 4), bool), np.ones((10, 5), np.int8)):
    np.save(os.path.join(run, "population_mask.npy"), bad)
    with pytest.raises(InputError, match=r"population_mask.npy: expected bool \[Z, T\] = \(10, 5\)"):
      population_files.load_population(run)
