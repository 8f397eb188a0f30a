"""run_folder.runs: a run folder's files read and checked (damaged arrays named, unfinished runs refused, config.json
and group files), a run folder written (stale files removed, never a run silently replaced)."""

import os

import numpy as np
import pytest

import run_folder
from run_folder import names
from run_folder.errors import InputError, MissingFileError


def _run(path, M=6, N=20, T=4, mask=False):
  """A run folder of ones (losses [M, N, T], keep with every canary IN for half the models), optionally masked."""
  keep = np.zeros((M, N), bool)
  keep[: M // 2] = True
  arrays = {names.LOSSES: np.ones((M, N, T), np.float32), names.KEEP: keep,
            names.MASK: np.ones((N, T), bool) if mask else None}
  return run_folder.save_run(str(path), arrays, {"source": "test"})


@pytest.mark.parametrize("cut", [50, 200])
@pytest.mark.parametrize("mmap", [False, True])
def test_truncated_losses_file_is_named(tmp_path, cut, mmap):
  _run(tmp_path)
  path = tmp_path / "losses.npy"
  path.write_bytes(path.read_bytes()[:cut])
  words = r"has a damaged \.npy header" if cut < 128 else r"is truncated: its header announces \[6, 20, 4\] float32"
  with pytest.raises(InputError, match=r"losses\.npy: " + words):
    run_folder.load_run(str(tmp_path), mmap=mmap)


@pytest.mark.parametrize("mmap", [False, True])
def test_pickled_array_is_refused_with_its_name(tmp_path, mmap):
  _run(tmp_path)
  np.save(tmp_path / "keep.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
  with pytest.raises(InputError, match=r"keep\.npy: holds Python objects \(dtype object\), which seqlira never "
                                       r"loads \(that needs pickle\)"):
    run_folder.load_run(str(tmp_path), mmap=mmap)


@pytest.mark.parametrize("mmap", [False, True])
def test_a_file_that_is_not_npy_is_called_so_not_pickled(tmp_path, mmap):
  """numpy reads a file without the .npy header as a pickle and says so; the message says what it is."""
  _run(tmp_path)
  (tmp_path / "losses.npy").write_bytes(np.random.default_rng(0).bytes(2000))
  with pytest.raises(InputError, match=r"losses\.npy: is not an \.npy file \(its 2000 bytes do not start with the "
                                       r"\.npy header\)"):
    run_folder.load_run(str(tmp_path), mmap=mmap)


def test_save_run_writes_losses_last_and_removes_the_files_of_none(tmp_path):
  written = _run(tmp_path, mask=True)
  assert [os.path.basename(p) for p in written] == ["keep.npy", "mask.npy", "config.json", "losses.npy"]
  run = run_folder.load_run(str(tmp_path))
  assert run.loss_MxNxT.shape == (6, 20, 4) and run.mask_NxT.shape == (20, 4) and run.config == {"source": "test"}
  with pytest.raises(InputError, match="already holds a run .*--overwrite"):
    run_folder.check_no_run(str(tmp_path))
  _run(tmp_path, M=8)  # replaced: the old run's mask would apply to the new losses
  run = run_folder.load_run(str(tmp_path))
  assert run.loss_MxNxT.shape == (8, 20, 4) and run.mask_NxT is None
  with pytest.raises(ValueError, match="losses.npy"):
    run_folder.save_run(str(tmp_path), {names.KEEP: np.ones((2, 2), bool)}, {})


def test_config_round_trips_and_each_refusal_is_one_line_naming_the_file(tmp_path):
  path = os.path.join(tmp_path, "config.json")
  with pytest.raises(MissingFileError, match=rf"^{path} does not exist: not a shadow run folder$"):
    run_folder.load_config(str(tmp_path), "not a shadow run folder")
  run_folder.save_config(str(tmp_path), {"shadow": {"num_models": 4}, "x": float("nan")})
  assert run_folder.load_config(str(tmp_path)) == {"shadow": {"num_models": 4}, "x": None}
  (tmp_path / "config.json").write_text("{not json")
  with pytest.raises(InputError, match=rf"^{path}: not valid JSON \(") as e:
    run_folder.load_config(str(tmp_path))
  assert len(str(e.value).splitlines()) == 1
  (tmp_path / "config.json").write_text("[1, 2]")
  with pytest.raises(InputError, match=rf"^{path}: expected a JSON object .*got list$"):
    run_folder.load_config(str(tmp_path))


def test_group_files_stack_on_the_model_axis_and_pickles_are_refused(tmp_path):
  a, b = np.arange(6.0).reshape(1, 2, 3), np.arange(12.0).reshape(2, 2, 3)
  paths = [str(tmp_path / "g0.npy"), str(tmp_path / "g1.npy")]
  for p, x in zip(paths, (a, b)):
    run_folder.save_npy(p, x)
  np.testing.assert_array_equal(run_folder.load_stacked(paths), np.concatenate([a, b]))
  np.save(tmp_path / "bad.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
  with pytest.raises(InputError, match="holds Python objects"):
    run_folder.load_stacked(paths + [str(tmp_path / "bad.npy")])


def test_an_unfinished_shadow_run_is_refused_with_how_to_go_on(tmp_path):
  run = tmp_path / "run"
  run_folder.save_config(str(run), {"shadow": {"num_models": 8, "group_size": 2}})
  run_folder.save_npy(str(run / "keep.npy"), np.ones((8, 3), bool))
  for g in (0, 1):  # two of four groups done, losses.npy not assembled
    losses_path = run_folder.group_paths(str(run), g)[1]
    run_folder.save_npy(losses_path, np.ones((2, 3, 4), np.float32))
    run_folder.save_npy(run_folder.stat_path(losses_path, "mu"), np.ones((2, 3, 4), np.float32))  # not a group
  assert run_folder.finished_groups(str(run)) == [0, 1]
  with pytest.raises(InputError, match=r"unfinished shadow run: it has no losses\.npy.*groups done: 2 of 4.*resume "
                                       r"it with the same train_shadows command.*experiments\.partial_run"):
    run_folder.load_run(str(run))
  run_folder.save_npy(str(run / "losses.npy"), np.ones((8, 3, 4), np.float32))  # assembled: a run like any other
  assert run_folder.load_run(str(run)).loss_MxNxT.shape == (8, 3, 4)


def test_a_population_is_checked_against_the_losses_and_its_mask(tmp_path):
  _run(tmp_path)
  with pytest.raises(MissingFileError, match=r"population_losses.npy does not exist: make it with python -m "
                                             r"experiments.population_losses"):
    run_folder.load_population(str(tmp_path))
  run_folder.save_npy(str(tmp_path / "population_losses.npy"), np.full((6, 5, 4), np.nan, np.float32))
  population, mask = run_folder.load_population(str(tmp_path), mmap=True)  # values are lira's to check
  assert population.shape == (6, 5, 4) and mask is None
  run_folder.save_npy(str(tmp_path / "population_mask.npy"), np.ones((5, 3), bool))
  with pytest.raises(InputError, match=r"population_mask.npy: expected bool \[Z, T\] = \(5, 4\)"):
    run_folder.load_population(str(tmp_path))


def test_run_fingerprint_is_the_sha256_of_the_losses_keep_and_mask_files(tmp_path):
  import hashlib
  for masked in (False, True):
    folder = tmp_path / f"run_masked_{masked}"
    _run(folder, mask=masked)
    files = [names.LOSSES, names.KEEP] + ([names.MASK] if masked else [])
    want = hashlib.sha256(b"".join((folder / name).read_bytes() for name in files)).hexdigest()[:16]
    assert run_folder.run_fingerprint(str(folder)) == want
  # one flipped membership is another fingerprint
  keep = np.load(folder / names.KEEP)
  keep[0, 0] = not keep[0, 0]
  np.save(folder / names.KEEP, keep)
  assert run_folder.run_fingerprint(str(folder)) != want
