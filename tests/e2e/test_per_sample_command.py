"""experiments.per_sample as a user runs it: on a synthetic run with planted canaries, compared with another run of
the same canaries, its report holds the library's numbers on the same leave-one-out scores (lira.per_canary.audit),
the planted canaries' recovery, the split halves, the pair and the comparison, in files named by the settings; bad
input (other canaries, too few models for the halves, an attack that cannot score leave-one-out, a --pair not
audited) is one error line before any work."""

import csv
import json
import os
import subprocess
import sys

import numpy as np

from lira import per_canary as ps
from lira import synthetic
from lira.loo import leave_one_out
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(*args):
  return subprocess.run([sys.executable, "-m", "experiments.per_sample", "--noprogress", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=300)


def make_run(path, seed, canaries_seed=0, M=32, N=60):
  synthetic_run.write_synthetic_run(str(path), num_models=M, num_canaries=N, seq_len=4, seed=seed, shift=4.0,
                                    frac_shifted=0.5, frac_canaries=0.2, population_size=0)
  np.save(path / "canaries.npy", np.random.default_rng(canaries_seed).integers(1, 50, size=(N, 4)).astype(np.int32))


def test_report_holds_the_librarys_audit_the_planted_canaries_halves_pair_and_comparison(tmp_path):
  run, other = tmp_path / "run", tmp_path / "other"
  make_run(run, seed=1)
  make_run(other, seed=1)  # the same canaries and losses: the comparison must find the same sets
  out = tmp_path / "out"
  proc = command(f"--run_dir={run}", f"--compare_run_dir={other}", "--variants=univariate-shared,oas-shared",
                 "--attacks=loss", "--fprs=0.05", "--n_boot=20", f"--out_dir={out}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  stem = "per_sample_variants-univariate-shared+oas-shared_attacks-loss_fprs-0.05_nboot-20_compare-other"
  assert sorted(os.listdir(out)) == sorted([f"{stem}.{e}" for e in ("json", "md", "csv")] +
                                           [f"{stem.replace('per_sample', 'per_sample_' + f)}.png"
                                            for f in ("tpr", "pair", "runs")])
  with open(out / f"{stem}.json") as f:
    report = json.load(f)  # strict JSON: json.load would take NaN, so check the text too
  assert "NaN" not in open(out / f"{stem}.json").read()
  assert [a["name"] for a in report["attacks"]] == ["Univariate Shared", "OAS Shared", "Loss"]
  keep = np.load(run / "keep.npy")
  loss = np.load(run / "losses.npy")
  planted = synthetic.shifted_canaries(60, 0.2, 1)
  score = leave_one_out(loss, keep, covariance="oas", shared=True)
  audit = ps.audit(score, keep, fprs=(0.05,), n_boot=20)
  oas = report["attacks"][1]["fprs"][0]
  e = audit["fprs"][0]
  assert oas["vulnerable"]["canaries"] == np.flatnonzero(e["canary"]["vulnerable_N"]).tolist()
  assert [t["threshold"] for t in oas["global"]["thresholds"]] == list(ps.calibrate(
      score, keep, ps.model_folds(32, 2), 0.05)["threshold"])
  assert oas["global"]["fpr"] == e["global"]["fpr"] and oas["global"]["ppv_ci_boot"] == e["global"]["ppv_ci_boot"]
  assert oas["oracle"]["tpr"] == e["oracle"]["tpr"]
  assert oas["planted"]["planted"] == planted.sum()
  assert oas["planted"]["found"] == (e["canary"]["vulnerable_N"] & planted).sum()
  halves = report["attacks"][1]["halves"]
  assert sorted(halves["models_a"] + halves["models_b"]) == list(range(32))
  assert report["pair"]["a"] == "Univariate Shared" and report["pair"]["b"] == "OAS Shared"
  for row in report["compare"]["attacks"]:  # the same run twice: every set found again
    assert abs(row["auc_spearman"] - 1.0) < 1e-12 and all(o["jaccard"] in (1.0, None) for o in row["fprs"])
  with open(out / f"{stem}.csv") as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 3 * 60 and rows[0]["attack"] == "Univariate Shared"
  oas_rows = [r for r in rows if r["attack"] == "OAS Shared"]
  assert [int(r["vulnerable@0.05"]) for r in oas_rows] == e["canary"]["vulnerable_N"].astype(int).tolist()
  assert "Which canaries leak" in proc.stdout and "planted" in proc.stdout


def test_bad_input_is_one_line_before_any_work(tmp_path):
  run, other = tmp_path / "run", tmp_path / "other"
  make_run(run, seed=1)
  make_run(other, seed=1, canaries_seed=5)
  proc = command(f"--run_dir={run}", f"--compare_run_dir={other}", f"--out_dir={tmp_path}/out")
  assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr
  assert "canaries.npy: canary 0 differs between" in proc.stderr and not os.path.exists(tmp_path / "out")
  small = tmp_path / "small"
  make_run(small, seed=1, M=6)
  proc = command(f"--run_dir={small}", f"--out_dir={tmp_path}/out")
  assert proc.returncode == 2 and "split halves need 8 of each (--min_models=4 per half; --nohalves skips them)" in proc.stderr, proc.stderr
  proc = command(f"--run_dir={run}", "--attacks=reference", f"--out_dir={tmp_path}/out")
  assert proc.returncode == 2 and "'reference' is an attack that cannot score a shadow run's leave-one-out pairs" \
      in proc.stderr, proc.stderr
  proc = command(f"--run_dir={run}", "--variants=oas-shared", "--pair=oas-shared,loss", f"--out_dir={tmp_path}/out")
  assert proc.returncode != 0 and "--pair: 'loss' is not audited here" in proc.stderr, proc.stderr
  assert not os.path.exists(tmp_path / "out")
