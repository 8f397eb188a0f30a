"""The prepared GPU call of the paired model-count sweep (`PART=sweep bash benchmarks/device_call.sh`, which runs
docs/reproduction/worst512/run.sh) end to end at tiny size on the CPU: the tiny LSTM config, 16 models in groups of
8, the sweep at m = 8 and 16. A GPU session has one try at it, so a flag or file name that drifted must fail here."""

import glob
import json
import os
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _call(tmp_path, name, runs):
  """PART=sweep at tiny size with its outputs in tmp_path/name; the folder its archive unpacks to."""
  out = tmp_path / name
  env = {**os.environ, "OUT": str(out), "RUNS": str(runs), "PART": "sweep", "PY": sys.executable,
         "CONFIG": "experiments/configs/lstm.py:tiny", "MODELS": "16", "GROUP": "8", "SWEEP_COUNTS": "8,16",
         "N_BOOT": "20"}
  proc = subprocess.run(["bash", "benchmarks/device_call.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "worst512 rc=0" in (out / "steps.txt").read_text()
  # one archive comes back (a device call returns at most 8 files); the run folders stay in RUNS
  assert sorted(os.listdir(out)) == ["log.txt", "steps.txt", "worst512.tar.gz"]
  with tarfile.open(out / "worst512.tar.gz") as tar:
    tar.extractall(tmp_path / f"{name}_back", filter="data")
  return tmp_path / f"{name}_back" / "worst512"


@pytest.mark.slow
def test_the_prepared_sweep_call_trains_sweeps_and_evaluates_at_tiny_size_and_resumes(tmp_path):
  runs = tmp_path / "runs"
  back = _call(tmp_path, "out", runs)
  assert os.path.exists(runs / "worst16" / "losses.npy")
  log = (back / "log.txt").read_text()
  assert "paired sweep done (rc 0)" in log and "m = 16 evaluated" in log and "membership_structure done" in log
  table = (back / "shadow_sweep.txt").read_text()
  for pair in ("Independent Shared - Univariate Shared", "OAS Shared - Univariate Shared"):
    for fpr in ("@0.1%", "@0.01%"):
      assert f"{pair} {fpr}" in table
  (sweep_json,) = glob.glob(str(back / "shadow_sweep_*.json"))
  sweep = json.load(open(sweep_json))
  assert sweep["settings"]["counts"] == [8, 16] and sweep["settings"]["n_boot"] == 20
  assert sweep["settings"]["pairs"] == ["independent-shared:univariate-shared", "oas-shared:univariate-shared"]
  kinds = {(row["kind"], row["m"]) for row in sweep["rows"]}
  assert kinds == {(kind, m) for kind in ("variant", "pair") for m in (8, 16)}  # a paired difference at each m
  assert glob.glob(str(back / "shadow_sweep_*.png")) and glob.glob(str(back / "shadow_sweep_*.csv"))
  assert "variant" in (back / "evaluate_m16.txt").read_text()
  assert "lstm_worst" in (back / "paper_table_m16.txt").read_text()
  assert os.path.exists(back / "m16" / "results.json")
  assert "best variant at 0.1% FPR" in (back / "membership_structure_m8.txt").read_text()
  assert json.load(open(back / "train_config.json"))["shadow"]["num_models"] == 16
  # a second call on the same machine (the same RUNS, a new OUT), as after a call stopped by its time limit: the
  # training and the sweep's subsets are read back, and the same tables come back
  again = _call(tmp_path, "out2", runs)
  table_again = (again / "shadow_sweep.txt").read_text()
  resumed = [line for line in table_again.splitlines(keepends=True) if line.startswith("resumed: ")]
  assert len(resumed) == 1 and resumed[0].startswith("resumed: 2 subset(s) read back from ")
  assert table_again.replace(resumed[0], "") == table
