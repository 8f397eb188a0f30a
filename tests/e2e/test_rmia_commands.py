"""RMIA in the commands, as a user runs them: evaluate and shadow_sweep --attacks=rmia on a synthetic run, and
score_targets on separate targets; the scores they write equal lira.rmia's on the same arrays."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lira import rmia
import run_folder
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  return subprocess.run([sys.executable, "-m", *args, "--noprogress"], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("rmia_run"))
  synthetic_run.write_synthetic_run(path, num_models=8, num_canaries=120, seq_len=5, seed=2, population_size=40)
  return path


def test_evaluate_adds_rmia_rows_equal_to_the_library(run_dir, tmp_path):
  proc = _run("experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--variants=oas-shared",
              "--n_boot=0", "--attacks=loss,rmia,rmia_tokens_offline", "--rmia_gamma=2")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "RMIA (gamma=2)" in proc.stdout and "RMIA token-wise offline (a=0.3) (gamma=2)" in proc.stdout
  result = json.load(open(next(tmp_path.glob("results*.json"))))
  assert [a["name"] for a in result["attacks"]][1:] == ["RMIA (gamma=2)", "RMIA token-wise offline (a=0.3) (gamma=2)"]
  run = run_folder.load_run(run_dir)
  pop, _ = run_folder.load_population(run_dir)
  for attack in ("rmia", "rmia_tokens_offline"):
    row = next(a for a in result["attacks"] if a["attack"] == attack)
    want = rmia.leave_one_out(run.loss_MxNxT, run.keep_MxN, pop, rmia.RMIA.named(attack, gamma=2.0))
    np.testing.assert_array_equal(np.load(tmp_path / row["scores_file"]), want)
    assert 0.5 < row["summary"]["auc"] <= 1


def test_shadow_sweep_scores_rmia_on_the_same_subsets(run_dir, tmp_path):
  proc = _run("experiments.shadow_sweep", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--variants=oas-shared",
              "--counts=6,8", "--draws=1", "--fpr=0.01", "--attacks=rmia")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "RMIA" in proc.stdout
  rows = json.load(open(next(tmp_path.glob("shadow_sweep*.json"))))["rows"]
  assert sorted({(r["variant"], r["m"]) for r in rows}) == [("OAS Shared", 6), ("OAS Shared", 8), ("RMIA", 6),
                                                            ("RMIA", 8)]
  assert all(r["n_pairs"] > 0 for r in rows)


def test_score_targets_scores_rmia_with_every_shadow_a_reference(tmp_path):
  full = str(tmp_path / "full")
  synthetic_run.write_synthetic_run(full, num_models=10, num_canaries=60, seq_len=4, seed=5, population_size=30)
  run = run_folder.load_run(full)
  pop, _ = run_folder.load_population(full)
  shadows = str(tmp_path / "shadows")
  os.makedirs(shadows)
  np.save(os.path.join(shadows, "losses.npy"), run.loss_MxNxT[2:])
  np.save(os.path.join(shadows, "keep.npy"), run.keep_MxN[2:])
  np.save(os.path.join(shadows, "population_losses.npy"), pop[2:])
  for name, array in (("target.npy", run.loss_MxNxT[:2]), ("target_keep.npy", run.keep_MxN[:2]),
                      ("target_pop.npy", pop[:2])):
    np.save(tmp_path / name, array)
  out = tmp_path / "out"
  common = [f"--run_dir={shadows}", f"--target={tmp_path / 'target.npy'}", f"--out_dir={out}",
            "--variants=univariate-shared", "--n_boot=0", "--attacks=rmia_offline"]
  proc = _run("experiments.score_targets", *common)
  assert proc.returncode == 2 and "--target_population" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
  proc = _run("experiments.score_targets", *common, f"--target_population={tmp_path / 'target_pop.npy'}",
              f"--target_keep={tmp_path / 'target_keep.npy'}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  want = rmia.score_targets(run.loss_MxNxT[2:], run.keep_MxN[2:], pop[2:], run.loss_MxNxT[:2], pop[:2],
                            online=False)
  np.testing.assert_array_equal(np.load(out / "attack_scores_rmia_offline.npy"), want)
  assert "RMIA offline (a=0.3)" in proc.stdout
  # the report carries its attacks and their settings in its name: another --rmia_a writes beside it
  reports = {"attack_variants-univariate-shared_nboot-0_attacks-rmia_offline.json",
             "attack_variants-univariate-shared_nboot-0_attacks-rmia_offline.md",
             "attack_roc_variants-univariate-shared_nboot-0_attacks-rmia_offline.png"}
  assert reports <= set(os.listdir(out)), sorted(os.listdir(out))
  proc = _run("experiments.score_targets", *common, f"--target_population={tmp_path / 'target_pop.npy'}",
              f"--target_keep={tmp_path / 'target_keep.npy'}", "--rmia_a=0.5")
  assert proc.returncode == 0, proc.stderr[-2000:]
  other = {name.replace("rmia_offline", "rmia_offline_rmiaa-0.5") for name in reports}
  assert reports | other <= set(os.listdir(out)), sorted(os.listdir(out))
  with open(out / "attack_variants-univariate-shared_nboot-0_attacks-rmia_offline.json") as f:
    report = json.load(f)
  assert [r["params"] for r in report["variants"] if r.get("attack") == "rmia_offline"] == [{"rmia_a": 0.3, "rmia_gamma": 1.0}]


def test_a_run_without_population_is_one_line_before_any_work(tmp_path):
  path = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(path, num_models=6, num_canaries=20, seq_len=3, seed=1, population_size=0)
  proc = _run("experiments.evaluate", f"--run_dir={path}", f"--out_dir={tmp_path / 'out'}", "--attacks=rmia")
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "population_losses.npy" in lines[0] and "experiments.population_losses" in lines[0]
  assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")
