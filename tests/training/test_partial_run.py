"""training.partial: the first K finished models of a run as a run folder, checked against the group files stacked
by hand, and every refusal named before anything is written (the command: tests/e2e/test_partial_run_command.py)."""

import json
import os

import numpy as np
import pytest

import run_folder

from lira.reports import synthetic_run
from lira.errors import InputError, MissingFileError
from training import partial


def fake_run(path, M=8, G=2, N=5, T=3, finished=3, stats=True):
  """A run folder as train_shadows leaves it mid-run: config, keep, canaries, and the first `finished` groups."""
  rng = np.random.default_rng(0)
  os.makedirs(os.path.join(path, "losses"))
  run_folder.save_json(os.path.join(path, "config.json"), {"shadow": {"num_models": M, "group_size": G, "seed": 0},
                                                       "model": {"name": "lstm"}})
  keep = rng.random((M, N)) < 0.5
  np.save(os.path.join(path, "keep.npy"), keep)
  np.save(os.path.join(path, "canaries.npy"), rng.integers(0, 9, size=(N, T)))
  groups = []
  for g in range(finished):
    loss = rng.exponential(size=(G, N, T)).astype(np.float32)
    np.save(os.path.join(path, "losses", f"group_{g:04d}.npy"), loss)
    if stats:
      np.save(os.path.join(path, "losses", f"group_{g:04d}_mu.npy"), loss + 1)
      np.save(os.path.join(path, "losses", f"group_{g:04d}_top1.npy"), loss < 0.5)
    groups.append(loss)
  return keep, groups


def test_the_first_finished_groups_become_a_run(tmp_path):
  src, dst = str(tmp_path / "run"), str(tmp_path / "part")
  keep, groups = fake_run(src, finished=3)
  config, paths = partial.write_partial_run(src, dst)  # default: the 6 models of the 3 finished groups
  np.testing.assert_array_equal(np.load(f"{dst}/losses.npy"), np.concatenate(groups))
  np.testing.assert_array_equal(np.load(f"{dst}/keep.npy"), keep[:6])
  np.testing.assert_array_equal(np.load(f"{dst}/mu.npy"), np.concatenate(groups) + 1)
  np.testing.assert_array_equal(np.load(f"{dst}/top1.npy"), np.concatenate(groups) < 0.5)
  np.testing.assert_array_equal(np.load(f"{dst}/canaries.npy"), np.load(f"{src}/canaries.npy"))
  assert not os.path.exists(f"{dst}/sigma.npy")  # no group has it
  with open(f"{dst}/config.json") as f:
    saved = json.load(f)
  assert saved == config and saved["shadow"]["num_models"] == 6 and saved["partial_of"]["num_models"] == 8
  assert saved["model"] == {"name": "lstm"}
  run = run_folder.load_run(dst)  # what every command reads
  assert run.loss_MxNxT.shape == (6, 5, 3) and run.keep_MxN.shape == (6, 5)
  fake_run(str(tmp_path / "run8"), finished=4)
  config8, _ = partial.write_partial_run(str(tmp_path / "run8"), str(tmp_path / "eight"), num_models=8)
  assert config8["shadow"]["num_models"] == 8 and np.load(tmp_path / "eight" / "losses.npy").shape == (8, 5, 3)


def test_refusals_name_the_problem_and_write_nothing(tmp_path):
  src = str(tmp_path / "run")
  fake_run(src, finished=3)
  with pytest.raises(MissingFileError, match="group_0003.npy does not exist: group 3 of the first 8"):
    partial.write_partial_run(src, str(tmp_path / "a"), num_models=8)
  with pytest.raises(InputError, match="splits group 3 .*multiple of shadow.group_size=2"):
    partial.write_partial_run(src, str(tmp_path / "b"), num_models=7)
  with pytest.raises(InputError, match="exceeds the run's 8 models"):
    partial.write_partial_run(src, str(tmp_path / "c"), num_models=10)
  with pytest.raises(InputError, match="must differ"):
    partial.write_partial_run(src, src)
  with pytest.raises(InputError, match="--num_models=4; the leave-one-out evaluation needs at least 6 models"):
    partial.write_partial_run(src, str(tmp_path / "d"), num_models=4)
  for name in "abcd":
    assert not os.path.exists(tmp_path / name / "losses.npy")
  partial.write_partial_run(src, str(tmp_path / "e"))
  with pytest.raises(InputError, match="already holds a run"):
    partial.write_partial_run(src, str(tmp_path / "e"))


def test_a_synthetic_run_is_named_as_not_a_shadow_run(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path / "syn"), num_models=8, num_canaries=5, seq_len=3)
  with pytest.raises(InputError, match="is not a shadow run of experiments.train_shadows.*synthetic run of "
                                       "experiments.make_synthetic"):
    partial.write_partial_run(str(tmp_path / "syn"), str(tmp_path / "out"))
  assert not os.path.exists(tmp_path / "out")


