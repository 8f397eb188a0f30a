"""The attack registry in the commands, as a user runs them: WBC (registered in attacks/wbc.py, named in no command)
in evaluate, shadow_sweep, audit and pretrain_attacks, equal to attacks.wbc on the same arrays; unknown names and
settings no chosen attack reads refused with one line naming what the command can run."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attacks
from attacks import wbc
from attacks.catalogue import ATTACKS
from lira.reports import synthetic_run
import run_folder

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  return subprocess.run([sys.executable, "-m", *args, "--noprogress"], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("registry_run"))
  synthetic_run.write_synthetic_run(path, num_models=8, num_canaries=120, seq_len=7, seed=3, population_size=40,
                                    ragged=True)
  return path


def test_evaluate_scores_wbc_beside_lira_and_rmia(run_dir, tmp_path):
  proc = _run("experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--variants=oas-shared",
              "--n_boot=0", "--attacks=wbc,rmia,loss,wbc_vote", "--wbc_windows=2,3")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "WBC" in proc.stdout and "RMIA" in proc.stdout and "Loss" in proc.stdout
  [path] = tmp_path.glob("results*.json")
  assert "wbcwindows-2+3" in path.name  # the setting acted, so the report's name carries it
  result = json.load(open(path))
  assert [a["attack"] for a in result["attacks"]] == ["wbc", "rmia", "loss", "wbc_vote"]
  run = run_folder.load_run(run_dir)
  want = {"wbc": wbc.wbc_shadow(run.loss_MxNxT, run.keep_MxN, run.mask_NxT, (2, 3)),
          "wbc_vote": wbc.wbc_vote(run.loss_MxNxT, run.keep_MxN, run.mask_NxT, (2, 3))}
  for name, scores_MxN in want.items():
    row = next(a for a in result["attacks"] if a["attack"] == name)
    assert row["params"] == {"wbc_windows": [2, 3]}
    np.testing.assert_array_equal(np.load(tmp_path / row["scores_file"]), scores_MxN)
    assert row["summary"]["auc"] > 0.5  # the synthetic members' losses are lower: WBC sees it


def test_shadow_sweep_and_audit_take_any_leave_one_out_attack(run_dir, tmp_path):
  proc = _run("experiments.shadow_sweep", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--variants=oas-shared",
              "--counts=6,8", "--draws=1", "--fpr=0.01", "--attacks=wbc")
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.load(open(next(tmp_path.glob("shadow_sweep*.json"))))["rows"]
  assert sorted({(r["variant"], r["m"]) for r in rows}) == [("OAS Shared", 6), ("OAS Shared", 8), ("WBC", 6),
                                                            ("WBC", 8)]
  full = next(r for r in rows if r["variant"] == "WBC" and r["m"] == 8)  # m = M: the whole run
  run = run_folder.load_run(run_dir)
  scores = wbc.wbc_shadow(run.loss_MxNxT, run.keep_MxN, run.mask_NxT)
  assert full["n_pairs"] == scores.size and full["auc"] == pytest.approx(
      attacks_auc(scores, run.keep_MxN), abs=1e-12)
  proc = _run("experiments.audit", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", "--variants=oas-shared",
              "--attacks=wbc,rmia")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "WBC" in proc.stdout and "RMIA" in proc.stdout


def attacks_auc(scores_MxN, keep_MxN):
  from sklearn.metrics import roc_auc_score
  return roc_auc_score(keep_MxN.ravel(), scores_MxN.ravel())


@pytest.mark.parametrize("args, message", [
    (("--attacks=recall",), "--attacks: 'recall' is an attack that cannot score a shadow run's leave-one-out pairs; "
                            "choose from " + ", ".join(ATTACKS.names("leave_one_out"))),
    (("--attacks=rmia_foo",), "--attacks: 'rmia_foo' is an unknown attack; choose from "),
    (("--attacks=rmia", "--rmia_a=0.5"), "--rmia_a acts on rmia_offline, rmia_tokens_offline only"),
    (("--k=0.5",), "--k acts on min_k, min_k_pp only, and none of them is in --attacks"),
    (("--attacks=loss", "--wbc_windows=0"), "--wbc_windows=0: must be comma-separated integers, each >= 1"),
])
def test_bad_attack_names_and_unused_settings_are_refused(run_dir, tmp_path, args, message):
  proc = _run("experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={tmp_path}", *args)
  assert proc.returncode != 0
  assert message in proc.stderr, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr and not os.listdir(tmp_path)


def test_score_targets_lists_only_the_attacks_that_score_targets(run_dir, tmp_path):
  run = run_folder.load_run(run_dir)
  np.save(tmp_path / "target.npy", run.loss_MxNxT[0])
  proc = _run("experiments.score_targets", f"--run_dir={run_dir}", f"--target={tmp_path / 'target.npy'}",
              f"--out_dir={tmp_path / 'out'}", "--attacks=wbc")
  assert proc.returncode != 0
  assert f"'wbc' is an attack that cannot score separate target models; choose from " \
         f"{', '.join(ATTACKS.names('targets'))}" in proc.stderr


def test_pretrain_attacks_scores_wbc_against_a_reference_on_the_same_tokens(tmp_path):
  from attacks import feature_folder
  rng = np.random.default_rng(0)
  N, T = 40, 12
  lp = -rng.exponential(1.0, size=(N, T))
  length = rng.integers(2, T + 1, size=N)
  for n in range(N):
    lp[n, length[n]:] = np.nan
  lp[:, 0] = np.nan
  labels = np.arange(N) % 2
  lp[labels == 1] *= 0.7  # members: likelier under the fine-tuned model
  ref_lp = np.where(np.isfinite(lp), -rng.exponential(1.0, size=(N, T)), np.nan)
  for name, array in (("lp", lp), ("ref_lp", ref_lp), ("labels", labels)):
    feature_folder.write_array(str(tmp_path), name, array)
  feature_folder.write_meta(str(tmp_path), {"model": "toy"})
  proc = _run("experiments.pretrain_attacks", f"--features={tmp_path}", "--attacks=wbc,loss", "--n_boot=0")
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.load(open(next(tmp_path.glob("results*.json"))))
  row = next(r for r in result["rows"] if r["attack"] == "wbc")
  assert row["summary"]["auc"] == pytest.approx(attacks_auc(wbc.wbc(lp, ref_lp)[None], labels[None] == 1),
                                                abs=1e-12)
  assert attacks.loss is not None


def test_audit_bounds_the_attack_scores_score_targets_wrote(run_dir, tmp_path):
  from lira import dp_audit
  run = run_folder.load_run(run_dir)
  pop_MxZxT, _ = run_folder.load_population(run_dir)
  np.save(tmp_path / "target.npy", run.loss_MxNxT[:2])  # two of the run's models as the targets
  np.save(tmp_path / "target_pop.npy", pop_MxZxT[:2])
  np.save(tmp_path / "keep.npy", run.keep_MxN[:2])
  out = tmp_path / "out"
  proc = _run("experiments.score_targets", f"--run_dir={run_dir}", f"--target={tmp_path / 'target.npy'}",
              f"--target_population={tmp_path / 'target_pop.npy'}", f"--out_dir={out}", "--attacks=rmia",
              "--rmia_gamma=2", "--variants=oas-shared")
  assert proc.returncode == 0, proc.stderr[-2000:]
  [scores_file] = out.glob("attack_scores_rmia*.npy")
  proc = _run("experiments.audit", f"--target_scores={out}", f"--target_keep={tmp_path / 'keep.npy'}",
              "--variants=oas-shared", "--attacks=rmia", "--rmia_gamma=2")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "RMIA (gamma=2)" in proc.stdout
  [report] = out.glob("audit*rmia*.json")
  row = next(r for r in json.load(open(report))["sources"][0]["rows"] if r["name"] == "RMIA (gamma=2)")
  want = dp_audit.pooled_bound(np.load(scores_file), run.keep_MxN[:2])
  assert row["pooled"]["epsilon"] == want.epsilon
  proc = _run("experiments.audit", f"--target_scores={out}", f"--target_keep={tmp_path / 'keep.npy'}",
              "--variants=oas-shared", "--attacks=rmia_offline")
  assert proc.returncode == 2 and "attack_scores_rmia_offline.npy does not exist" in proc.stderr
