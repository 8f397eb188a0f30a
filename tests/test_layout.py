"""The house's rules, read from the source: which package may import which, no import circles, unique module names."""

import ast
import collections
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("run_folder", "lira", "models", "training", "attacks", "experiments")


def modules():
  """{dotted module name: path} of every module of the six packages."""
  out = {}
  for package in PACKAGES:
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
      for name in files:
        if name.endswith(".py"):
          rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
          out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(folder, name)
  return out


def imports(path, top_level_only=False):
  """Dotted names a module imports (absolute imports; `from a import b` gives a.b and a)."""
  tree = ast.parse(open(path).read())
  nodes = tree.body if top_level_only else ast.walk(tree)
  names = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names.add(node.module)
      names.update(f"{node.module}.{alias.name}" for alias in node.names)
  return names


def run_folder_imports(path):
  """The modules of run_folder a module imports by name: `import run_folder` gives run_folder, `from run_folder
  import names` and `from run_folder.names import X` give run_folder.names."""
  used = set()
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.Import):
      used.update(a.name for a in node.names if a.name.split(".")[0] == "run_folder")
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "run_folder":
      used.update(f"run_folder.{a.name}" for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("run_folder."):
      used.add(node.module)
  return used


def test_the_statistics_of_lira_touch_no_files_and_draw_nothing():
  for name, path in modules().items():
    if name.startswith("lira.") and not name.startswith("lira.reports"):
      bad = {i for i in imports(path) if i.split(".")[0] == "matplotlib" or i.startswith("lira.reports")}
      assert not bad, f"{name} imports {sorted(bad)}: files, reports and plots belong in lira/reports"
      # The errors come through lira.errors; the names of files (constants, for messages) are no file IO.
      allowed = {"run_folder.names"} | ({"run_folder.errors"} if name == "lira.errors" else set())
      io = run_folder_imports(path) - allowed
      assert not io, f"{name} imports {sorted(io)}: files are read and written in lira/reports, through run_folder"
      source = open(path).read()
      for call in ("open(", "np.save(", "np.load(", "json.dump(", "json.load("):
        assert call not in source, f"{name} calls {call}: files belong in run_folder/ (read through lira/reports)"


def test_lower_packages_do_not_import_higher_ones():
  allowed = {"run_folder": {"run_folder"}, "lira": {"lira"}, "attacks": {"attacks", "lira"},
             "models": {"models", "lira"}, "training": {"training", "models", "lira", "attacks"},
             "experiments": set(PACKAGES)}
  for name, path in modules().items():
    package = name.split(".")[0]
    used = {i.split(".")[0] for i in imports(path)} & set(PACKAGES)
    allowed_here = allowed[package] | {"run_folder"}  # the bottom: every package may import it
    assert used <= allowed_here, f"{name} imports {sorted(used - allowed_here)}"


def test_the_run_folder_imports_nothing_of_the_project():
  project = set(PACKAGES) | {"tests", "benchmarks"}
  for name, path in modules().items():
    if name.split(".")[0] == "run_folder":
      used = {i.split(".")[0] for i in imports(path)} & project - {"run_folder"}
      assert not used, f"{name} imports {sorted(used)}: run_folder is the bottom of the house (stdlib and numpy only)"


def file_names():
  """Every file name run_folder/names.py spells (losses.npy, features.json, model.safetensors, ...)."""
  tree = ast.parse(open(os.path.join(ROOT, "run_folder", "names.py")).read())
  return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
          and re.fullmatch(r"[a-z_]+(\.[a-z]+)+", node.value)}


def test_file_names_are_spelled_only_in_run_folder_names():
  known = file_names()
  assert {"losses.npy", "keep.npy", "config.json", "tokenizer.json", "features.json"} <= known
  found = []
  for name, path in modules().items():
    if name.split(".")[0] == "run_folder":
      continue
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.Constant) and node.value in known:
        found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.value!r}")
  assert not found, ("file names belong in run_folder/names.py (use its constants or path helpers): "
                     + "; ".join(found))


