"""The workers' file order (tests/file_order.py) against a brute-force ordering of the same ids."""

import json
import os
import stat

import file_order

IDS = ["tests/a.py::t1", "tests/b.py::t1", "tests/a.py::t2", "tests/c.py::t1[x]", "tests/d.py::K::t", "tests/b.py::t2"]


def test_longest_first_keeps_each_file_together_and_in_order():
  durations_s = {"tests/a.py": 1.0, "tests/b.py": 30.0, "tests/c.py": 1.0}  # d.py unknown: counts as longest
  order = [IDS[i] for i in file_order.longest_first(IDS, durations_s)]
  assert order == ["tests/d.py::K::t", "tests/b.py::t1", "tests/b.py::t2", "tests/a.py::t1", "tests/a.py::t2",
                   "tests/c.py::t1[x]"]


def test_longest_first_is_a_permutation_sorted_by_file_time():
  durations_s = {"tests/a.py": 5.0, "tests/b.py": 2.0, "tests/c.py": 9.0, "tests/d.py": 0.5}
  order = file_order.longest_first(IDS, durations_s)
  assert sorted(order) == list(range(len(IDS)))
  times = [durations_s[file_order.test_file(IDS[i])] for i in order]
  assert times == sorted(times, reverse=True)


def test_no_durations_keeps_the_collection_order():
  assert [IDS[i] for i in file_order.longest_first(IDS, {})] == [
      "tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/b.py::t2", "tests/c.py::t1[x]", "tests/d.py::K::t"]


def test_write_then_load_round_trips_with_a_plain_files_mode(tmp_path):
  path = str(tmp_path / "durations.json")
  file_order.write_durations({"tests/b.py": 2.04, "tests/a.py": 10.0}, path)
  assert json.load(open(path)) == {"tests/a.py": 10.0, "tests/b.py": 2.0}
  assert file_order.load_durations(path) == {"tests/a.py": 10.0, "tests/b.py": 2.0}
  umask = os.umask(0)
  os.umask(umask)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
  assert os.listdir(tmp_path) == ["durations.json"]
  assert file_order.load_durations(str(tmp_path / "missing.json")) == {}
