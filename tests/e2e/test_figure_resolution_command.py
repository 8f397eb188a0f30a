"""Figures mark what the tables mark: commands run as a user runs them (subprocesses) on a run of 8 models and 12
canaries (48 negatives), with every figure they save recorded (legend texts and handle line styles) beside it.

The TPR at 0.1% FPR needs 1,000 negatives: the tables print `n/r`, and so must every ROC legend; length_grid's
unresolved no-reduction baseline is dotted, not solid."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTE = "n/r = not resolved: TPR@0.1% FPR needs >= 1,000 negatives; available 48"
# Runs a command's module as `python -m` would, with run_folder.save_figure also writing into $FIGURE_RECORD
# <png>.legend.json: [[legend text, line style of its handle], ...] over the figure's legends, and <png>.titles.json:
# the figure's suptitle ("" if none) then every axes' title.
RECORDER = """
import json, os, runpy, sys
import run_folder
save = run_folder.save_figure
def record(path, fig):
  save(path, fig)
  entries = [[t.get_text(), getattr(h, "get_linestyle", lambda: None)()]
             for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
             for t, h in zip(legend.get_texts(), legend.legend_handles)]
  stem = os.path.join(os.environ["FIGURE_RECORD"], os.path.basename(path))
  with open(stem + ".legend.json", "w") as f:
    json.dump(entries, f)
  with open(stem + ".titles.json", "w") as f:
    json.dump([fig.get_suptitle()] + [ax.get_title() for ax in fig.axes], f)
run_folder.save_figure = record
module = sys.argv.pop(1)
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def run(module, record_dir, *args):
  proc = subprocess.run([sys.executable, "-c", RECORDER, module, "--noprogress", *args], cwd=ROOT,
                        env={**os.environ, "PYTHONPATH": ROOT, "FIGURE_RECORD": str(record_dir)},
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def legend(record_dir, png):
  with open(record_dir / f"{png}.legend.json") as f:
    return [tuple(e) for e in json.load(f)]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
  run_dir = tmp_path_factory.mktemp("small_run")
  proc = subprocess.run([sys.executable, "-m", "experiments.make_synthetic", f"--run_dir={run_dir}", "--num_models=8",
                         "--num_canaries=12", "--seq_len=4", "--shift=3", "--seed=1"], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return run_dir


@pytest.mark.slow
def test_evaluate_with_attacks_prints_n_r_in_the_roc_legend_as_in_its_table(small_run, tmp_path):
  proc = run("experiments.evaluate", tmp_path, f"--run_dir={small_run}", f"--out_dir={tmp_path}", "--attacks=loss",
             "--n_boot=0")
  with open(tmp_path / "results_nboot-0_attacks-loss.json") as f:
    results = json.load(f)
  rows = results["variants"] + results["attacks"]
  assert {r["summary"]["n_neg"] for r in rows} == {48}
  assert not any(r["summary"]["tpr"]["0.001"]["resolved"] for r in rows)
  texts = [t for t, _ in legend(tmp_path, "roc_nboot-0_attacks-loss.png")]
  for r in rows:  # every curve: n/r, as the table prints it, never the TPR at FPR 0
    line = next(t for t in texts if t.startswith(r["name"] + ","))
    assert line.endswith("TPR@0.1% n/r"), line
  assert NOTE in texts and "n/r" in proc.stdout


@pytest.mark.slow
def test_score_targets_prints_n_r_in_the_roc_legend(small_run, tmp_path):
  run("experiments.score_targets", tmp_path, f"--run_dir={small_run}", f"--out_dir={tmp_path}", "--n_boot=0",
      f"--target={small_run / 'losses.npy'}", f"--target_keep={small_run / 'keep.npy'}", "--variants=oas-shared")
  texts = [t for t, _ in legend(tmp_path, "attack_roc_variants-oas-shared_nboot-0.png")]
  assert [t for t in texts if t.startswith("OAS Shared,")][0].endswith("TPR@0.1% n/r") and NOTE in texts


@pytest.mark.slow
def test_length_grid_draws_its_unresolved_baseline_dotted_and_says_so(small_run, tmp_path):
  run("experiments.length_grid", tmp_path, f"--run_dir={small_run}", f"--out_dir={tmp_path}", "--lengths=1,2",
      "--strategies=group", "--covariances=oas", "--n_boot=0", "--fpr=0.001")
  entries = dict(legend(tmp_path, "length_grid_lengths-1+2_strategies-group_covariances-oas_fpr-0.001_nboot-0.png"))
  assert entries["no reduction, OAS Shared (n/r)"] == ":"  # the table's n/r: not a solid line
  assert "hollow, dotted: not resolved (TPR@0.1% FPR needs >= 1,000 negatives; available 48)" in entries


@pytest.mark.slow
def test_shadow_sweep_says_why_its_points_are_hollow(small_run, tmp_path):
  run("experiments.shadow_sweep", tmp_path, f"--run_dir={small_run}", f"--out_dir={tmp_path}", "--counts=8",
      "--variants=oas-shared", "--fpr=0.001")
  # --counts=8 is the default at M = 8 (a subset of 4 cannot fit balanced counts), so the name leaves it out
  texts = [t.replace("\n", " ") for t, _ in legend(tmp_path, "shadow_sweep_variants-oas-shared_fpr-0.001.png")]
  assert "hollow: not resolved (TPR@0.1% FPR needs >= 1,000 negatives; available 48)" in texts
