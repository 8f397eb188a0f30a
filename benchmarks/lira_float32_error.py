"""The jax backend's float32 mode against float64 (numpy backend) on a run folder: max relative llr error, TPRs.

  python benchmarks/lira_float32_error.py --run_dir runs/lstm_default [--modes plain balanced]

Plain (balance_counts=False) and balanced leave-one-out, both jitted on the device in float32.
Per variant: max |llr32 - llr64| / max(1, |llr64|) and TPR at 0.1% and 0.01% FPR (lira.metrics.summarize, no bootstrap)
from each. Read-only on the run folder; prints one line per variant and optionally writes JSON.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import lira  # noqa: E402
import lira.metrics  # noqa: E402

VARIANTS = [(c, s) for c in ("univariate", "independent", "oas") for s in (False, True)]


def tprs(llr_MxN, keep_MxN):
  summary = lira.metrics.summarize(llr_MxN, keep_MxN, n_boot=0)
  return {f: summary["tpr"][f]["tpr"] for f in ("0.001", "0.0001")}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--run_dir", required=True)
  parser.add_argument("--out", default=None)
  parser.add_argument("--modes", nargs="+", default=["plain", "balanced"], choices=["plain", "balanced"])
  args = parser.parse_args(argv)
  loss = np.load(os.path.join(args.run_dir, "losses.npy"), mmap_mode="r")
  keep = np.load(os.path.join(args.run_dir, "keep.npy"))
  mask_path = os.path.join(args.run_dir, "mask.npy")
  mask = np.load(mask_path) if os.path.exists(mask_path) else None
  rows = []
  for mode, (covariance, shared) in ((m, v) for m in args.modes for v in VARIANTS):
    kw = dict(covariance=covariance, shared=shared, mask_NxT=mask, balance_counts=mode == "balanced")
    ref = lira.leave_one_out(loss, keep, **kw)
    f32 = lira.leave_one_out(loss, keep, backend="jax", precision="float32", **kw)
    err = float(np.max(np.abs(f32 - ref) / np.maximum(1.0, np.abs(ref))))
    row = {"mode": mode, "variant": f"{covariance}-{'shared' if shared else 'classwise'}", "max_rel_llr_err": err,
           "tpr_float64": tprs(ref, keep), "tpr_float32": tprs(f32, keep)}
    rows.append(row)
    print(f"{mode:<9} {row['variant']:<22} max rel err {err:.2e}  TPR@0.1%,0.01% float64 {list(row['tpr_float64'].values())} "
          f"float32 {list(row['tpr_float32'].values())}", flush=True)
  if args.out:
    Path(args.out).write_text(json.dumps({"run_dir": os.path.basename(os.path.normpath(args.run_dir)), "shape":
                                          list(loss.shape), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
  main()