def test_a_population_is_stacked_and_copied_too(tmp_path):
  """RMIA's population: each group's population losses stacked for the first K models, population.npy copied."""
  src, dst = str(tmp_path / "run"), str(tmp_path / "part")
  fake_run(src, finished=3)
  rng = np.random.default_rng(1)
  pop = [rng.exponential(size=(2, 4, 3)).astype(np.float32) for _ in range(3)]
  for g, loss in enumerate(pop):
    np.save(os.path.join(src, "losses", f"group_{g:04d}_population.npy"), loss)
    np.save(os.path.join(src, "losses", f"group_{g:04d}_population_top1.npy"), loss < 0.5)
  np.save(os.path.join(src, "population.npy"), rng.integers(0, 9, size=(4, 3)))
  partial.write_partial_run(src, dst)
  np.testing.assert_array_equal(np.load(f"{dst}/population_losses.npy"), np.concatenate(pop))
  np.testing.assert_array_equal(np.load(f"{dst}/population_top1.npy"), np.concatenate(pop) < 0.5)
  np.testing.assert_array_equal(np.load(f"{dst}/population.npy"), np.load(f"{src}/population.npy"))
  assert run_folder.load_population(dst)[0].shape == (6, 4, 3)
  partial.write_partial_run(src, str(tmp_path / "dropped"), drop_canaries=[0, 3])  # the population is no canary
  np.testing.assert_array_equal(np.load(tmp_path / "dropped" / "population_losses.npy"), np.concatenate(pop))
  assert np.load(tmp_path / "dropped" / "losses.npy").shape == (6, 3, 3)


def test_dropped_canaries_leave_every_per_canary_array(tmp_path):
  """--drop_canaries: the kept canaries' rows, in order, of every per-canary array; the dropped indices recorded."""
  src, dst = str(tmp_path / "run"), str(tmp_path / "part")
  keep, groups = fake_run(src, N=6, finished=4)
  rng = np.random.default_rng(2)
  mask = rng.random((6, 3)) < 0.7
  np.save(os.path.join(src, "mask.npy"), mask)
  base_losses, base_top1 = rng.exponential(size=(6, 3)).astype(np.float32), rng.random((6, 3)) < 0.5
  np.save(os.path.join(src, "base_losses.npy"), base_losses)  # a fine-tuning run's base model on the canaries
  np.save(os.path.join(src, "base_top1.npy"), base_top1)
  config, _ = partial.write_partial_run(src, dst, drop_canaries=["4", "1", "4"])  # as the flag passes them
  kept = [0, 2, 3, 5]
  loss = np.concatenate(groups)
  np.testing.assert_array_equal(np.load(f"{dst}/losses.npy"), loss[:, kept])
  np.testing.assert_array_equal(np.load(f"{dst}/mu.npy"), loss[:, kept] + 1)
  np.testing.assert_array_equal(np.load(f"{dst}/keep.npy"), keep[:, kept])
  np.testing.assert_array_equal(np.load(f"{dst}/canaries.npy"), np.load(f"{src}/canaries.npy")[kept])
  np.testing.assert_array_equal(np.load(f"{dst}/mask.npy"), mask[kept])
  np.testing.assert_array_equal(np.load(f"{dst}/base_losses.npy"), base_losses[kept])
  np.testing.assert_array_equal(np.load(f"{dst}/base_top1.npy"), base_top1[kept])
  np.testing.assert_array_equal(np.load(f"{dst}/top1.npy"), loss[:, kept] < 0.5)
  assert config["partial_of"]["dropped_canaries"] == [1, 4] and config["partial_of"]["num_canaries"] == 6
  run = run_folder.load_run(dst)
  assert run.loss_MxNxT.shape == (8, 4, 3) and run.keep_MxN.shape == (8, 4)


@pytest.mark.parametrize("drop,message", [(["6"], "canary 6 is out of range .*N=6 canaries, 0-5"),
                                          (["-1"], "canary -1 is out of range"),
                                          (["a"], "are not all canary indices"),
                                          ([str(i) for i in range(6)], "drops all 6 canaries")])
def test_bad_dropped_canaries_are_refused_before_writing(tmp_path, drop, message):
  src = str(tmp_path / "run")
  fake_run(src, N=6, finished=4)
  with pytest.raises(InputError, match=message):
    partial.write_partial_run(src, str(tmp_path / "out"), drop_canaries=drop)
  assert not os.path.exists(tmp_path / "out")


def test_a_folder_with_losses_npy_only_is_sliced_from_it(tmp_path):
  """A partial run (losses.npy, no group files) gives its first K models and drops canaries the same way."""
  src, mid, dst = str(tmp_path / "run"), str(tmp_path / "mid"), str(tmp_path / "part")
  keep, groups = fake_run(src, N=6, finished=4)
  partial.write_partial_run(src, mid)  # all 8 models, as losses.npy
  config, _ = partial.write_partial_run(mid, dst, num_models=7, drop_canaries=[2])
  loss = np.concatenate(groups)
  kept = [0, 1, 3, 4, 5]
  np.testing.assert_array_equal(np.load(f"{dst}/losses.npy"), loss[:7][:, kept])
  np.testing.assert_array_equal(np.load(f"{dst}/mu.npy"), loss[:7][:, kept] + 1)
  np.testing.assert_array_equal(np.load(f"{dst}/keep.npy"), keep[:7][:, kept])
  assert config["shadow"]["num_models"] == 7 and config["partial_of"]["dropped_canaries"] == [2]
  with pytest.raises(InputError, match="exceeds the run's 8 models"):
    partial.write_partial_run(mid, str(tmp_path / "nine"), num_models=9)
