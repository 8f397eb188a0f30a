"""RMIA's cost next to LiRA's, leave-one-out on the same arrays, and its Z x N comparisons against the pairwise matrix.

  python benchmarks/rmia_cost.py --M 64 --N 10000 --T 128 --Z 2500       # the paper's shape: rmia_cost_M64_....json
  python benchmarks/rmia_cost.py --M 8 --N 200 --T 16 --Z 50 --out /tmp/r.json   # smoke test

Times, on lira.synthetic arrays (AR(1) logits, balanced keep; the population: the same model with no member shift):
- LiRA: lira.leave_one_out_variants on all six variants, balanced (what experiments.evaluate runs by default);
- each RMIA form (lira.rmia.leave_one_out: sequence and token-wise, online and offline), whole;
- the comparisons alone: per target, one sort of the Z population ratios and a binary search per canary
  (lira.rmia._count), against the straightforward pairwise matrix LR(x) / LR(z) >= gamma of ML Privacy Meter
  ([N, Z] per target), timed on --pairwise_targets targets and extrapolated linearly to M; both must agree.
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
from lira import rmia  # noqa: E402
from lira import synthetic  # noqa: E402


def timed(fn, repeats):
  best, out = float("inf"), None
  for _ in range(repeats):
    start = time.perf_counter()
    out = fn()
    best = min(best, time.perf_counter() - start)
  return best, out


def pairwise(r_x_KxN, r_z_KxZ, gamma):
  """Privacy Meter's way: the [N, Z] matrix of ratios per target, then the mean over z."""
  out = np.empty(r_x_KxN.shape)
  for k in range(r_x_KxN.shape[0]):
    out[k] = (np.exp(r_x_KxN[k])[:, None] / np.exp(r_z_KxZ[k])[None, :] >= gamma).mean(axis=1)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--M", type=int, default=64)
  parser.add_argument("--N", type=int, default=10000)
  parser.add_argument("--T", type=int, default=128)
  parser.add_argument("--Z", type=int, default=2500)
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--pairwise_targets", type=int, default=4)
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  M, N, T, Z = args.M, args.N, args.T, args.Z
  loss, keep, _ = synthetic.synthetic_losses(M, N, T, seed=0)
  pop = synthetic.synthetic_losses(M, Z, T, shift=0.0, seed=1)[0]
  result = {"M": M, "N": N, "T": T, "Z": Z, "repeats": args.repeats, "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"), "seconds": {}}
  scorings = [lira.Scoring().variant(c, s) for _, c, s in lira.VARIANTS]
  result["seconds"]["lira_six_variants_balanced"], _ = timed(
      lambda: lira.leave_one_out_variants(loss, keep, scorings), args.repeats)
  for name in rmia.ATTACKS:
    result["seconds"][name], _ = timed(lambda n=name: rmia.leave_one_out(loss, keep, pop, rmia.RMIA.named(n)),
                                       args.repeats)
  # The comparisons alone, on the ratios of the sequence-level online form.
  options = rmia.RMIA()
  r_x = rmia._loo_ratios(loss, keep, None, options, population=False)
  r_z = rmia._loo_ratios(pop, None, None, options, population=True)
  result["seconds"]["comparisons_sorted"], counted = timed(lambda: rmia._count(r_x, r_z, options.gamma), args.repeats)
  k = min(args.pairwise_targets, M)
  seconds, direct = timed(lambda: pairwise(r_x[:k], r_z[:k], options.gamma), 1)
  result["seconds"]["comparisons_pairwise_extrapolated"] = seconds * M / k
  result["pairwise_targets"] = k
  result["pairwise_equal"] = bool(np.array_equal(direct, counted[:k]))
  lira_s = result["seconds"]["lira_six_variants_balanced"]
  result["ratio_to_lira"] = {n: result["seconds"][n] / lira_s for n in rmia.ATTACKS}
  for key, value in result["seconds"].items():
    print(f"{key:<40} {value:9.2f} s")
  print(f"pairwise equals sorted on {k} targets: {result['pairwise_equal']}")
  out = args.out or str(ROOT / "benchmarks" / "results" / f"rmia_cost_M{M}_N{N}_T{T}_Z{Z}.json")
  Path(out).write_text(json.dumps(result, indent=1) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
