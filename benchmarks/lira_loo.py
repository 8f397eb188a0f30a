"""Time leave-one-out LiRA (lira.leave_one_out) against the brute-force reference on synthetic per-token losses.

  python benchmarks/lira_loo.py --M 64 --N 10000 --T 128
  python benchmarks/lira_loo.py --M 8 --N 200 --T 16 --out /tmp/lira_loo.json   # smoke test
  python benchmarks/lira_loo.py --backends numpy jax --ref_targets 0   # numpy against the jax backend, same inputs
  python benchmarks/lira_loo.py --M 484 --ref_targets 0 --joint   # also all variants in one pass (numpy)
  python benchmarks/lira_loo.py --M 64 --N 1000 --T 32 --ref_targets 0 --variants oas-shared --backends numpy jax \
      --keep bernoulli   # varying IN counts: the jax backend's traced-count program

--joint also times lira.leave_one_out_variants on all the chosen variants at once (one read and one per-token
statistic per block, as experiments.evaluate runs them), first, on the same arrays; its scores must equal the
per-variant ones. With several --backends each variant is timed on each, one after the other on the same arrays; a row's
"ratio_to_numpy" is its time over the numpy backend's (the jax time includes its compiles, one per block shape; jax's
client is started once before the first timed row).

The reference (tests/lira/bruteforce.py) runs on --ref_targets x --ref_canaries (target, canary) pairs and
its time is extrapolated linearly to all M * N pairs; on that subset the two engines must agree.
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
import scipy.signal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "lira"))  # the reference lives beside the tests, as they import it

import lira  # noqa: E402
from bruteforce import bruteforce_llr  # noqa: E402

VARIANTS = {
    "univariate-classwise": ("univariate", False),
    "univariate-shared": ("univariate", True),
    "independent-classwise": ("independent", False),
    "independent-shared": ("independent", True),
    "oas-classwise": ("oas", False),
    "oas-shared": ("oas", True),
}
AR_RHO = 0.5  # correlation between neighbouring tokens
IN_SHIFT = 0.3  # logit increase of IN models on the memorised positions
IN_FRACTION = 0.2  # fraction of a canary's positions that carry the membership signal
CHUNK_FLOATS = 2**24  # float64 temporaries per generation chunk (128 MiB)


def make_keep(M, N, rng):
  """keep_MxN as in the LiRA reference code: every canary IN for exactly M / 2 models."""
  order = rng.uniform(size=(M, N)).argsort(0)
  return order < M // 2


def make_keep_bernoulli(M, N, rng):
  """keep_MxN with each model IN with probability 1/2, as the first K models of a larger run (partial_run) or a
  shadow_sweep subset have it: IN counts vary from canary to canary (each kept within [3, M - 3])."""
  keep = rng.uniform(size=(M, N)) < 0.5
  bad = (keep.sum(axis=0) < 3) | (keep.sum(axis=0) > M - 3)
  keep[:, bad] = make_keep(M, int(bad.sum()), rng)
  return keep


def make_losses(keep_MxN, T, rng):
  """Synthetic float32 losses: per-canary AR(1)-correlated Gaussian logits, IN shifted on 20% of positions."""
  M, N = keep_MxN.shape
  loss_MxNxT = np.empty((M, N, T), np.float32)
  chunk = max(1, CHUNK_FLOATS // (M * T))
  for start in range(0, N, chunk):
    n = slice(start, min(start + chunk, N))
    c = n.stop - n.start
    mu_CxT = rng.normal(1.5, 1.0, size=(c, T))
    scale_CxT = rng.uniform(0.5, 1.5, size=(c, T))
    signal_CxT = rng.uniform(size=(c, T)) < IN_FRACTION
    # AR(1) with unit marginal variance: z_0 = e_0, z_t = rho z_{t-1} + sqrt(1 - rho^2) e_t.
    e_MxCxT = rng.standard_normal(size=(M, c, T))
    e_MxCxT[:, :, 0] /= np.sqrt(1 - AR_RHO**2)
    z_MxCxT = scipy.signal.lfilter([np.sqrt(1 - AR_RHO**2)], [1.0, -AR_RHO], e_MxCxT, axis=-1)
    logit_MxCxT = mu_CxT + scale_CxT * z_MxCxT + IN_SHIFT * (keep_MxN[:, n, None] & signal_CxT)
    loss_MxNxT[:, n] = np.logaddexp(0.0, -logit_MxCxT)  # softplus(-logit) = -ln sigmoid(logit)
  return loss_MxNxT


def find_summarize():
  """lira.metrics.summarize if it exists yet, else None."""
  try:
    import lira.metrics
  except ImportError:
    return None
  return getattr(lira.metrics, "summarize", None)


def jsonable(value):
  """Best-effort conversion of a summary (dicts, numpy scalars and arrays) into JSON types."""
  if isinstance(value, dict):
    return {str(k): jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [jsonable(v) for v in value]
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic):
    return value.item()
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  return str(value)


def machine_info():
  """What the timings were taken on."""
  info = {
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
      "cpu_count": os.cpu_count(),
      "platform": platform.platform(),
      "python": platform.python_version(),
      "numpy": np.__version__,
  }
  if "jax" in sys.modules:
    jax = sys.modules["jax"]
    info["jax"] = jax.__version__
    info["jax_devices"] = [str(d) for d in jax.devices()]
  return info


def run_variant(name, loss_MxNxT, keep_MxN, targets, canaries, summarize, backend="numpy", precision="float64"):
  """Time one variant on the fast engine and on the reference subset; compare them there."""
  covariance, shared = VARIANTS[name]
  M, N, _ = loss_MxNxT.shape
  start, cpu = time.perf_counter(), time.process_time()
  llr_MxN = lira.leave_one_out(loss_MxNxT, keep_MxN, covariance=covariance, shared=shared, balance_counts=False,
                               reduction=None, statistic="logit", backend=backend, precision=precision)
  llr_MxN = np.asarray(llr_MxN)  # a lazy (e.g. jax) result is finished before the clock stops
  fast_s, fast_cpu_s = time.perf_counter() - start, time.process_time() - cpu
  row = {"variant": name, "fast_cpu_s": fast_cpu_s, "backend": backend, "precision": precision, "covariance": covariance, "shared": shared,
         "fast_s": fast_s, "fast_finite": bool(np.isfinite(llr_MxN).all()), "llr": llr_MxN}

  if summarize is not None:
    start = time.perf_counter()
    summary = summarize(llr_MxN, keep_MxN)
    row["summarize_s"] = time.perf_counter() - start
    summary.pop("roc")  # the curve is not what BENCHMARKS.md reports; AUC and TPRs are
    row["summary"] = jsonable(summary)

  if len(targets) and len(canaries):
    start = time.perf_counter()
    ref_MxN = bruteforce_llr(loss_MxNxT, keep_MxN, covariance=covariance, shared=shared, reduction=None,
                             statistic="logit", targets=targets, canaries=canaries)
    ref_s = time.perf_counter() - start
    pairs = len(targets) * len(canaries)
    sub = np.ix_(targets, canaries)
    diff = np.abs(llr_MxN[sub] - ref_MxN[sub])
    row.update({
        "ref_pairs": pairs,
        "ref_subset_s": ref_s,
        "ref_extrapolated_s": ref_s * (M * N) / pairs,
        "speedup": ref_s * (M * N) / pairs / fast_s,
        "max_abs_diff": float(np.max(diff)),
        "max_rel_diff": float(np.max(diff / np.maximum(1.0, np.abs(ref_MxN[sub])))),
    })
  return row


def print_table(rows):
  """One line per variant."""
  head = f"{'variant':<22} {'backend':<13} {'fast s':>9} {'ratio':>6} {'ref s*':>11} {'speed-up':>9} {'max|diff|':>10} {'summ. s':>8}"
  print(head)
  print("-" * len(head))
  for r in rows:
    fmt = lambda key, spec: format(r[key], spec) if key in r else "-"  # noqa: E731
    print(f"{r['variant']:<22} {r['backend'] + ' ' + r['precision'][5:]:<13} {fmt('fast_s', '9.3f'):>9} "
          f"{fmt('ratio_to_numpy', '6.2f'):>6} {fmt('ref_extrapolated_s', '11.1f'):>11} "
          f"{fmt('speedup', '9.1f'):>9} {fmt('max_abs_diff', '10.2e'):>10} {fmt('summarize_s', '8.2f'):>8}")
  print("* reference time extrapolated linearly from its subset to all M * N pairs")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--M", type=int, default=64, help="models (even)")
  parser.add_argument("--N", type=int, default=10000, help="canaries")
  parser.add_argument("--T", type=int, default=128, help="positions")
  parser.add_argument("--ref_targets", type=int, default=2, help="targets the reference computes (0: skip it)")
  parser.add_argument("--ref_canaries", type=int, default=50, help="canaries the reference computes")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=None, help="JSON file (default benchmarks/results/lira_loo_M{M}_N{N}_T{T}.json)")
  parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
  parser.add_argument("--backends", nargs="+", choices=["numpy", "jax", "jax-float32"], default=["numpy"],
                      help="leave_one_out backends timed on the same arrays (jax-float32: precision float32)")
  parser.add_argument("--keep", choices=["half", "bernoulli"], default="half",
                      help="membership: every canary IN for M / 2 models (half), or each model IN with probability 1/2 "
                           "(bernoulli: varying IN counts, as a partial run or a sweep subset)")
  parser.add_argument("--joint", action="store_true", help="also time all variants in one leave_one_out_variants pass")
  args = parser.parse_args(argv)
  if args.M % 2 or args.M < 4:
    parser.error("--M must be even and at least 4 (leave-one-out needs two IN shadow rows)")
  out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"lira_loo_M{args.M}_N{args.N}_T{args.T}.json"

  rng = np.random.default_rng(args.seed)
  start = time.perf_counter()
  keep_MxN = (make_keep if args.keep == "half" else make_keep_bernoulli)(args.M, args.N, rng)
  loss_MxNxT = make_losses(keep_MxN, args.T, rng)
  data_s = time.perf_counter() - start
  pick = np.random.default_rng(args.seed + 1)
  targets = sorted(pick.choice(args.M, size=min(args.ref_targets, args.M), replace=False).tolist())
  canaries = sorted(pick.choice(args.N, size=min(args.ref_canaries, args.N), replace=False).tolist())
  summarize = find_summarize()
  print(f"M={args.M} N={args.N} T={args.T} seed={args.seed} keep={args.keep} "
        f"({len(np.unique(keep_MxN.sum(axis=0)))} distinct IN counts): data generated in {data_s:.1f} s "
        f"({loss_MxNxT.nbytes / 2**30:.2f} GiB float32); reference on {len(targets)} x {len(canaries)} pairs; "
        f"lira.metrics.summarize {'timed' if summarize else 'not available, skipped'}")

  rows, joint = [], None
  if any(spec.startswith("jax") for spec in args.backends):  # start jax's CPU client once, outside every timed row
    tiny_keep = make_keep(6, 2, np.random.default_rng(0))
    lira.leave_one_out(np.ones((6, 2, 2), np.float32), tiny_keep, covariance="univariate", shared=True, backend="jax",
                       balance_counts=False)
  if args.joint:
    start, cpu = time.perf_counter(), time.process_time()
    plain = lira.Scoring(balance_counts=False)
    llrs = lira.leave_one_out_variants(loss_MxNxT, keep_MxN, [plain.variant(*VARIANTS[v]) for v in args.variants])
    joint = {"variants": args.variants, "seconds": time.perf_counter() - start, "cpu_s": time.process_time() - cpu,
             "loadavg": os.getloadavg()}
    print(f"  all {len(args.variants)} variants in one pass (numpy): {joint['seconds']:.3f} s", flush=True)
  for name in args.variants:
    first = None
    for spec in args.backends:
      backend, _, precision = spec.partition("-")
      rows.append(run_variant(name, loss_MxNxT, keep_MxN, targets, canaries, summarize, backend,
                              precision or "float64"))
      r = rows[-1]
      first = first or r
      if r is not first:  # the same variant on another backend: its time over the first's, its llr error
        r["ratio_to_" + first["backend"]] = r["fast_s"] / first["fast_s"]
        scale = np.maximum(1.0, np.abs(first["llr"]))
        r["max_rel_llr_diff"] = float(np.max(np.abs(r["llr"] - first["llr"]) / scale))
      print(f"  {name} {spec}: fast {r['fast_s']:.3f} s" + (f", max|fast - ref| = {r['max_abs_diff']:.2e}"
                                                             if "max_abs_diff" in r else ""), flush=True)
  if joint is not None:
    numpy_rows = [r for r in rows if r["backend"] == "numpy"]
    joint["max_abs_diff_to_per_variant"] = float(max(np.max(np.abs(r["llr"] - llr)) for r, llr in zip(numpy_rows, llrs)))
    joint["per_variant_total_s"] = sum(r["fast_s"] for r in numpy_rows)
    joint["per_variant_total_cpu_s"] = sum(r["fast_cpu_s"] for r in numpy_rows)
    print(f"one pass {joint['seconds']:.2f} s against {joint['per_variant_total_s']:.2f} s variant by variant "
          f"(max |diff| {joint['max_abs_diff_to_per_variant']:.1e}); CPU {joint['cpu_s']:.1f} s against "
          f"{joint['per_variant_total_cpu_s']:.1f} s")
  for r in rows:
    r.pop("llr")

  machine = machine_info()
  print()
  print_table(rows)
  print(f"machine: {machine}")
  shown_out = os.path.relpath(out, ROOT) if out.resolve().is_relative_to(ROOT) else out.name  # no machine paths
  result = {"config": {**vars(args), "out": shown_out, "ref_target_ids": targets, "ref_canary_ids": canaries,
                       "ar_rho": AR_RHO, "in_shift": IN_SHIFT, "in_fraction": IN_FRACTION},
            "machine": machine, "data_s": data_s, "results": rows,
            "joint": joint, "loadavg": os.getloadavg()}
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=2) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
