"""Leave-one-out on a model subset with many IN counts against the full run it came from, on the jax device pipeline
and on numpy: how many programs compile, and how long tracing, compiling and scoring take.

  python benchmarks/many_counts.py                         # the first 448 of 512 synthetic models, N = 256, T = 128
  python benchmarks/many_counts.py --N 5000 --out benchmarks/results/many_counts_gpu.json   # on a GPU
  python benchmarks/many_counts.py --M 32 --subset 24 --N 64 --T 16 --out /tmp/many_counts.json   # smoke test
  python benchmarks/many_counts.py --numpy_reps 5 --counts balanced     # numpy alone, full run and subset alternated

lira.synthetic.synthetic_losses(shift=0.3) for M models (LiRA's balanced keep matrix: every canary IN for M / 2), then
the first `subset` of them (as partial_run keeps them; tens of distinct IN counts at 448 of 512). For each of the two
(all M, the subset) and each of balanced and plain leave-one-out, the six variants in one
lira.leave_one_out_variants call:
- programs: the distinct program keys of the canaries' counts (lira.balanced_padded.program_keys);
- lower_s / compile_s: tracing and compiling each program on a 16-canary block of its canaries, from a clean cache;
- first_s / second_s: the jax pipeline's call with its compiles (jit caches cleared first) and again;
- numpy_s: the numpy backend on the same arrays; max_rel_diff: jax float64 against numpy, max |a - b| / max(1, |b|).
On a CPU the device pipeline is forced (lira.loo_jax.PIPELINE_ON_CPU_ENV=1: the code a GPU runs). Ratios of the
subset against the full run are printed; the JSON holds every number. --numpy_reps R: the numpy backend alone, the
full run and the subset alternated R times (on a noisy machine the ratio of two back-to-back calls is the steadier
number): each call's seconds, and the subset's ratio to the full run by the fastest calls and by the medians.
"""

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("SEQLIRA_JAX_PIPELINE_ON_CPU", "1")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import lira  # noqa: E402
from lira import balanced_padded  # noqa: E402
from lira import loo_device  # noqa: E402
from lira import synthetic  # noqa: E402
from lira.loo_jax import x64_context  # noqa: E402

VARIANTS = [(c, s) for c in ("univariate", "independent", "oas") for s in (False, True)]


def programs(loss, keep, spec, balanced, B=16):
  """(program keys, seconds lowering, seconds compiling) of the block programs the canaries need."""
  M = keep.shape[0]
  n_in = keep.sum(axis=0)
  keys = balanced_padded.program_keys(sorted(set(n_in.tolist())), M, balanced=balanced)
  fn = loo_device.jitted()
  lower_s = compile_s = 0.0
  with x64_context("float64"):
    for key in dict.fromkeys(keys.values()):
      cols = [i for i in range(len(n_in)) if keys[int(n_in[i])] == key]
      cols = (cols * B)[:B]
      args = (np.ascontiguousarray(loss[:, cols]), np.ones((B, 1), bool), np.ascontiguousarray(keep[:, cols]))
      t = time.perf_counter()
      lowered = fn.lower(*args, (None,) * len(VARIANTS), spec=spec, k=key)
      t1 = time.perf_counter()
      lowered.compile()
      lower_s += t1 - t
      compile_s += time.perf_counter() - t1
  return list(dict.fromkeys(keys.values())), lower_s, compile_s


