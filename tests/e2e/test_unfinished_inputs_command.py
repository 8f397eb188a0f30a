"""Folders another command has not finished, bad target files and the messages that used to mislead, as a user meets
them (subprocesses): one `error: ...` line that names the problem and what to do, exit status 2, no traceback, and
nothing written."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import run_folder

from lira.reports import synthetic_run
from test_feature_extraction import _labelled, model_dir  # noqa: F401  (model_dir: a fixture, a tiny GPT-NeoX folder)
from test_user_errors_command import assert_user_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(module, *args):
  env = {**os.environ, "PYTHONPATH": ROOT}
  return subprocess.run([sys.executable, "-m", f"experiments.{module}", *args, "--noprogress"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=600)


def write_texts(path, n=20):
  texts, labels = _labelled(n)
  path.write_text("".join(json.dumps({"text": t, "label": int(y)}) + "\n" for t, y in zip(texts, labels)))
  return str(path)


# ---- point 3: a features folder whose extraction was interrupted --------------------------------------------------

@pytest.mark.slow
def test_an_interrupted_feature_extraction_is_refused_until_the_same_command_resumes_it(model_dir, tmp_path):
  src, feats = write_texts(tmp_path / "texts.jsonl"), tmp_path / "feats"
  extract = ("extract_features", f"--model={model_dir}", f"--texts={src}", f"--out_dir={feats}", "--pairs")
  proc = command(*extract)
  assert proc.returncode == 0, proc.stderr[-2000:]
  # What a kill during the EM-MIA pairs leaves: every earlier stage, a chunk in pairs/, no pair_lp.npy, no
  # features.json (written last).
  pair_lp = np.load(feats / "pair_lp.npy")
  os.makedirs(feats / "pairs")
  np.save(feats / "pairs" / "rows_000000_000020.npy", pair_lp)
  os.remove(feats / "pair_lp.npy")
  os.remove(feats / "features.json")
  before = sorted(os.listdir(feats))
  proc = command("pretrain_attacks", f"--features={feats}")
  assert_user_error(proc, f"features folder {feats} is incomplete", "features.json", "interrupted",
                    "re-run the same extract_features command")
  assert sorted(os.listdir(feats)) == before  # no results.json, results.md or roc.png
  proc = command(*extract)  # the resume
  assert proc.returncode == 0, proc.stderr[-2000:]
  proc = command("pretrain_attacks", f"--features={feats}", "--n_boot=0")
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads((feats / "results_nboot-0.json").read_text())
  assert result["features"]["schema"] == "seqlira.features/1" and result["features"]["arrays"]["pair_lp"][:2] == [20, 20]
  assert "em_mia" in result["settings"]["attacks"] and "skipped em_mia" not in proc.stdout


# ---- point 3: a shadow run whose groups are not all done ----------------------------------------------------------

def unfinished_run(run, groups_done=2):
  """A run folder as train_shadows leaves it mid-run: config, keep, canaries, the first groups' losses."""
  rng = np.random.default_rng(0)
  run_folder.save_config(str(run), {"shadow": {"num_models": 12, "group_size": 3, "seed": 0},
                                    "model": {"name": "lstm"}})
  run_folder.save_npy(str(run / "keep.npy"), rng.random((12, 10)) < 0.5)
  for g in range(groups_done):
    run_folder.save_npy(run_folder.group_paths(str(run), g)[1], rng.exponential(size=(3, 10, 4)).astype(np.float32))


@pytest.mark.slow
def test_every_reader_of_an_unfinished_shadow_run_says_to_resume_it(tmp_path):
  run = tmp_path / "run"
  unfinished_run(run)
  np.save(tmp_path / "target.npy", np.ones((10, 4), np.float32))
  before = sorted(os.listdir(run))
  for module, *args in (("evaluate",), ("score_targets", f"--target={tmp_path}/target.npy", f"--out_dir={tmp_path}/o"),
                        ("shadow_sweep",), ("cov_structure",)):
    proc = command(module, f"--run_dir={run}", *args)
    assert_user_error(proc, f"run folder {run} is an unfinished shadow run", "groups done: 2 of 4",
                      "resume it with the same train_shadows command", "experiments.partial_run")
  assert sorted(os.listdir(run)) == before and not (tmp_path / "o").exists()
  # partial_run takes the 6 finished models; fewer than 6 is refused with the same minimum as everywhere
  proc = command("partial_run", f"--run_dir={run}", f"--out_run_dir={tmp_path}/six")
  assert proc.returncode == 0, proc.stderr
  assert np.load(tmp_path / "six" / "losses.npy").shape == (6, 10, 4)
  unfinished_run(tmp_path / "one_group", groups_done=1)
  proc = command("partial_run", f"--run_dir={tmp_path}/one_group", f"--out_run_dir={tmp_path}/three")
  assert_user_error(proc, "only 3 leading models are finished", "needs at least 6 models")
  assert not (tmp_path / "three").exists()


def test_partial_run_on_a_synthetic_run_says_it_needs_a_shadow_run(tmp_path):
  run = str(tmp_path / "syn")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=10, seq_len=4)
  proc = command("partial_run", f"--run_dir={run}", f"--out_run_dir={tmp_path}/out")
  assert_user_error(proc, f"{run} is not a shadow run of experiments.train_shadows",
                    "synthetic run of experiments.make_synthetic")
  assert not (tmp_path / "out").exists()


# ---- point 4: target files that are not losses --------------------------------------------------------------------

