"""Reports of evaluate, shadow_sweep and length_grid as a user runs them (subprocesses): named by their settings, strict
JSON with the settings, scores equal to leave_one_out's, and one-line errors."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest

import lira
import run_folder
from lira import scoring as scoring_lib
from test_reports import run_dir, strict_load  # noqa: F401  (run_dir: a fixture, a synthetic run of 8 models)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(module, *args):
  proc = subprocess.run([sys.executable, "-m", module, "--noprogress", *args], capture_output=True, text=True,
                        cwd=REPO)
  return proc


@pytest.mark.slow
def test_two_evaluate_runs_with_other_settings_leave_two_reports(run_dir, tmp_path):
  first = command("experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={tmp_path}")
  second = command("experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--reduction=min:4",
                   "--statistic=loss", "--seed=2")
  assert first.returncode == 0 and second.returncode == 0, second.stderr[-2000:]
  stem = "_reduction-min4_statistic-loss_seed-2"
  keys = [scoring_lib.variant_key(v) for v in scoring_lib.VARIANTS]
  scores = [f"scores_{k}{s}.npy" for k in keys for s in ("", "_reduction-min4_statistic-loss")]  # no bootstrap seed
  assert sorted(os.listdir(tmp_path)) == sorted(["results.json", "results.md", "roc.png", f"results{stem}.json",
                                                 f"results{stem}.md", f"roc{stem}.png"] + scores)
  run = run_folder.load_run(str(run_dir))
  np.testing.assert_array_equal(  # the saved scores are the leave-one-out scores themselves
      np.load(tmp_path / "scores_oas-shared_reduction-min4_statistic-loss.npy"),
      lira.leave_one_out(run.loss_MxNxT, run.keep_MxN, covariance="oas", shared=True, reduction="min:4",
                         statistic="loss", mask_NxT=run.mask_NxT, balance_counts=True))  # the default
  assert str(tmp_path / f"roc{stem}.png") in second.stdout
  default, other = strict_load(tmp_path / "results.json"), strict_load(tmp_path / f"results{stem}.json")
  assert (default["reduction"], default["statistic"], default["seed"]) == (None, "logit", 0)
  assert (other["reduction"], other["statistic"], other["seed"], other["n_boot"]) == ("min:4", "loss", 2, 200)
  assert other["settings"]["reduction"] == "min:4" and other["schema"]["name"] == "seqlira.results"
  assert other["run_config"]["generator"] == "lira.synthetic.synthetic_losses"


@pytest.mark.slow
def test_offline_with_only_shared_variants_is_a_one_line_error(run_dir, tmp_path):
  proc = command("experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--offline",
                 "--variants=oas-shared")
  assert proc.returncode == 2 and "Traceback" not in proc.stderr
  assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: no variant left")


@pytest.mark.slow
def test_shadow_sweep_records_its_settings_and_drops_counts_above_m(run_dir, tmp_path):
  proc = command("experiments.shadow_sweep", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--counts=4,8,16,32",
                 "--draws=2", "--reduction=group:2", "--fpr=0.001", "--variants=oas-shared,univariate-classwise")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "--counts values [16, 32] exceed M=8" in proc.stdout
  # m = 4 asked for: not the default at M = 8 any more (balanced counts need 6 models), so named
  stem = "shadow_sweep_counts-4+8_draws-2_variants-oas-shared+univariate-classwise_reduction-group2_fpr-0.001"
  saved = strict_load(tmp_path / f"{stem}.json")  # undefined TPRs (too few models at m=4) are null, not NaN
  settings = saved["settings"]
  assert (settings["counts"], settings["draws"], settings["reduction"], settings["fpr"]) == ([4, 8], 2, "group:2",
                                                                                             0.001)
  assert settings["variants"] == ["oas-shared", "univariate-classwise"] and settings["seed"] == 0
  assert saved["shape"] == {"M": 8, "N": 120, "T": 6} and saved["schema"]["name"] == "seqlira.shadow_sweep"
  assert any(r["tpr"] is None for r in saved["rows"])
  with open(tmp_path / f"{stem}.csv") as f:
    assert {r["reduction"] for r in csv.DictReader(f)} == {"group:2"}
  assert "reduction=group:2" in proc.stdout.splitlines()[1]
  # 4 models x 120 canaries give about 240 negatives: TPR at 0.1% FPR is not resolved, marked as evaluate does.
  assert "n/r" in proc.stdout and "n/r = not resolved: TPR@0.1% FPR needs >= 1,000 negatives" in proc.stdout


# The shadow_sweep command with a Ctrl-C (SIGINT to itself) the moment its second subset is kept
_CTRL_C_AFTER_TWO_SUBSETS = """
import os, signal, sys
from lira.reports import sweep_report
real_save = sweep_report.Cells.save
def save(self, *args):
  real_save(self, *args)
  if len(os.listdir(self.folder)) == 2:
    os.kill(os.getpid(), signal.SIGINT)