def test_nothing_imports_experiments_but_experiments():
  for name, path in modules().items():
    if not name.startswith("experiments"):
      assert not any(i.split(".")[0] == "experiments" for i in imports(path)), name


def test_no_import_circles():
  mods = modules()
  graph = collections.defaultdict(set)
  for name, path in mods.items():
    for target in imports(path):
      while target and target not in mods:  # `from lira import loo` names lira.loo; `import a.b.c` may name a.b
        target = target.rpartition(".")[0]
      if target and target != name and not name.startswith(target + "."):  # a package importing its own parent
        graph[name].add(target)
  state = {}

  def visit(node, stack):
    state[node] = "open"
    for nxt in graph[node]:
      if state.get(nxt) == "open":
        cycle = stack[stack.index(nxt):] + [nxt]
        raise AssertionError("import circle: " + " -> ".join(cycle))
      if nxt not in state:
        visit(nxt, stack + [nxt])
    state[node] = "done"

  for node in sorted(mods):
    if node not in state:
      visit(node, [node])


def test_no_two_modules_share_a_name():
  by_base = collections.defaultdict(list)
  for name in modules():
    if name.startswith("experiments.configs."):  # config files, chosen by path, are named after what they configure
      continue
    base = name.rpartition(".")[2]
    if base not in PACKAGES and name.rpartition(".")[0]:  # package __init__ files are named by their folder
      by_base[base].append(name)
  by_base["errors"] = [n for n in by_base["errors"] if n != "lira.errors"]  # re-exports run_folder.errors
  shared = {b: n for b, n in by_base.items() if len(n) > 1 and b not in ("__init__",)}
  assert not shared, f"modules sharing a name: {shared}"


# A header that marks a file as another project's: its ownership notice ("(c) 2024 Some Authors") or licence grant, in
# a file's first lines. The phrases are assembled from their words, so that this file, which names them, carries none.
_PHRASES = [("licensed", "under", "the"), ("permission", "is", "hereby", "granted"), ("all", "rights", "reserved"),
            ("spdx", "license", "identifier")]
FOREIGN_HEADER = re.compile("|".join([r"copy" + r"right\s*(\(c\)|\u00a9|\d{4})"]
                                     + [r"[\s-]+".join(words) for words in _PHRASES]), re.IGNORECASE)
SOURCE_SUFFIXES = (".py", ".sh", ".pyx", ".c", ".cc", ".cpp", ".h", ".cu", ".js", ".ts")
HEADER_LINES = 40


def foreign_header(text):
  """The first line among a file's first HEADER_LINES that carries an ownership notice or licence header, or None."""
  for line in text.splitlines()[:HEADER_LINES]:
    if FOREIGN_HEADER.search(line):
      return line.strip()
  return None


def source_files():
  """Every source file of the repository (hidden folders, virtual environments and run outputs left out)."""
  skip = {"runs", "build", "dist", "node_modules", "__pycache__"}
  for folder, dirs, files in os.walk(ROOT):
    dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skip and not d.endswith(".egg-info")
               and not os.path.exists(os.path.join(folder, d, "pyvenv.cfg"))]
    for name in files:
      if name.endswith(SOURCE_SUFFIXES):
        yield os.path.join(folder, name)


def test_no_file_carries_another_projects_licence_header():
  # Every line of the project is written by its authors: a file copied from another project (its ownership notice or
  # licence header kept, as licences require) fails here. The detector itself, on such headers (made up here from
  # their words) and on ours:
  mark = "Copy" + "right"
  assert foreign_header(f"# {mark} (c) 2023 Some Authors\nx = 1") is not None
  assert foreign_header(f"# {mark} 2024 Some Company.\n") is not None
  for words in _PHRASES:
    assert foreign_header('"""Module."""\n# ' + " ".join(words).capitalize() + " ...") is not None
  assert foreign_header('"""Leave-one-out LiRA scores; the licence of the data is the user\'s."""') is None
  found = {os.path.relpath(path, ROOT): line for path in source_files()
           if (line := foreign_header(open(path, errors="replace").read()))}
  assert not found, f"files with another project's ownership notice or licence header: {found}"