@pytest.mark.slow
def test_score_targets_refuses_bool_integer_and_empty_targets_before_writing(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=30, seq_len=5)
  loss = np.load(f"{run}/losses.npy")
  cases = {"bool": (np.load(f"{run}/keep.npy")[:2, :, None] & (loss[:2] > 0), "got dtype bool"),
           "int": (np.ones((30, 5), np.int64), "got dtype int64"),
           "empty": (np.zeros((0, 30, 5), np.float32), "holds no target model (shape [0, 30, 5], K = 0)")}
  for name, (array, needle) in cases.items():
    np.save(tmp_path / f"{name}.npy", array)
    proc = command("score_targets", f"--run_dir={run}", f"--target={tmp_path}/{name}.npy", f"--out_dir={tmp_path}/o")
    assert_user_error(proc, f"{tmp_path}/{name}.npy", needle)
    assert not (tmp_path / "o").exists()


# ---- points 4 and 8: extract_features' settings and models ---------------------------------------------------------

@pytest.mark.slow
def test_extract_features_names_bad_shots_and_models(model_dir, tmp_path):
  src, out = write_texts(tmp_path / "texts.jsonl"), tmp_path / "feats"
  proc = command("extract_features", f"--model={model_dir}", f"--texts={src}", f"--out_dir={out}", "--shots=-1")
  assert_user_error(proc, "--shots", "-1")
  proc = command("extract_features", f"--model={tmp_path}/nope", f"--texts={src}", f"--out_dir={out}")
  assert_user_error(proc, f"model folder {tmp_path}/nope does not exist")
  assert "tokenizer" not in proc.stderr
  run = tmp_path / "run"
  unfinished_run(run)
  proc = command("extract_features", f"--model={run}", f"--texts={src}", f"--out_dir={out}")
  assert_user_error(proc, f"{run} is a shadow run folder", "--model_id=M")
  assert "vocab_size" not in proc.stderr and not out.exists()
  proc = command("extract_features", f"--model={model_dir}", f"--texts={src}", f"--out_dir={out}")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "Unable to initialize backend" not in proc.stderr  # jax's TPU probe stays quiet
  proc = command("extract_features", f"--model={model_dir}", f"--texts={src}", f"--out_dir={out}", "--max_length=8")
  assert_user_error(proc, "built with other settings (max_length)", "choose another --out_dir, or pass --overwrite")


# ---- point 8: cov_structure with too few permutations for p <= 0.01 ------------------------------------------------

def test_cov_structure_says_when_a_level_cannot_be_reached(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=20, seq_len=5)
  proc = command("cov_structure", f"--run_dir={run}", "--permutations=19")
  assert proc.returncode == 0, proc.stderr
  assert ("p <= 0.01 is not attainable with 19 permutations (the smallest p is 1 / 20 = 0.05; --permutations=99 or "
          "more reach it)") in proc.stdout
  assert "p <= 0.01 for" not in proc.stdout and "p <= 0.05 for" in proc.stdout


# ---- point 10: shadow_sweep's default counts and FPR --------------------------------------------------------------

def test_shadow_sweep_default_counts_leave_out_subsets_that_cannot_be_scored(tmp_path):
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=16, num_canaries=20, seq_len=4)
  proc = command("shadow_sweep", f"--run_dir={run}", "--draws=1", "--variants=univariate-shared")
  assert proc.returncode == 0, proc.stderr
  report = json.loads(open(f"{run}/shadow_sweep_draws-1_variants-univariate-shared.json").read())
  assert report["settings"]["counts"] == [8, 16] and "m=4" not in proc.stdout  # m = 4 was always n/a
  assert "A larger --fpr (e.g. --fpr=0.01) is resolved with fewer." in proc.stdout


# ---- point 8: a run folder training cannot write into --------------------------------------------------------------

def read_only(folder):
  """Make `folder` read-only for this process: a read-only bind mount as root (which file modes do not stop), its
  mode otherwise; returns the function that undoes it, or None where neither works."""
  if os.geteuid() != 0:
    os.chmod(folder, 0o555)
    return lambda: os.chmod(folder, 0o755)
  if shutil.which("mount") is None:
    return None
  ok = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0
  if ok and subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True).returncode == 0:
    return lambda: subprocess.run(["umount", str(folder)], check=True)
  if ok:
    subprocess.run(["umount", str(folder)])
  return None


@pytest.mark.slow
def test_train_shadows_names_an_unwritable_run_folder_without_suggesting_noevaluate(tmp_path):
  (tmp_path / "file").write_text("not a folder")
  config = "--config=experiments/configs/lstm.py:tiny"
  for extra in ((), ("--noevaluate",)):
    proc = command("train_shadows", config, f"--run_dir={tmp_path}/file/run", *extra)
    assert_user_error(proc, f"{tmp_path}/file/run", "choose another --run_dir")
    assert "--noevaluate" not in proc.stderr and "--out_dir" not in proc.stderr
  folder = tmp_path / "ro"
  folder.mkdir()
  undo = read_only(folder)
  if undo is None:
    pytest.skip("no way to make a read-only folder here")
  try:
    for extra in ((), ("--noevaluate",)):
      proc = command("train_shadows", config, f"--run_dir={folder}", *extra)
      assert_user_error(proc, f"cannot write into {folder}", "choose another --run_dir")
      assert "--noevaluate" not in proc.stderr and ".tmp" not in proc.stderr
  finally:
    undo()
