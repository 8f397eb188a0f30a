"""The docs' flag tables agree with the code: every command's table lists exactly the flags the command defines, and
every default it states as a value (a number, true / false, none, a word or a list) is the flag's default. The README's
command table names every command."""

import concurrent.futures
import os
import re

import pytest

from test_command_conventions import COMMANDS, defined_flags
from test_flag_defaults import flag_defaults

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs")

# (page, heading) -> the command whose flags the first "| flag | default | meaning |" table under the heading lists
TABLES = {
    ("statistics.md", "## `evaluate`: the leave-one-out table"): "evaluate",
    ("analyses.md", "## `covariance_error`"): "covariance_error",
    ("analyses.md", "## `length_grid`"): "length_grid",
    ("analyses.md", "## `shadow_sweep`"): "shadow_sweep",
    ("analyses.md", "## `paper_table`"): "paper_table",
    ("analyses.md", "## `cov_structure`"): "cov_structure",
    ("analyses.md", "## `membership_structure`"): "membership_structure",
    ("analyses.md", "## `compare_runs`"): "compare_runs",
    ("analyses.md", "## `false_positives`"): "false_positives",
    ("rmia.md", "## `token_map`: which tokens carry the leakage"): "token_map",
    ("auditing.md", "## Flags"): "score_targets",
    ("per_sample.md", "## Flags"): "per_sample",
    ("dp_audit.md", "## `audit`: epsilon lower bounds of runs"): "audit",
    ("images.md", "## Pictures of an image run: `image_maps`"): "image_maps",
    ("own_losses.md", "## From GPT-NeoX (Pythia) checkpoints: `extract_tokens --run_arrays`"): "extract_tokens",
    ("pretraining_attacks.md", "## `extract_features`: the features folder"): "extract_features",
    ("pretraining_attacks.md", "## `pretrain_attacks`: the attacks on a features folder"): "pretrain_attacks",
    ("pretraining_attacks.md", "## The offline benchmark"): "pretrain_benchmark",
    ("shadow_models.md", "## Flags"): "train_shadows",
    ("shadow_models.md", "## Partial runs"): "partial_run",
    ("shadow_models.md", "## Synthetic runs"): "make_synthetic",
    ("shadow_models.md", "## RMIA's population"): "population_losses",
}
FLAG = re.compile(r"`--(?:\[no\])?([a-z][a-z0-9_]*)[`=]")


def table_rows(page, heading):
  """[(flags named in the row, default cell)] of the flag table under `heading` on `page`."""
  with open(os.path.join(DOCS, page)) as f:
    text = f.read()
  assert heading + "\n" in text, (page, heading)
  section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
  assert "| flag | default | meaning |" in section, (page, heading)
  table = section.split("| flag | default | meaning |", 1)[1].split("\n\n", 1)[0]
  rows = []
  for line in table.strip().splitlines()[1:]:
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
    named = FLAG.findall(cells[0] + "`") if cells[0] != "scoring flags" else FLAG.findall(cells[2])
    rows.append((named, cells[1]))
  return rows


@pytest.fixture(scope="module")
def defaults():
  commands = sorted(set(TABLES.values()))
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return dict(zip(commands, pool.map(flag_defaults, commands)))


def as_value(cell):
  """The value a default cell states, or None when it describes the default in words ("(required)", "all six")."""
  cell = cell.strip("`")
  if cell in ("none", "all"):  # no value: the flag's default is None (or empty)
    return "none"
  if cell == "empty":
    return ""
  if cell in ("true", "false"):
    return cell == "true"
  if re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?", cell):
    return float(cell)
  if re.fullmatch(r"[a-z0-9_.:/-]+(,[a-z0-9_.:/-]+)*", cell):
    return cell
  return None


def same(value, default):
  if value == "none":
    return default in (None, [], "", "none")
  if isinstance(value, bool):
    return default is value
  if isinstance(value, float):
    return isinstance(default, (int, float)) and not isinstance(default, bool) and float(default) == value
  if isinstance(default, list):
    return ",".join(map(str, default)) == value
  return str(default) == value


def test_every_command_has_a_table_and_a_readme_row():
  assert set(TABLES.values()) == set(COMMANDS)
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  for command in COMMANDS:
    assert f"| `{command}` |" in readme, command


@pytest.mark.slow
@pytest.mark.parametrize("page,heading", sorted(TABLES))
def test_flag_table_lists_the_command_flags_with_their_defaults(defaults, page, heading):
  command = TABLES[page, heading]
  rows = table_rows(page, heading)
  documented = {name for named, _ in rows for name in named}
  own = defined_flags(command) | {"progress"}
  assert documented - set(defaults[command]) == set(), f"{page}: flags {command} does not have"
  assert own - documented == set(), f"{page}: flags of {command} the table leaves out"
  for named, cell in rows:
    cells = [c.strip() for c in cell.split(", ")] if len(named) > 1 else [cell]
    if len(cells) != len(named):
      continue
    for name, text in zip(named, cells):
      value = as_value(text)
      if value is not None:
        assert same(value, defaults[command][name]), (page, name, text, defaults[command][name])
