"""run_folder.atomic: file permissions of atomic writes, a Ctrl-C held until the file is in place, folders checked
before long work, files copied and removed by name."""

import os
import signal

import matplotlib.pyplot as plt
import numpy as np
import pytest

import run_folder
from run_folder import atomic
from run_folder.errors import InputError


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
    atomic._atomic(str(tmp_path / "a.bin"), write, "wb")
  assert os.listdir(tmp_path) == ["a.bin"] and (tmp_path / "a.bin").read_bytes() == b"complete"
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored

  def fail(f):
    raise OSError("disk full")

  with pytest.raises(OSError, match="disk full"):
    atomic._atomic(str(tmp_path / "b.bin"), fail, "wb")
  assert os.listdir(tmp_path) == ["a.bin"]


def test_strict_json_holds_no_nan():
  assert run_folder.standard_json({"a": float("nan"), "b": np.float32(1.5), "c": np.arange(2), "d": (np.inf,)}) == {
      "a": None, "b": 1.5, "c": [0, 1], "d": [None]}


def test_check_writable_refuses_a_folder_under_a_file(tmp_path):
  (tmp_path / "file").write_text("x")
  with pytest.raises(InputError, match="--out_dir"):
    run_folder.check_writable(str(tmp_path / "file" / "reports"), "choose another folder with --out_dir")
  run_folder.check_writable(str(tmp_path / "new" / "reports"))
  assert os.listdir(tmp_path / "new" / "reports") == []


def test_a_ctrl_c_during_check_writable_leaves_no_probe_file(tmp_path, monkeypatch):
  """A SIGINT that lands while the probe file exists raises KeyboardInterrupt once the probe is removed."""
  mkstemp = atomic.tempfile.mkstemp

  def mkstemp_then_ctrl_c(**kwargs):
    made = mkstemp(**kwargs)
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # Python runs a signal's handler between bytecodes: here, many times over
      sum(range(10))
    return made

  monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp_then_ctrl_c)
  with pytest.raises(KeyboardInterrupt):
    run_folder.check_writable(str(tmp_path / "reports"))
  assert os.listdir(tmp_path / "reports") == []
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_copy_file_copies_bytes(tmp_path):
  (tmp_path / "tokenizer.json").write_bytes(b'{"v": 1}\n')
  run_folder.copy_file(str(tmp_path / "tokenizer.json"), str(tmp_path / "out" / "tokenizer.json"))
  assert (tmp_path / "out" / "tokenizer.json").read_bytes() == b'{"v": 1}\n'


def test_remove_files_removes_the_named_files_that_exist(tmp_path):
  for name in ("a.npy", "b.npy", os.path.join("losses", "group_0000_population.npy")):
    run_folder.save_npy(str(tmp_path / name), np.zeros(1))
  removed = run_folder.remove_files(str(tmp_path), ["a.npy", "missing.npy",
                                                    os.path.join("losses", "group_0000_population.npy")])
  assert removed == [str(tmp_path / "a.npy"), str(tmp_path / "losses" / "group_0000_population.npy")]
  assert sorted(os.listdir(tmp_path)) == ["b.npy", "losses"] and os.listdir(tmp_path / "losses") == []
