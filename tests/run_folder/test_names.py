"""run_folder.names: the paths of a shadow run's groups, and every file name spelled once."""

import ast
import os

import run_folder
from run_folder import names


def test_group_paths_and_the_files_beside_a_group():
  checkpoint, losses = run_folder.group_paths("run", 7)
  assert checkpoint == os.path.abspath(os.path.join("run", "checkpoints", "group_0007"))
  assert losses == os.path.join("run", "losses", "group_0007.npy") == os.path.join("run", names.group_losses_file(7))
  assert run_folder.stat_path(losses, "mu") == os.path.join("run", "losses", "group_0007_mu.npy")
  assert run_folder.population_group_path(losses) == os.path.join("run", "losses", "group_0007_population.npy")
  assert [names.group_index(n) for n in ("group_0007.npy", "group_0007_mu.npy", "group_x.npy", "keep.npy")] == [
      7, None, None, None]
  assert names.config_path("run") == os.path.join("run", "config.json")


def test_groups_split_the_models_among_processes():
  assert run_folder.groups(5, 2) == [(0, [0, 1]), (1, [2, 3]), (2, [4])]
  assert run_folder.groups(5, 2, process_id=1, num_processes=2) == [(1, [2, 3])]


def test_each_file_name_is_spelled_once():
  """A name is one constant (others refer to it), so two constants never drift apart."""
  path = os.path.join(os.path.dirname(names.__file__), "names.py")
  spelled = [node.value for node in ast.walk(ast.parse(open(path).read()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value
             and " " not in node.value and not node.value.startswith(".")]
  assert len(spelled) == len(set(spelled)), sorted(n for n in spelled if spelled.count(n) > 1)
