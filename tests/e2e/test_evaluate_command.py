"""evaluate, length_grid and shadow_sweep as a user runs them (subprocesses) on a synthetic run: each writes the files
its settings name, and prints their paths."""

import os

import pytest

from lira import scoring as scoring_lib
from test_evaluation import run_dir  # noqa: F401  (a fixture: a synthetic run of 8 models, 150 canaries, 6 positions)


@pytest.mark.slow
@pytest.mark.parametrize("module,outputs", [
    ("experiments.evaluate", ["results.json", "results.md", "roc.png"]
     + [f"scores_{scoring_lib.variant_key(v)}.npy" for v in scoring_lib.VARIANTS]),
    ("experiments.length_grid", ["length_grid_lengths-1+2.json", "length_grid_lengths-1+2.csv",
                                 "length_grid_lengths-1+2.png"]),
    ("experiments.shadow_sweep", ["shadow_sweep_counts-6+8_draws-1_variants-oas-shared.json",
                                  "shadow_sweep_counts-6+8_draws-1_variants-oas-shared.csv",
                                  "shadow_sweep_counts-6+8_draws-1_variants-oas-shared.png"]),
])
def test_command_line_entry_points(run_dir, tmp_path, module, outputs):
  import subprocess
  import sys
  extra = {"experiments.evaluate": ["--n_boot=200"], "experiments.length_grid": ["--lengths=1,2"],
           "experiments.shadow_sweep": ["--counts=6,8", "--draws=1", "--variants=oas-shared"]}[module]
  proc = subprocess.run([sys.executable, "-m", module, f"--run_dir={run_dir}", f"--out_dir={tmp_path}",
                         "--noprogress"] + extra, capture_output=True, text=True,
                        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert proc.returncode == 0, proc.stderr[-2000:]
  # shadow_sweep also keeps each subset's rows for a rerun (docs/analyses.md)
  kept = ["shadow_sweep_cells_variants-oas-shared"] if module == "experiments.shadow_sweep" else []
  assert sorted(os.listdir(tmp_path)) == sorted(outputs + kept)
  assert all(str(tmp_path / name) in proc.stdout for name in outputs)  # every command prints what it wrote