sweep_report.Cells.save = save
from experiments import cli, shadow_sweep
sys.argv = ["shadow_sweep", *sys.argv[1:]]
cli.run(shadow_sweep.main, resumes=True)
"""


@pytest.mark.slow
def test_shadow_sweep_stopped_by_ctrl_c_says_it_resumes_and_the_rerun_finishes_as_one_whole_sweep(run_dir, tmp_path):
  args = [f"--run_dir={run_dir}", "--counts=6,8", "--draws=2", "--fpr=0.01", "--variants=oas-shared,univariate-shared",
          "--pairs=oas-shared:univariate-shared", "--n_boot=20"]
  whole = command("experiments.shadow_sweep", *args, f"--out_dir={tmp_path / 'whole'}")
  assert whole.returncode == 0, whole.stderr[-2000:]
  stopped = subprocess.run([sys.executable, "-c", _CTRL_C_AFTER_TWO_SUBSETS, "--noprogress", *args,
                            f"--out_dir={tmp_path / 'run'}"], capture_output=True, text=True, cwd=REPO)
  assert stopped.returncode == 130, stopped.stderr[-2000:]
  from experiments import cli
  assert [line for line in stopped.stderr.splitlines() if line.strip()] == [f"{cli.STOPPED}; {cli.RESUMES}"]
  assert not list((tmp_path / "run").glob("shadow_sweep_*.json"))  # no report of a part of the sweep
  again = command("experiments.shadow_sweep", *args, f"--out_dir={tmp_path / 'run'}")
  assert again.returncode == 0, again.stderr[-2000:]
  assert "resumed: 2 subset(s) read back from" in again.stdout
  for path in (tmp_path / "whole").glob("shadow_sweep_*.*"):
    if path.suffix in (".json", ".csv"):
      text = path.read_text().replace(str(tmp_path / "whole"), str(tmp_path / "run"))  # argv names the out_dir
      assert (tmp_path / "run" / path.name).read_text() == text, path.name


@pytest.mark.slow
def test_shadow_sweep_run_again_reads_its_finished_subsets_back_and_writes_the_same_reports(run_dir, tmp_path):
  args = [f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--counts=6,8", "--draws=2", "--fpr=0.01",
          "--variants=oas-shared,univariate-shared", "--pairs=oas-shared:univariate-shared", "--n_boot=20"]
  first = command("experiments.shadow_sweep", *args)
  assert first.returncode == 0, first.stderr[-2000:]
  assert "resumed" not in first.stdout
  # named by the settings but counts and draws (a sweep with more of them reuses the subsets it shares)
  cells = tmp_path / "shadow_sweep_cells_variants-oas-shared+univariate-shared_fpr-0.01_pairs-oas-sharedunivariate-shared"
  assert sorted(os.listdir(cells)) == ["m-6_draw-0.json", "m-6_draw-1.json", "m-8_draw-0.json"]
  reports = {p: open(p, "rb").read() for p in tmp_path.glob("shadow_sweep_*.*") if p.is_file()}
  assert len(reports) == 3  # json, csv, png
  # as after a stop before the second draw of m = 6 finished
  os.remove(cells / "m-6_draw-1.json")
  again = command("experiments.shadow_sweep", *args)
  assert again.returncode == 0, again.stderr[-2000:]
  assert f"resumed: 2 subset(s) read back from {cells}" in again.stdout
  assert again.stdout.split("\n", 1)[1] == first.stdout  # the same tables
  for p in (p for p in reports if p.suffix in (".json", ".csv")):
    assert open(p, "rb").read() == reports[p], p.name


@pytest.mark.slow
def test_length_grid_records_its_settings_and_intervals(run_dir, tmp_path):
  proc = command("experiments.length_grid", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--lengths=1,3",
                 "--strategies=group", "--n_boot=30", "--seed=4")
  assert proc.returncode == 0, proc.stderr[-2000:]
  saved = strict_load(tmp_path / "length_grid_lengths-1+3_strategies-group_nboot-30_seed-4.json")
  settings = saved["settings"]
  assert (settings["lengths"], settings["strategies"], settings["n_boot"], settings["seed"]) == ([1, 3], ["group"],
                                                                                                 30, 4)
  assert settings["statistic"] == "logit" and settings["fpr"] == 1e-4 and settings["shared"] is True
  assert saved["run_config"]["num_models"] == 8
  for r in saved["rows"]:
    assert 0 <= r["tpr_ci_low"] <= r["tpr_ci_high"] <= 1 and 0 <= r["auc_ci_low"] <= r["auc_ci_high"] <= 1
    assert r["resolved"] is False  # 480 negatives cannot resolve 0.01% FPR
  assert "[bracketed] = 95% bootstrap" in proc.stdout and "n/r" in proc.stdout
