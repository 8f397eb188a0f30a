"""The order in which the two pytest-xdist workers take test files: longest first, by the per-file times in
tests/file_durations.json (a file it does not list counts as longest), so that no long file starts last and runs
alone at the end. `python -m pytest -q --record-file-durations` rewrites the JSON from the run it ends."""

import json
import math
import os

DURATIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_durations.json")


def test_file(nodeid):
  """The file of a test id ('tests/e2e/test_x.py::test_y[a]' -> 'tests/e2e/test_x.py')."""
  return nodeid.split("::", 1)[0]


def load_durations(path=DURATIONS_PATH):
  """{test file: seconds} from path; {} when it does not exist."""
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return {str(k): float(v) for k, v in json.load(f).items()}


def longest_first(nodeids, durations_s):
  """Indices that order nodeids by their file's time, longest first; a file's tests stay together and in order,
  files of equal time keep their collection order, and a file missing from durations_s comes first."""
  first_seen = {}
  for nodeid in nodeids:
    first_seen.setdefault(test_file(nodeid), len(first_seen))

  def key(i):
    name = test_file(nodeids[i])
    return (-durations_s.get(name, math.inf), first_seen[name], i)

  return sorted(range(len(nodeids)), key=key)


def write_durations(durations_s, path=DURATIONS_PATH):
  """Write {test file: seconds} (rounded to 0.1 s, sorted by name) to path atomically (run_folder)."""
  import run_folder
  data = {name: round(seconds, 1) for name, seconds in sorted(durations_s.items())}
  run_folder.save_text(path, json.dumps(data, indent=1) + "\n")
