"""The device pipeline's first call on a model subset with many IN counts against the full run, for this source tree
and another, each call in a fresh process (so that every compile is in the time), the trees alternated.

  git worktree add /tmp/base <commit> --detach
  python benchmarks/first_call_ab.py --base /tmp/base               # 5 rounds, the first 448 of 512 models
  python benchmarks/first_call_ab.py --base /tmp/base --reps 3 --numpy

Each round runs, per tree, the six balanced variants (float64) of lira.leave_one_out_variants on the first `subset`
of M synthetic models (lira.synthetic.synthetic_losses(shift=0.3), N canaries, T positions) and on all M, each in a
new Python process that imports lira from that tree: the first call (tracing, compiling and scoring) and a second
one. On a CPU the device pipeline is forced (SEQLIRA_JAX_PIPELINE_ON_CPU=1). --numpy: the numpy backend instead
(no compiles; the first call is then just a call). Prints each call and, per tree, the medians and the subset's
ratio to the full run by the medians. A machine whose speed drifts by 10-20% within minutes needs the alternation
and the medians to compare two trees.
"""

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE_CALL = r"""
import os, sys, time
os.environ["SEQLIRA_JAX_PIPELINE_ON_CPU"] = "1"
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, sys.argv[1])
import numpy as np
import lira
from lira import synthetic
M, m, N, T = (int(a) for a in sys.argv[2:6])
backend = sys.argv[6]
loss, keep = synthetic.synthetic_losses(M, N, T, shift=0.3)[:2]
scorings = [lira.Scoring(covariance=c, shared=s, balance_counts=True, backend=backend)
            for c in ("univariate", "independent", "oas") for s in (False, True)]
loss, keep = np.ascontiguousarray(loss[:m]), np.ascontiguousarray(keep[:m])
seconds = []
for _ in range(2):
  start = time.perf_counter()
  lira.leave_one_out_variants(loss, keep, scorings)
  seconds.append(time.perf_counter() - start)
print(*seconds)
"""


def call(tree, M, m, N, T, backend):
  """(first, second) seconds of one fresh process."""
  out = subprocess.run([sys.executable, "-c", ONE_CALL, str(tree), str(M), str(m), str(N), str(T), backend],
                       capture_output=True, text=True, check=True).stdout.split()
  return float(out[-2]), float(out[-1])


def add_shape_flags(ap, reps):
  """--M, --subset, --N, --T (the synthetic run and its subset) and --reps (rounds) on an ArgumentParser."""
  ap.add_argument("--M", type=int, default=512)
  ap.add_argument("--subset", type=int, default=448)
  ap.add_argument("--N", type=int, default=256)
  ap.add_argument("--T", type=int, default=128)
  ap.add_argument("--reps", type=int, default=reps)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--base", required=True, help="a checkout of the commit to compare against")
  add_shape_flags(ap, reps=5)
  ap.add_argument("--numpy", action="store_true", help="the numpy backend instead of the device pipeline")
  a = ap.parse_args()
  backend = "numpy" if a.numpy else "jax"
  trees = {"base": Path(a.base).resolve(), "this": ROOT}
  got = {(name, m): [] for name in trees for m in (a.subset, a.M)}
  for rep in range(a.reps):
    for name, tree in trees.items():
      for m in (a.subset, a.M):
        first, second = call(tree, a.M, m, a.N, a.T, backend)
        got[(name, m)].append((first, second))
        print(f"round {rep + 1}, {name:4s}, {m:4d} of {a.M} models: first {first:6.2f} s, second {second:6.2f} s",
              flush=True)
  print(f"{backend}, six balanced variants, medians over {a.reps} rounds (seconds):")
  print(f"{'tree':6s} {'subset first':>13s} {'full first':>11s} {'ratio':>6s} {'subset second':>14s} "
        f"{'full second':>12s} {'ratio':>6s}")
  for name in trees:
    med = {(m, i): statistics.median(x[i] for x in got[(name, m)]) for m in (a.subset, a.M) for i in (0, 1)}
    print(f"{name:6s} {med[(a.subset, 0)]:13.2f} {med[(a.M, 0)]:11.2f} {med[(a.subset, 0)] / med[(a.M, 0)]:5.2f}x "
          f"{med[(a.subset, 1)]:14.2f} {med[(a.M, 1)]:12.2f} {med[(a.subset, 1)] / med[(a.M, 1)]:5.2f}x")


if __name__ == "__main__":
  main()
