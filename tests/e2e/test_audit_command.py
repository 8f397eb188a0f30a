"""experiments.audit as a user runs it (subprocesses) on synthetic run folders: its reports hold the bounds
lira.dp_audit gives on the same scores, and every bad input is one `error: ...` line, exit status 2, nothing written."""

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import lira
import attacks
from attacks import shadow
from lira import dp_audit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCOUNTANT = {"epsilon": 40.0, "delta": 1e-5, "noise_multiplier": 0.5, "clip_norm": 1.0, "sampling_prob": [0.01] * 8,
              "steps": 100, "epsilon_per_model": [40.0] * 8}


def command(name, *args, cwd=ROOT):
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, "-m", f"experiments.{name}", *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=300)


def add_accountant(run_dir, accountant):
  path = os.path.join(run_dir, "config.json")
  with open(path) as f:
    config = json.load(f)
  with open(path, "w") as f:
    json.dump({**config, "accountant": accountant}, f)


def wrote(proc):
  """The files a command says it wrote."""
  return [line.strip() for line in proc.stdout.split("wrote:\n", 1)[1].splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """A run without DP, the same run with an accountant, and score_targets' scores of two of its models."""
  root = tmp_path_factory.mktemp("audit")
  plain, dp, targets = str(root / "plain"), str(root / "dp"), str(root / "targets")
  made = command("make_synthetic", f"--run_dir={plain}", "--num_models=8", "--num_canaries=60", "--seq_len=3",
                 "--shift=2")
  assert made.returncode == 0, made.stderr[-2000:]
  shutil.copytree(plain, dp)
  add_accountant(dp, ACCOUNTANT)
  loss_MxNxT, keep_MxN = np.load(f"{plain}/losses.npy"), np.load(f"{plain}/keep.npy")
  np.save(root / "target.npy", loss_MxNxT[:2])
  np.save(root / "target_keep.npy", keep_MxN[:2])
  scored = command("score_targets", f"--run_dir={plain}", f"--target={root / 'target.npy'}", f"--out_dir={targets}",
                   "--variants=oas-shared,univariate-shared", "--noprogress")
  assert scored.returncode == 0, scored.stderr[-2000:]
  return root, plain, dp, targets


def assert_bound(reported, bound):
  want = bound.as_dict()
  for key in ("epsilon", "tpr", "fpr", "tp", "fp", "n_in", "n_out", "method", "delta", "confidence"):
    assert reported[key] == want[key], (key, reported[key], want[key])
  assert reported["threshold"] == (want["threshold"] if np.isfinite(want["threshold"]) else None)


@pytest.mark.slow
def test_reports_hold_the_library_bounds(runs, tmp_path):
  _, plain, dp, _ = runs
  proc = command("audit", f"--run_dir={plain},{dp}", "--variants=oas-shared,univariate-classwise", "--attacks=loss",
                 f"--out_dir={tmp_path}", "--noprogress")
  assert proc.returncode == 0, proc.stderr[-2000:]
  stem = tmp_path / "audit_variants-oas-shared+univariate-classwise_attacks-loss"
  assert wrote(proc) == [f"{stem}.json", f"{stem}.md", f"{stem}.png"]
  assert "no DP" in proc.stdout and "epsilon 40 at delta 1e-05" in proc.stdout and "WARNING" not in proc.stdout
  with open(f"{stem}.png", "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with open(f"{stem}.md") as f:
    assert "| variant | pooled eps |" in f.read()
  with open(f"{stem}.json") as f:
    result = json.load(f)
  assert [s["accountant_epsilon"] for s in result["sources"]] == [None, 40.0]
  assert result["sources"][1]["accountant"] == ACCOUNTANT
  loss_MxNxT, keep_MxN = np.load(f"{plain}/losses.npy"), np.load(f"{plain}/keep.npy")
  scores = {"OAS Shared": lira.leave_one_out(loss_MxNxT, keep_MxN, covariance="oas", shared=True),
            "Univariate Class-Wise": lira.leave_one_out(loss_MxNxT, keep_MxN, covariance="univariate", shared=False),
            "Loss": np.stack([attacks.loss(shadow.target_lp(loss_NxT)) for loss_NxT in loss_MxNxT])}
  for src in result["sources"]:  # the same losses in both runs: the same bounds
    assert [row["name"] for row in src["rows"]] == list(scores)
    for row in src["rows"]:
      per_model = dp_audit.model_bounds(scores[row["name"]], keep_MxN)
      for reported, bound in zip(row["per_model"], per_model, strict=True):
        assert_bound(reported, bound)
      assert_bound(row["pooled"], dp_audit.pooled_bound(scores[row["name"]], keep_MxN))
      assert row["per_model_summary"] == dp_audit.model_summary(per_model)
  assert result["sources"][0]["rows"][0]["pooled"]["epsilon"] > 0.5  # shift=2: a signal, the bounds are not all 0


@pytest.mark.slow
def test_settings_name_the_files_and_a_bound_above_the_accountant_is_flagged(runs, tmp_path):
  root, plain, _, _ = runs
  tight = str(root / "tight")
  shutil.copytree(plain, tight)
  add_accountant(tight, {**ACCOUNTANT, "epsilon": 0.01, "epsilon_per_model": [0.01] * 8, "delta": 1e-6})
  proc = command("audit", f"--run_dir={tight}", "--variants=oas-shared", "--method=clopper_pearson", "--delta=1e-6",
                 "--confidence=0.9", f"--out_dir={tmp_path}", "--noprogress")
  assert proc.returncode == 0, proc.stderr[-2000:]
  stem = tmp_path / "audit_variants-oas-shared_method-clopper_pearson_delta-1e-06_confidence-0.9"
  assert wrote(proc)[0] == f"{stem}.json"
  with open(f"{stem}.json") as f:
    result = json.load(f)
  row = result["sources"][0]["rows"][0]
  assert row["pooled"]["epsilon"] > 0.01 and row["exceeds"]["pooled"]
  assert "WARNING: OAS Shared: the bound exceeds the accountant's epsilon" in proc.stdout
  mismatch = command("audit", f"--run_dir={tight}", "--variants=oas-shared", f"--out_dir={tmp_path}", "--noprogress")
  assert "the accountant's delta 1e-06 differs from --delta=1e-05" in mismatch.stdout


@pytest.mark.slow
def test_target_scores(runs, tmp_path):
  root, _, _, targets = runs
  with open(tmp_path / "targets.json", "w") as f:  # the targets' own config: one epsilon per target
    json.dump({"accountant": {**ACCOUNTANT, "epsilon_per_model": [40.0, 40.0]}}, f)
  proc = command("audit", f"--target_scores={targets}", f"--target_keep={root / 'target_keep.npy'}",
                 f"--target_config={tmp_path / 'targets.json'}", "--method=gdp", f"--out_dir={tmp_path}",
                 "--noprogress")
  assert proc.returncode == 0, proc.stderr[-2000:]
  with open(tmp_path / "audit_method-gdp.json") as f:
    result = json.load(f)
  src = result["sources"][0]
  assert src["kind"] == "targets" and src["shape"] == {"K": 2, "N": 60} and src["accountant_epsilon"] == 40.0
  keep_KxN = np.load(root / "target_keep.npy")
  for row, key in zip(src["rows"], ("univariate-shared", "oas-shared"), strict=True):
    llr_KxN = np.load(os.path.join(targets, f"attack_scores_{key}.npy"))
    assert_bound(row["pooled"], dp_audit.pooled_bound(llr_KxN, keep_KxN, method="gdp"))
    for reported, bound in zip(row["per_model"], dp_audit.model_bounds(llr_KxN, keep_KxN, method="gdp"), strict=True):
      assert_bound(reported, bound)


@pytest.mark.slow
def test_bad_inputs_are_one_error_line_before_any_work(runs, tmp_path):
  root, plain, dp, targets = runs
  no_keep, no_losses, bad_accountant, empty = (str(tmp_path / n) for n in ("no_keep", "no_losses", "bad", "empty"))
  for folder, drop in ((no_keep, "keep.npy"), (no_losses, "losses.npy"), (bad_accountant, None)):
    shutil.copytree(plain, folder)
    if drop:
      os.remove(os.path.join(folder, drop))
  add_accountant(bad_accountant, {**ACCOUNTANT, "epsilon": "four"})
  os.makedirs(empty)
  np.save(tmp_path / "keep_3xN.npy", np.ones((3, 60), bool))
  out = tmp_path / "out"
  keep = f"--target_keep={root / 'target_keep.npy'}"
  cases = [  # (arguments, what the error line names)
      ((f"--run_dir={no_keep}",), "keep.npy"),
      ((f"--run_dir={plain},{no_losses}",), "losses.npy"),
      ((f"--run_dir={plain},{bad_accountant}",), "accountant.epsilon"),
      ((f"--target_scores={empty}", keep), "attack_scores_VARIANT.npy"),
      ((f"--target_scores={targets}", keep, "--variants=oas-classwise"), "attack_scores_oas-classwise.npy"),
      ((f"--target_scores={targets}", f"--target_keep={tmp_path / 'keep_3xN.npy'}"), "keep_3xN.npy"),
      ((f"--target_scores={targets}", keep, "--attacks=loss"), "--attacks"),
      ((f"--run_dir={plain}", "--delta=1"), "--delta=1: must be in (0, 1)"),
      ((f"--run_dir={plain}", "--method=gdp", "--threshold_strategy=split"), "threshold_strategy"),
      ((f"--run_dir={plain}", "--method=gdp", "--confidence=0.5"), "confidence"),
  ]
  before = sorted(os.listdir(plain))
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    procs = list(pool.map(lambda case: command("audit", *case[0], f"--out_dir={out}", "--noprogress"), cases))
  for (args, needle), proc in zip(cases, procs):
    assert proc.returncode == 2, (args, proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (args, proc.stderr[-2000:])
  assert not out.exists() or os.listdir(out) == []
  default_out = command("audit", f"--run_dir={plain},{no_losses}", "--noprogress")  # the first run is the default
  assert default_out.returncode == 2 and sorted(os.listdir(plain)) == before
