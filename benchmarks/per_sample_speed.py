"""Time the per-sample audit of six attacks' stored leave-one-out scores (lira.per_canary.audit: per-canary AUC, the
K-fold calibrated global and per-canary thresholds at each FPR, exact intervals, PPV with its bootstrap) against what
evaluate spends on the same scores after leave-one-out: lira.metrics.summarize with its canary bootstrap, per attack.

  python benchmarks/per_sample_speed.py                       # M=484 models, N=10000 canaries, six score arrays
  python benchmarks/per_sample_speed.py --M 32 --N 500 --out /tmp/per_sample_speed.json   # smoke test

The scores are synthetic: members N(shift, 1), non-members N(0, 1), a different shift per attack (AUC 0.6 to 0.99),
so the sorts see realistic ties (none). Both sides run in one process on the same arrays, one attack after another
(evaluate summarises two at a time on 2 threads; here one, on both sides), with their defaults (200 replicates, FPRs
1% and 0.1% for the audit, 1%, 0.1%, 0.01% for evaluate). The split halves' re-scoring is leave-one-out itself and is
not part of either side. The ratio is the audit's time over evaluate's.
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lira import metrics  # noqa: E402
from lira import per_canary as ps  # noqa: E402
from lira import synthetic  # noqa: E402

SHIFTS = (0.36, 0.8, 1.3, 1.9, 2.6, 3.3)  # AUC ~0.6 ... ~0.99


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--M", type=int, default=484)
  parser.add_argument("--N", type=int, default=10_000)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "per_sample_speed_cpu.json"))
  args = parser.parse_args()
  keep = synthetic.keep_matrix(args.M, args.N, 0)
  rng = np.random.default_rng(1)
  scores = [rng.normal(size=(args.M, args.N)) + shift * keep for shift in SHIFTS]
  options = ps.PerSampleOptions()
  times = {"audit": [], "evaluate_summaries": []}
  for _ in range(args.repeats):
    t = time.perf_counter()
    audits = [ps.audit(s, keep, options) for s in scores]
    times["audit"].append(time.perf_counter() - t)
    t = time.perf_counter()
    summaries = [metrics.summarize(s, keep) for s in scores]
    times["evaluate_summaries"].append(time.perf_counter() - t)
  best = {k: min(v) for k, v in times.items()}
  record = {
      "benchmark": "per_sample_speed", "date": datetime.date.today().isoformat(), "machine": platform.processor() or
      platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(), "M": args.M, "N": args.N,
      "attacks": len(scores), "repeats": args.repeats, "seconds": times, "best": best,
      "ratio_audit_over_evaluate": best["audit"] / best["evaluate_summaries"],
      "check": {"auc": [s["auc"] for s in summaries],
                "mean_per_canary_auc": [float(np.nanmean(a["auc_N"])) for a in audits],
                "held_out_fpr_at_0.1%": [a["fprs"][1]["global"]["fpr"] for a in audits]},
  }
  print(json.dumps({k: record[k] for k in ("M", "N", "best", "ratio_audit_over_evaluate")}, indent=1))
  Path(args.out).parent.mkdir(parents=True, exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(record, f, indent=1)


if __name__ == "__main__":
  main()