def measure(loss, keep, balanced, with_numpy=True):
  jax_s = [lira.Scoring(covariance=c, shared=s, balance_counts=balanced, backend="jax") for c, s in VARIANTS]
  numpy_s = [lira.Scoring(covariance=c, shared=s, balance_counts=balanced) for c, s in VARIANTS]
  spec = loo_device.Spec.of(jax_s, masked=False)
  jax.clear_caches()
  loo_device.jitted.cache_clear()
  keys, lower_s, compile_s = programs(loss, keep, spec, balanced)
  jax.clear_caches()
  loo_device.jitted.cache_clear()
  t = time.perf_counter()
  got = lira.leave_one_out_variants(loss, keep, jax_s)
  first = time.perf_counter() - t
  t = time.perf_counter()
  lira.leave_one_out_variants(loss, keep, jax_s)
  second = time.perf_counter() - t
  numpy_time = diff = None
  if with_numpy:
    t = time.perf_counter()
    want = lira.leave_one_out_variants(loss, keep, numpy_s)
    numpy_time = time.perf_counter() - t
    diff = max(float((np.abs(g - w) / np.maximum(1.0, np.abs(w))).max()) for g, w in zip(got, want))
  return {"in_counts": int(len(set(keep.sum(axis=0).tolist()))), "programs": len(keys), "lower_s": lower_s,
          "compile_s": compile_s, "first_s": first, "second_s": second, "numpy_s": numpy_time, "max_rel_diff": diff}


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--M", type=int, default=512)
  ap.add_argument("--subset", type=int, default=448)
  ap.add_argument("--N", type=int, default=256)
  ap.add_argument("--T", type=int, default=128)
  ap.add_argument("--counts", nargs="+", choices=["balanced", "plain"], default=["balanced", "plain"])
  ap.add_argument("--nonumpy", dest="numpy", action="store_false", help="skip the numpy backend's rows")
  ap.add_argument("--out", default=None, help="JSON (default benchmarks/results/many_counts_<platform>.json)")
  ap.add_argument("--numpy_reps", type=int, default=0, help="the numpy backend alone, alternated this many times")
  a = ap.parse_args()
  loss, keep = synthetic.synthetic_losses(a.M, a.N, a.T, shift=0.3)[:2]
  if a.numpy_reps:
    for counts in a.counts:
      numpy_alternated(loss, keep, a.M, a.subset, counts == "balanced", a.numpy_reps)
    return
  device = jax.devices()[0]
  record = {"date": datetime.date.today().isoformat(), "device": f"{device.platform} ({device.device_kind})",
            "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "jax": jax.__version__, "M": a.M, "subset": a.subset, "N": a.N, "T": a.T, "rows": []}
  out = Path(a.out or ROOT / "benchmarks" / "results" / f"many_counts_{device.platform}.json")
  print(f"six variants, float64, seconds on {record['device']}; the subset is the first {a.subset} of {a.M} models")
  print(f"{'counts':>9} {'models':>7} {'IN counts':>9} {'programs':>8} {'lower':>6} {'compile':>7} {'first':>7} "
        f"{'second':>7} {'numpy':>7} {'max diff':>9}")
  for counts in a.counts:
    rows = {}
    for m in (a.M, a.subset):
      r = measure(np.ascontiguousarray(loss[:m]), np.ascontiguousarray(keep[:m]), counts == "balanced", a.numpy)
      rows[m] = r
      record["rows"].append({"counts": counts, "models": m, **r})
      out.parent.mkdir(parents=True, exist_ok=True)
      out.write_text(json.dumps(record, indent=1) + "\n")
      print(f"{counts:>9} {m:>7} {r['in_counts']:>9} {r['programs']:>8} {r['lower_s']:6.1f} {r['compile_s']:7.1f} "
            f"{r['first_s']:7.2f} {r['second_s']:7.2f} {_num(r['numpy_s'], '7.2f')} {_num(r['max_rel_diff'], '9.1e')}",
            flush=True)
    s, f = rows[a.subset], rows[a.M]
    numpy_ratio = f", numpy {s['numpy_s'] / f['numpy_s']:.2f}x" if a.numpy else ""
    print(f"{counts:>9} subset / full: first call {s['first_s'] / f['first_s']:.2f}x, second "
          f"{s['second_s'] / f['second_s']:.2f}x{numpy_ratio}")
  print(f"wrote {out}")


def numpy_alternated(loss, keep, M, subset, balanced, reps):
  """The numpy backend's six variants on all M models and on the first `subset`, alternated `reps` times."""
  scorings = [lira.Scoring(covariance=c, shared=s, balance_counts=balanced) for c, s in VARIANTS]
  arrays = {m: (np.ascontiguousarray(loss[:m]), np.ascontiguousarray(keep[:m])) for m in (M, subset)}
  seconds = {m: [] for m in arrays}
  for _ in range(reps):
    for m, (loss_m, keep_m) in arrays.items():
      t = time.perf_counter()
      lira.leave_one_out_variants(loss_m, keep_m, scorings)
      seconds[m].append(time.perf_counter() - t)
  full, sub = np.array(seconds[M]), np.array(seconds[subset])
  counts = "balanced" if balanced else "plain"
  print(f"{counts}, numpy, six variants: all {M} models " + " ".join(f"{x:.2f}" for x in full)
        + f" s; the first {subset} " + " ".join(f"{x:.2f}" for x in sub)
        + f" s; subset / full: fastest {sub.min() / full.min():.2f}x, median {np.median(sub) / np.median(full):.2f}x",
        flush=True)


def _num(x, fmt):
  return format(x, fmt) if x is not None else format("-", ">" + fmt.split(".")[0])


if __name__ == "__main__":
  main()
