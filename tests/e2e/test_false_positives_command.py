"""experiments.false_positives as a user runs it: the canaries it names, for the variants and the attack rows (RMIA,
Loss) of the report it reads, are those of a brute-force count over the scores files evaluate wrote, with their texts
on a text run, in a report named by that report's settings and its own that acted; --fpr beside --top (where it cannot
act), and a run folder without a report, are one error line each."""

import json
import os
import subprocess
import sys

import numpy as np

from attacks import shadow
from lira.reports import loo_report
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "attacks"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lira"))


def command(*args):
  return subprocess.run([sys.executable, "-m", "experiments.false_positives", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)


def test_names_the_canaries_of_the_top_pairs_with_their_texts(tmp_path):
  from attack_cli import tiny_tokenizer
  from test_nonmember_pairs import brute_force
  run = tmp_path / "run"
  synthetic_run.write_synthetic_run(str(run), num_models=8, num_canaries=40, seq_len=4, seed=3, shift=1.0)
  rng = np.random.default_rng(0)
  np.save(run / "canaries.npy", rng.integers(1, 9, size=(40, 4)).astype(np.int32))
  tiny_tokenizer(run / "tokenizer.json", 9)
  attack_rows = shadow.shadow_rows(str(run), ["rmia", "loss"], n_boot=10)
  _, result = loo_report.evaluate_run(str(run), n_boot=10, variants=["independent-shared", "oas-shared"],
                                      progress=False, attack_rows=attack_rows)
  results = "results_variants-independent-shared+oas-shared_nboot-10_attacks-rmia+loss.json"
  assert results in result["files"]
  proc = command(f"--run_dir={run}", f"--results={results}", "--top=12", "--show=3", f"--out_dir={tmp_path}/out")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert sorted(os.listdir(tmp_path / "out")) == [
      f"false_positives_variants-independent-shared+oas-shared_nboot-10_attacks-rmia+loss_top-12_show-3.{ext}"
      for ext in ("json", "md")]  # the report's settings, then those that acted: --top, not --fpr
  with open(tmp_path / "out" / sorted(os.listdir(tmp_path / "out"))[0]) as f:
    report = json.load(f)
  assert [v["variant"] for v in report["variants"]] == ["independent-shared", "oas-shared", "rmia", "loss"]
  assert report["settings"] == {"top": 12, "fpr": None, "show": 3}
  keep = np.load(run / "keep.npy")
  for v in report["variants"]:
    score = np.load(run / f"scores_{v['variant']}.npy")
    _, _, ranked, counts = brute_force(score, keep, 12)
    assert [c["canary"] for c in v["canaries"]] == ranked[:3] and v["top"] == 12 and v["distinct"] == len(ranked)
    assert [c["pairs"] for c in v["canaries"]] == counts[:3]
    ids = np.load(run / "canaries.npy")
    assert [c["text"] for c in v["canaries"]] == [" ".join(f"w{i}" for i in ids[n]) for n in ranked[:3]]
  assert "| canary | pairs held | OUT pairs | text |" in proc.stdout


def test_fpr_beside_top_is_one_error_line_before_any_work(tmp_path):
  out = tmp_path / "out"
  procs = [subprocess.Popen([sys.executable, "-m", "experiments.false_positives", f"--run_dir={tmp_path}/none",
                             "--top=3", f"--fpr={fpr}", f"--out_dir={out}"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for fpr in ("0.01", "0.0001")]  # 0.0001: the default
  for proc, fpr in zip(procs, ("0.01", "0.0001")):
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-2000:]
    assert err.strip().splitlines() == [
        f"error: --fpr={float(fpr):g} does not act with --top=3 (--top counts the K highest-scoring non-member pairs, "
        "--fpr those above its threshold); give one of them (see --help)"]
  assert not out.exists()


def test_a_run_without_a_report_is_one_error_line(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path / "run"), num_models=8, num_canaries=10, seq_len=3, seed=0)
  proc = command(f"--run_dir={tmp_path}/run")
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [f"error: {tmp_path}/run/results.json: not found (run python -m "
                                              f"experiments.evaluate --run_dir={tmp_path}/run first)"]
