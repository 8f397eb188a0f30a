"""Plain against balanced leave-one-out (lira.leave_one_out(balance_counts=...)): bias on null data and time.

  python benchmarks/loo_balance.py                       # M = 16, 32, 64; N = 2,000; T = 32 (about 5 min on 2 cores)
  python benchmarks/loo_balance.py --M 8 --N 200 --out /tmp/b.json   # smoke test

On null data (synthetic runs whose IN and OUT models are drawn alike, lira.synthetic with shift 0) every AUC
should be 0.5; plain leave-one-out fits the target's own class on one model fewer than the other and falls below.
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lira  # noqa: E402
from lira import synthetic  # noqa: E402


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--M", type=int, nargs="+", default=[16, 32, 64])
  parser.add_argument("--N", type=int, default=2000)
  parser.add_argument("--T", type=int, default=32)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "loo_balance.json"))
  args = parser.parse_args(argv)
  rows = []
  print(f"{'M':>3} {'variant':<24} {'AUC plain':>10} {'AUC balanced':>13} {'s plain':>8} {'s balanced':>11}")
  for M in args.M:
    loss, keep, _ = synthetic.synthetic_losses(num_models=M, num_canaries=args.N, seq_len=args.T, shift=0.0,
                                               seed=args.seed + M)
    for name, covariance, shared in lira.VARIANTS:
      row = {"M": M, "N": args.N, "T": args.T, "variant": name}
      for mode, balance in (("plain", False), ("balanced", True)):
        start = time.perf_counter()
        llr = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared, balance_counts=balance)
        row[f"{mode}_s"] = time.perf_counter() - start
        row[f"{mode}_auc"] = lira.auc(llr.ravel(), keep.ravel())
      rows.append(row)
      print(f"{M:>3} {name:<24} {row['plain_auc']:>10.4f} {row['balanced_auc']:>13.4f} {row['plain_s']:>8.2f} "
            f"{row['balanced_s']:>11.2f}", flush=True)
  machine = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "platform": platform.platform(),
             "numpy": np.__version__}
  out = Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  shown = os.path.relpath(out, ROOT) if out.resolve().is_relative_to(ROOT) else out.name
  out.write_text(json.dumps({"config": {**vars(args), "out": shown}, "machine": machine, "rows": rows}, indent=1) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
