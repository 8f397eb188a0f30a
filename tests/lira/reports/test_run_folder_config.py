"""run_folder's readers of a run's config.json and group files, through which training/ reads a run folder."""

import os

import numpy as np
import pytest

from lira.errors import InputError, MissingFileError
from lira.reports import run_folder


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
  with pytest.raises(InputError, match="pickled objects"):
    run_folder.load_stacked(paths + [str(tmp_path / "bad.npy")])


def test_copy_file_copies_bytes(tmp_path):
  (tmp_path / "tokenizer.json").write_bytes(b'{"v": 1}\n')
  run_folder.copy_file(str(tmp_path / "tokenizer.json"), str(tmp_path / "out" / "tokenizer.json"))
  assert (tmp_path / "out" / "tokenizer.json").read_bytes() == b'{"v": 1}\n'
