"""lira.reports.run_folder: file permissions of atomic writes, damaged arrays named, runs never silently replaced."""

import os
import signal

import matplotlib.pyplot as plt
import numpy as np
import pytest

from lira.reports import run_folder
from lira.errors import InputError


@pytest.fixture
def umask():
  """Set the process umask for one test and restore it afterwards."""
  old = os.umask(0o022)
  os.umask(old)
  yield lambda mask: os.umask(mask)
  os.umask(old)


def _mode(path):
  return os.stat(path).st_mode & 0o777


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_atomic_writes_get_the_permissions_of_a_plain_write(tmp_path, umask, mask):
  umask(mask)
  plain = tmp_path / "plain.txt"
  plain.write_text("x")  # what open() gives under this umask
  fig = plt.figure()
  writers = {"a.npy": lambda p: run_folder.save_npy(p, np.zeros(3)), "b.json": lambda p: run_folder.save_json(p, {"a": 1}),
             "c.txt": lambda p: run_folder.save_text(p, "x"), "d.png": lambda p: run_folder.save_figure(p, fig),
             "e.csv": lambda p: run_folder.save_csv(p, [{"a": 1}])}
  for name, write in writers.items():
    write(str(tmp_path / name))
    assert _mode(tmp_path / name) == _mode(plain) == 0o666 & ~mask, name
  plt.close(fig)
  assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_ctrl_c_during_a_write_arrives_once_the_file_is_in_place(tmp_path):
  """A SIGINT in the middle of a write raises KeyboardInterrupt only after the rename: no torn file, no .tmp left."""
  def write(f):
    os.kill(os.getpid(), signal.SIGINT)
    f.write(b"complete")

  with pytest.raises(KeyboardInterrupt):
    run_folder.save_bytes(str(tmp_path / "a.bin"), b"")  # warm-up: nothing held
    run_folder._atomic(str(tmp_path / "a.bin"), write, "wb")
  assert os.listdir(tmp_path) == ["a.bin"] and (tmp_path / "a.bin").read_bytes() == b"complete"
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored

  def fail(f):
    raise OSError("disk full")

  with pytest.raises(OSError, match="disk full"):
    run_folder._atomic(str(tmp_path / "b.bin"), fail, "wb")
  assert os.listdir(tmp_path) == ["a.bin"]


@pytest.mark.parametrize("cut", [50, 200])
@pytest.mark.parametrize("mmap", [False, True])
def test_truncated_losses_file_is_named(tmp_path, cut, mmap):
  run_folder.write_synthetic_run(str(tmp_path), num_models=6, num_canaries=20, seq_len=4)
  path = tmp_path / "losses.npy"
  path.write_bytes(path.read_bytes()[:cut])
  with pytest.raises(InputError, match=r"losses\.npy: cannot be read"):
    run_folder.load_run(str(tmp_path), mmap=mmap)


def test_pickled_array_is_refused_with_its_name(tmp_path):
  run_folder.write_synthetic_run(str(tmp_path), num_models=6, num_canaries=20, seq_len=4)
  np.save(tmp_path / "keep.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
  with pytest.raises(InputError, match=r"keep\.npy: holds pickled objects, .*without pickle"):
    run_folder.load_run(str(tmp_path))


def test_synthetic_run_refuses_to_replace_a_run(tmp_path):
  run_folder.write_synthetic_run(str(tmp_path), num_models=6, num_canaries=20, seq_len=4, ragged=True)
  before = {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)}
  with pytest.raises(InputError, match="already holds a run .*--overwrite"):
    run_folder.write_synthetic_run(str(tmp_path), num_models=8, num_canaries=20, seq_len=4)
  assert {f: os.stat(tmp_path / f).st_mtime_ns for f in os.listdir(tmp_path)} == before
  run_folder.write_synthetic_run(str(tmp_path), overwrite=True, num_models=8, num_canaries=20, seq_len=4)
  run = run_folder.load_run(str(tmp_path))
  assert run.loss_MxNxT.shape == (8, 20, 4) and run.mask_NxT is None  # the old ragged run's mask is gone


def test_check_writable_refuses_a_folder_under_a_file(tmp_path):
  (tmp_path / "file").write_text("x")
  with pytest.raises(InputError, match="--out_dir"):
    run_folder.check_writable(str(tmp_path / "file" / "reports"), "choose another folder with --out_dir")
  run_folder.check_writable(str(tmp_path / "new" / "reports"))
  assert os.listdir(tmp_path / "new" / "reports") == []


def test_an_unfinished_shadow_run_is_refused_with_how_to_go_on(tmp_path):
  run = tmp_path / "run"
  run_folder.save_config(str(run), {"shadow": {"num_models": 8, "group_size": 2}})
  run_folder.save_npy(str(run / "keep.npy"), np.ones((8, 3), bool))
  for g in (0, 1):  # two of four groups done, losses.npy not assembled
    run_folder.save_npy(run_folder.group_paths(str(run), g)[1], np.ones((2, 3, 4), np.float32))
  assert run_folder.finished_groups(str(run)) == [0, 1]
  with pytest.raises(InputError, match=r"unfinished shadow run: it has no losses\.npy.*groups done: 2 of 4.*resume "
                                       r"it with the same train_shadows command.*experiments\.partial_run"):
    run_folder.load_run(str(run))
  run_folder.save_npy(str(run / "losses.npy"), np.ones((8, 3, 4), np.float32))  # assembled: a run like any other
  assert run_folder.load_run(str(run)).loss_MxNxT.shape == (8, 3, 4)

