"""The house's rules, read from the source: which package may import which, no import circles, unique module names."""

import ast
import collections
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("lira", "models", "training", "attacks", "experiments")


def modules():
  """{dotted module name: path} of every module of the five packages."""
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


def test_the_statistics_of_lira_touch_no_files_and_draw_nothing():
  for name, path in modules().items():
    if name.startswith("lira.") and not name.startswith("lira.reports"):
      bad = {i for i in imports(path) if i.split(".")[0] == "matplotlib" or i.startswith("lira.reports")}
      assert not bad, f"{name} imports {sorted(bad)}: files, reports and plots belong in lira/reports"
      source = open(path).read()
      for call in ("open(", "np.save(", "np.load(", "json.dump(", "json.load("):
        assert call not in source, f"{name} calls {call}: files belong in lira/reports/run_folder.py"


def test_lower_packages_do_not_import_higher_ones():
  allowed = {"lira": {"lira"}, "attacks": {"attacks", "lira"}, "models": {"models", "lira"},
             "training": {"training", "models", "lira", "attacks"},
             "experiments": set(PACKAGES)}
  for name, path in modules().items():
    package = name.split(".")[0]
    used = {i.split(".")[0] for i in imports(path)} & set(PACKAGES)
    assert used <= allowed[package], f"{name} imports {sorted(used - allowed[package])}"


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
  shared = {b: n for b, n in by_base.items() if len(n) > 1 and b not in ("__init__",)}
  assert not shared, f"modules sharing a name: {shared}"
