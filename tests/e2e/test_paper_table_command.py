"""experiments.paper_table as a user runs it (subprocesses): tables of two reports of one run sit beside each other,
named by the settings of the report they read and by their own non-default settings; the default keeps its name."""

import json
import os
import subprocess
import sys

import pytest

from lira.reports import loo_report
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def paper_table(run_dir, *args):
  proc = subprocess.run([sys.executable, "-m", "experiments.paper_table", f"--run_dir={run_dir}", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc


@pytest.mark.slow
def test_two_results_files_give_two_tables(tmp_path):
  run_dir = tmp_path / "run"
  synthetic_run.write_synthetic_run(str(run_dir), num_models=8, num_canaries=60, seq_len=4, seed=3, shift=1.5)
  loo_report.evaluate_run(str(run_dir), n_boot=50, progress=False)  # results_nboot-50.json
  loo_report.evaluate_run(str(run_dir), n_boot=50, statistic="loss", progress=False)
  before = set(os.listdir(run_dir))
  out = tmp_path / "out"
  first = paper_table(run_dir, f"--out_dir={out}", "--results=results_nboot-50.json", "--n_boot=20")
  second = paper_table(run_dir, f"--out_dir={out}", "--results=results_statistic-loss_nboot-50.json", "--n_boot=20")
  stems = ["paper_table_none_nboot-50_pairednboot-20", "paper_table_none_statistic-loss_nboot-50_pairednboot-20"]
  assert sorted(os.listdir(out)) == sorted(f"{s}.{e}" for s in stems for e in ("json", "md"))
  for proc, stem, results in zip((first, second), stems, ("results_nboot-50.json",
                                                          "results_statistic-loss_nboot-50.json")):
    assert str(out / f"{stem}.md") in proc.stdout and str(out / f"{stem}.json") in proc.stdout
    with open(out / f"{stem}.json") as f:
      table = json.load(f)
    assert (table["results"], table["n_boot"], table["seed"]) == (results, 20, 0)
    with open(out / f"{stem}.md") as f:
      assert f"report `{results}`" in f.read()
  # The defaults (results.json, --n_boot=1000, --seed=0) keep the plain name, in the run folder.
  loo_report.evaluate_run(str(run_dir), progress=False)  # results.json
  paper_table(run_dir, "--setting=lstm_worst", "--n_boot=1000")
  added = set(os.listdir(run_dir)) - before
  assert {"paper_table_lstm_worst.json", "paper_table_lstm_worst.md"} <= added
  assert not any(n.startswith("paper_table_") and "lstm_worst." not in n for n in added)
