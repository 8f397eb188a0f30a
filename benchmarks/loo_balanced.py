"""Balanced against plain leave-one-out at the paper's shape: the six variants in one pass, and the closed form
against the per-target refit it replaced.

  python benchmarks/loo_balanced.py --M 64 --N 10000 --T 128                 # loo_balanced_M64_N10000_T128.json
  python benchmarks/loo_balanced.py --M 484 --N 10000 --T 128 --refit_canaries 8
  python benchmarks/loo_balanced.py --M 64 --backends numpy jax              # also the jax backend, same arrays
  python benchmarks/loo_balanced.py --M 8 --N 200 --T 16 --out /tmp/b.json  # smoke test

Each backend times lira.leave_one_out_variants on all six variants (what experiments.evaluate runs) with
balance_counts=False (plain) and True (balanced, the default), alternating, --repeats times on the same synthetic
arrays (lira.synthetic: AR(1) logits, LiRA's balanced keep matrix). The refit is the straightforward way to get the
balanced scores: per target, gather each class's kept rows and fit them (lira.gaussian.fit_score, batched over
canaries); it runs on --refit_canaries canaries, is extrapolated linearly to N, and its scores must equal the closed
form's on them.
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
from lira import gaussian  # noqa: E402
from lira import synthetic  # noqa: E402


def refit_kept_rows(keep_MxB, m):
  """For target m: (own_BxL, other_BxL) model ids each class keeps (canaries of one IN count and target class)."""
  M = keep_MxB.shape[0]
  seq = (m + 1 + np.arange(M - 1)) % M  # cyclic order after m
  same_SxB = keep_MxB[seq] == keep_MxB[m][None]
  n_own, n_oth = int(same_SxB[:, 0].sum()), M - 1 - int(same_SxB[:, 0].sum())
  L = min(n_own, n_oth)
  pos_SxB = np.argsort(~same_SxB, axis=0, kind="stable")  # own positions first, each in cyclic order
  return seq[pos_SxB[n_own - L:n_own]].T, seq[pos_SxB[n_own + n_oth - L:]].T


def refit_balanced(x_MxBxD, keep_MxB, valid_BxD, scoring):
  """Balanced leave-one-out by refitting every target's kept rows ([M, B])."""
  M, B, _ = x_MxBxD.shape
  out_MxB = np.empty((M, B))
  n_in_B = keep_MxB.sum(axis=0)
  gather = lambda x, rows: np.take_along_axis(np.moveaxis(x, 0, 1), rows[:, :, None], axis=1)  # noqa: E731
  for m in range(M):
    for k in np.unique(n_in_B):
      for is_in in (True, False):
        cols = np.flatnonzero((n_in_B == k) & (keep_MxB[m] == is_in))
        if cols.size:
          own, oth = refit_kept_rows(keep_MxB[:, cols], m)
          x = x_MxBxD[:, cols]
          out_MxB[m, cols] = gaussian.fit_score(gather(x, own), gather(x, oth), x[m][:, None], valid_BxD[cols],
                                                scoring, a_is_in=is_in)[:, 0]
  return out_MxB


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--M", type=int, default=64)
  parser.add_argument("--N", type=int, default=10000)
  parser.add_argument("--T", type=int, default=128)
  parser.add_argument("--backends", nargs="+", default=["numpy"], choices=["numpy", "jax"])
  parser.add_argument("--repeats", type=int, default=2)
  parser.add_argument("--refit_canaries", type=int, default=32, help="0: skip the refit")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=None)
  args = parser.parse_args(argv)
  out = Path(args.out or ROOT / "benchmarks" / "results" / f"loo_balanced_M{args.M}_N{args.N}_T{args.T}.json")
  loss, keep, _ = synthetic.synthetic_losses(num_models=args.M, num_canaries=args.N, seq_len=args.T, shift=0.3,
                                             seed=args.seed)
  rows = []
  for backend in args.backends:
    scorings = {bal: [lira.Scoring(covariance=c, shared=s, balance_counts=bal, backend=backend)
                      for _, c, s in lira.VARIANTS] for bal in (False, True)}
    if backend == "jax":  # start jax's client before the first timed call
      lira.leave_one_out(loss[:, :4, :4], keep[:, :4], backend="jax", covariance="univariate")
    for rep in range(args.repeats):
      for bal in (False, True):
        start, cpu = time.perf_counter(), time.process_time()
        scores = lira.leave_one_out_variants(loss, keep, scorings[bal])
        row = {"backend": backend, "mode": "balanced" if bal else "plain", "repeat": rep,
               "s": time.perf_counter() - start, "cpu_s": time.process_time() - cpu}
        rows.append(row)
        print(f"{backend:5} {row['mode']:8} repeat {rep}: {row['s']:7.2f} s ({row['cpu_s']:.1f} CPU-s)", flush=True)
        if bal:
          balanced = scores
  summary = {}
  for backend in args.backends:
    best = {mode: min(r["s"] for r in rows if r["backend"] == backend and r["mode"] == mode)
            for mode in ("plain", "balanced")}
    summary[backend] = {**best, "balanced_over_plain": best["balanced"] / best["plain"]}
    print(f"{backend}: best of {args.repeats}: plain {best['plain']:.2f} s, balanced {best['balanced']:.2f} s, "
          f"balanced / plain {summary[backend]['balanced_over_plain']:.2f}")
  refit = None
  if args.refit_canaries:
    n = min(args.refit_canaries, args.N)
    start = time.perf_counter()
    worst = 0.0
    for v, (_, c, s) in enumerate(lira.VARIANTS):
      scoring = lira.Scoring(covariance=c, shared=s)
      x, valid = gaussian.features(loss[:, :n], None, scoring)
      ref = refit_balanced(x, keep[:, :n], valid, scoring)
      worst = max(worst, float(np.abs(ref - balanced[v][:, :n]).max() / max(1.0, np.abs(ref).max())))
    seconds = time.perf_counter() - start
    refit = {"canaries": n, "s": seconds, "extrapolated_s": seconds * args.N / n, "max_rel_diff": worst,
             "over_closed_form": seconds * args.N / n / summary[args.backends[-1]]["balanced"]}
    print(f"refit ({args.backends[-1]} closed form's scores on {n} canaries agree to {worst:.1e}): {seconds:.2f} s, "
          f"extrapolated to N = {args.N}: {refit['extrapolated_s']:.0f} s, {refit['over_closed_form']:.0f}x the "
          "closed form")
  machine = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "platform": platform.platform(),
             "processor": platform.processor(), "numpy": np.__version__,
             "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None}
  if "jax" in args.backends:
    import jax
    machine.update(jax=jax.__version__, devices=[str(d) for d in jax.devices()])
  out.parent.mkdir(parents=True, exist_ok=True)
  shown = os.path.relpath(out, ROOT) if out.resolve().is_relative_to(ROOT) else out.name
  out.write_text(json.dumps({"config": {**vars(args), "out": shown}, "machine": machine, "rows": rows,
                             "summary": summary, "refit": refit}, indent=1) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
