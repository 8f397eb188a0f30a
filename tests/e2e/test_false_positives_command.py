"""experiments.false_positives as a user runs it: the canaries it names are those of a brute-force count over the
scores files evaluate wrote, with their texts on a text run; a run folder without a report is one error line."""

import json
import os
import subprocess
import sys

import numpy as np

from lira.reports import loo_report
from lira.reports import synthetic_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "attacks"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lira"))


def command(*args):
  return subprocess.run([sys.executable, "-m", "experiments.false_positives", *args], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)


def test_names_the_canaries_of_the_top_pairs_with_their_texts(tmp_path):
  from test_attack_report import tiny_tokenizer
  from test_nonmember_pairs import brute_force
  run = tmp_path / "run"
  synthetic_run.write_synthetic_run(str(run), num_models=8, num_canaries=40, seq_len=4, seed=3, shift=1.0)
  rng = np.random.default_rng(0)
  np.save(run / "canaries.npy", rng.integers(1, 9, size=(40, 4)).astype(np.int32))
  tiny_tokenizer(run / "tokenizer.json", 9)
  loo_report.evaluate_run(str(run), n_boot=10, variants=["independent-shared", "oas-shared"], progress=False)
  results = sorted(f for f in os.listdir(run) if f.startswith("results") and f.endswith(".json"))[0]
  proc = command(f"--run_dir={run}", f"--results={results}", "--top=12", "--show=3", f"--out_dir={tmp_path}/out")
  assert proc.returncode == 0, proc.stderr[-2000:]
  with open(tmp_path / "out" / "false_positives_top-12_show-3.json") as f:
    report = json.load(f)
  keep = np.load(run / "keep.npy")
  for v in report["variants"]:
    path = [p for p in os.listdir(run) if p.startswith(f"scores_{v['variant']}")][0]
    score = np.load(run / path)
    _, _, ranked, counts = brute_force(score, keep, 12)
    assert [c["canary"] for c in v["canaries"]] == ranked[:3] and v["top"] == 12 and v["distinct"] == len(ranked)
    assert [c["pairs"] for c in v["canaries"]] == counts[:3]
    ids = np.load(run / "canaries.npy")
    assert [c["text"] for c in v["canaries"]] == [" ".join(f"w{i}" for i in ids[n]) for n in ranked[:3]]
  assert "| canary | pairs held | OUT pairs | text |" in proc.stdout


def test_a_run_without_a_report_is_one_error_line(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path / "run"), num_models=8, num_canaries=10, seq_len=3, seed=0)
  proc = command(f"--run_dir={tmp_path}/run")
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [f"error: {tmp_path}/run/results.json: not found (run python -m "
                                              f"experiments.evaluate --run_dir={tmp_path}/run first)"]
