"""experiments.compare_runs: each run's numbers are paper_table's on that run, and bad input is one line before any
work."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lira.errors import InputError
from lira.reports import compare_runs_report
from lira.reports import loo_report
from lira.reports import paper_table_report
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
  base = tmp_path_factory.mktemp("runs")
  dirs = []
  for i, shift in enumerate((0.5, 1.5)):
    d = str(base / f"run{i}")
    synthetic_run.write_synthetic_run(d, num_models=8, num_canaries=150, seq_len=6, shift=shift, seed=i)
    loo_report.evaluate_run(d, progress=False)  # results.json
    dirs.append(d)
  return dirs


def test_each_run_equals_its_paper_table(two_runs, tmp_path):
  paths = compare_runs_report.write(two_runs, str(tmp_path / "out"), labels=["weak", "strong"], n_boot=50, seed=3,
                                    setting="lstm_worst")
  assert [os.path.basename(p) for p in paths] == ["compare_runs.json", "compare_runs.md", "compare_runs.png"]
  with open(paths[0]) as f:
    report = json.loads(f.read(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON
  assert [r["label"] for r in report["runs"]] == ["weak", "strong"]
  for run, d in zip(report["runs"], two_runs):
    want = paper_table_report.build(d, n_boot=50, seed=3)
    assert run["rows"] == json.loads(json.dumps(want["rows"]))
    assert run["tests"] == json.loads(json.dumps(want["tests"]))
    assert run["run"] == "synthetic losses"
  # Table II's LSTM worst-case column: independent shared 98.75 / 95.00, univariate shared 95.82 / 88.25.
  assert report["paper_differences"]["independent-shared - univariate-shared"] == pytest.approx([2.93, 6.75])
  with open(paths[1]) as f:
    text = f.read()
  assert "| strong |" in text and "| Table II (lstm_worst) | +2.93 | +6.75 |" in text
  # 8 x 150 pairs hold 600 non-members, too few for 0.1% FPR: every TPR cell is n/r, never a number (as evaluate)
  tpr_rows = [line for line in text.splitlines() if line.startswith(("| weak |", "| strong |"))][:2]
  assert all(line.split(" | ")[3:] == ["n/r"] * 6 for line in (r.rstrip(" |") for r in tpr_rows)), tpr_rows
  # and so is every paired difference at those FPRs: n/r, not "+9.00 [4.50, 22.50] (n/r)"; the figure draws none
  diff_rows = [line for line in text.splitlines() if line.startswith(("| weak |", "| strong |"))][2:]
  assert diff_rows and all(line.rstrip(" |").split(" | ")[1:] == ["n/r"] * 4 for line in diff_rows), diff_rows
  fig = compare_runs_report.figure(report, "title")
  for ax in fig.axes[1:]:
    drawn = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert drawn and all(np.isnan(line.get_ydata()).all() for line in drawn)
    assert sum(t.get_text() == "n/r" for t in ax.texts) == 2 * 2  # each run, each difference


def test_a_dp_run_is_named_by_its_epsilon_and_a_lora_run_by_its_adapters():
  from lira.reports import provenance
  config = {"model": {"name": "lstm"}, "canaries": {"kind": "worst"}}
  assert provenance.run_words(config) == "lstm, worst-case canaries"
  assert provenance.run_words({**config, "accountant": {"epsilon": 4.0}}) == \
      "lstm, worst-case canaries, DP-SGD epsilon 4"
  lora = {**config, "model": {"name": "gpt2"}, "train": {"lora": {"rank": 8, "targets": "attention,mlp"}}}
  assert provenance.run_words(lora) == "gpt2, worst-case canaries, LoRA rank 8 on attention,mlp"
  assert provenance.run_words({**lora, "train": {"lora": {"rank": 0}}}) == "gpt2, worst-case canaries"


def test_errors_are_one_line_before_any_work(two_runs, tmp_path):
  with pytest.raises(InputError, match="--setting=bogus: must be one of none, "):
    compare_runs_report.write(two_runs, str(tmp_path / "x"), setting="bogus")
  assert not os.path.exists(tmp_path / "x")
  with pytest.raises(InputError, match="--labels has 1 names for 2 runs"):
    compare_runs_report.build(two_runs, labels=["a"])
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run([sys.executable, "-m", "experiments.compare_runs", f"--run_dirs={two_runs[0]},{tmp_path}",
                         f"--out_dir={tmp_path}/out"], capture_output=True, text=True, cwd=tmp_path, env=env)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f"error: {tmp_path}/results.json: not found (run python -m experiments.evaluate --run_dir={tmp_path} first)"]
  assert not os.path.exists(f"{tmp_path}/out")
