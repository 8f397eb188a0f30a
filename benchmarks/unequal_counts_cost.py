"""What an IN count away from half costs balanced leave-one-out: one block of canaries that all have IN count k of
M models, scored per covariance (both shared and class-wise), on the numpy backend and on the jax device pipeline
with the count's own program (k static) and the traced-count one (lira.balanced_padded.Layout, k traced).

  python benchmarks/unequal_counts_cost.py                                  # M = 448, T = 16, 16 canaries
  python benchmarks/unequal_counts_cost.py --M 448 --T 16 --B 16 --counts 224,222,218,210
  python benchmarks/unequal_counts_cost.py --T 128 --counts 224,222,220,214 --covariances oas --layouts 8,32
  python benchmarks/unequal_counts_cost.py --T 128 --B 7 --counts 224,220,208 --covariances oas --separate --nojax

Balanced leave-one-out fits both classes on L = min(n_own - 1, n_oth) rows per target: at k = M / 2 a target removes
itself and one row of the other class, at k = M / 2 - d / 2 it removes about d + 1 rows (lira.balanced.removal_counts,
printed as (s_own, s_oth, L) per target class), and each removed row is a downdate of every fit. Run on a CPU (the
jax rows time the device pipeline on jax's default device); jax rows: seconds after the compile, compile in brackets.
--layouts D1,D2,...: also the traced-count program of a run whose counts lie within d = M - 2k in [-D, D] (its
buffers sized for that run's largest removals, D + 1 rows: the first 448 of 512 models need D = 32), a column per D.
--separate: a row per variant (shared or class-wise) instead of both together; --nojax: the numpy column alone.
"""

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lira import balanced  # noqa: E402
from lira import balanced_padded  # noqa: E402
from lira import loo  # noqa: E402
from lira import loo_device  # noqa: E402
from lira.scoring import VARIANTS  # noqa: E402
from lira.scoring import Scoring  # noqa: E402


def block(M, T, B, k, seed=0):
  rng = np.random.default_rng(seed)
  loss_MxBxT = rng.gamma(2.0, 0.5, size=(M, B, T)).astype(np.float32)
  keep_MxB = np.zeros((M, B), bool)
  for b in range(B):
    keep_MxB[rng.choice(M, k, replace=False), b] = True
  return loss_MxBxT, keep_MxB


def timed(fn, reps):
  fn()
  start = time.perf_counter()
  for _ in range(reps):
    fn()
  return (time.perf_counter() - start) / reps


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--M", type=int, default=448)
  ap.add_argument("--T", type=int, default=16)
  ap.add_argument("--B", type=int, default=16, help="canaries in the block")
  ap.add_argument("--counts", default="224,222,218,210")
  ap.add_argument("--covariances", default="univariate,independent,oas")
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--layouts", default="", help="D1,D2,...: columns for the traced programs of runs with |d| <= D")
  ap.add_argument("--separate", action="store_true", help="a row per variant instead of a covariance's two together")
  ap.add_argument("--nojax", dest="jax", action="store_false", help="the numpy column alone")
  a = ap.parse_args()
  spans = [int(d) for d in a.layouts.split(",") if d]
  jax.config.update("jax_enable_x64", True)
  fn = loo_device.jitted()
  print(f"M = {a.M}, T = {a.T}, {a.B} canaries a block, {jax.devices()[0].platform}; ms per block (compile s)")
  print(f"{'k':>5} {'covariance':16} {'removals (s_own, s_oth, L)':32} {'numpy':>9} {'jax, own':>16} "
        f"{'jax, bucket':>16}" + "".join(f"{f'jax, |d|<={d}':>16}" for d in spans))
  for k in map(int, a.counts.split(",")):
    loss_MxBxT, keep_MxB = block(a.M, a.T, a.B, k)
    args = tuple(jax.device_put(x) for x in (loss_MxBxT, np.ones((a.B, a.T), bool), keep_MxB))
    keys = [k] + ([balanced_padded.layout([k], a.M)] if balanced_padded.downdated(k, a.M) else [])
    keys = keys if a.jax else []
    groups = []  # the variants timed together: a covariance's two, or each alone (--separate)
    for covariance in a.covariances.split(","):
      both = [(c, s) for _, c, s in VARIANTS if c == covariance]
      groups += [[v] for v in both] if a.separate else [both]
    for group in groups:
      cov = group[0][0] + ((" shared" if group[0][1] else " classwise") if a.separate else "")
      scorings = [Scoring.of(None, covariance=c, shared=s) for c, s in group]
      numpy_s = timed(lambda: loo.leave_one_out_variants(loss_MxBxT, keep_MxB, scorings), a.reps)
      spec = loo_device.Spec.of(scorings, masked=False)
      gv = tuple(None for _ in scorings)
      cells = []
      for key in keys:
        start = time.perf_counter()
        compiled = fn.lower(*args, gv, spec=spec, k=key).compile()
        compile_s = time.perf_counter() - start
        run_s = timed(lambda: jax.block_until_ready(compiled(*args, gv)), a.reps)
        cells.append(f"{run_s * 1e3:8.1f} ({compile_s:4.1f})")
      cells += ["-"] * (2 - len(cells))
      for d in spans if a.jax else []:
        if not abs(a.M - 2 * k) <= d:
          cells.append("-")
          continue
        key = balanced_padded.layout([(a.M - d) // 2, (a.M + d + 1) // 2], a.M, widen=False)
        compiled = fn.lower(*args, gv, spec=spec, k=key).compile()
        cells.append(f"{timed(lambda: jax.block_until_ready(compiled(*args, gv)), a.reps) * 1e3:8.1f}")
      removals = str(tuple(balanced.removal_counts(k, a.M)))
      print(f"{k:5d} {cov:16} {removals:32} {numpy_s * 1e3:9.1f} " + " ".join(f"{c:>16}" for c in cells), flush=True)


if __name__ == "__main__":
  main()
