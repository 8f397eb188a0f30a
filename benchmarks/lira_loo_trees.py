"""Time the numpy backend of leave_one_out in two source trees on the same inputs, interleaved (regression check).

  git worktree add /tmp/lira-main main --detach
  python benchmarks/lira_loo_trees.py --other /tmp/lira-main --M 64 --N 10000 --T 128 --reps 3

Each timing runs in a fresh subprocess with PYTHONPATH set to its tree (so each imports its own lira) on arrays
written once to a temporary folder; per variant the runs alternate between the trees, and the row reports each
tree's median and the ratio this tree / other. Timings exclude imports and loading (taken inside the subprocess).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from lira_loo import VARIANTS, machine_info, make_keep, make_losses  # noqa: E402

TIMED = """
import sys, time, numpy as np, lira
loss, keep = np.load(sys.argv[1], mmap_mode="r"), np.load(sys.argv[2])
covariance, shared = sys.argv[3], sys.argv[4] == "1"
start = time.perf_counter()
lira.leave_one_out(np.asarray(loss), keep, covariance=covariance, shared=shared, balance_counts=sys.argv[5] == "1")
print(time.perf_counter() - start)
"""


def timed(tree, data, covariance, shared, balance):
  out = subprocess.run([sys.executable, "-c", TIMED, str(data / "loss.npy"), str(data / "keep.npy"), covariance,
                        str(int(shared)), str(int(balance))], env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, check=True)
  return float(out.stdout.split()[-1])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--other", required=True, help="the other source tree (e.g. a worktree at main)")
  parser.add_argument("--M", type=int, default=64)
  parser.add_argument("--N", type=int, default=10000)
  parser.add_argument("--T", type=int, default=128)
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--balance_counts", action="store_true")
  parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
  parser.add_argument("--out", default=None, help="JSON file for the rows")
  args = parser.parse_args(argv)
  rng = np.random.default_rng(0)
  keep_MxN = make_keep(args.M, args.N, rng)
  loss_MxNxT = make_losses(keep_MxN, args.T, rng)
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    data = Path(tmp)
    np.save(data / "loss.npy", loss_MxNxT)
    np.save(data / "keep.npy", keep_MxN)
    for name in args.variants:
      covariance, shared = VARIANTS[name]
      times = {"this": [], "other": []}
      for _ in range(args.reps):
        for label, tree in (("other", Path(args.other)), ("this", ROOT)):
          times[label].append(timed(tree, data, covariance, shared, args.balance_counts))
      row = {"variant": name, "this_s": statistics.median(times["this"]), "other_s": statistics.median(times["other"]),
             "this_all": times["this"], "other_all": times["other"]}
      row["ratio"] = row["this_s"] / row["other_s"]
      rows.append(row)
      print(f"{name:<22} this {row['this_s']:7.2f} s  other {row['other_s']:7.2f} s  ratio {row['ratio']:.2f}  "
            f"(this {['%.2f' % t for t in times['this']]}, other {['%.2f' % t for t in times['other']]})", flush=True)
  result = {"config": {k: v for k, v in vars(args).items() if k != "other"}, "machine": machine_info(), "rows": rows}
  if args.out:
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
  print(json.dumps(result["machine"]))


if __name__ == "__main__":
  main()
