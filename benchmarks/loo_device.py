"""Six-variant leave-one-out on the jax backend's device against the numpy backend, and `evaluate --backend=jax`.

  python benchmarks/loo_device.py                                   # M = 64 and 484, N = 10,000, T = 128, then evaluate
  python benchmarks/loo_device.py --Ms 64 --noevaluate              # a CPU-sized run
  python benchmarks/loo_device.py --Ms 8 --N 200 --T 16 --noevaluate --out /tmp/loo_device.json   # smoke test
  python benchmarks/loo_device.py --Ms 448 --keep_of 512 --counts balanced --noevaluate   # many IN counts

Inputs: lira.synthetic.synthetic_losses(shift=0.3) at each M (float32 losses, LiRA's balanced keep matrix). For each M
and each of balanced / plain leave-one-out, all six variants in one lira.leave_one_out_variants call:
- the jax backend in float64 and float32, twice each: the first call includes the compiles, the second does not;
- the numpy backend (float64, the host's threads) on the same arrays, once;
- the largest relative difference max |a - b| / max(1, |b|) of jax float64 and of jax float32 against numpy;
- on a CPU, float64 again through the device pipeline (lira.loo_jax.PIPELINE_ON_CPU_ENV=1): backend="jax" scores
  float64 with the numpy backend where jax's devices are CPUs, so the jax float64 column is numpy's code there;
- on a GPU, float32 again with jax's default eigh there (lira.gram.GPU_FLOAT32_EIGH = None: Jacobi iteration up to
  32 rows) beside the QR the fits ask for: its time and its difference from float64.
Then (unless --noevaluate) `python -m experiments.evaluate --run_dir=D --backend=jax --noprogress` on a make_synthetic
folder at the largest M, timed end to end as a user runs it, and the same with the numpy backend.
--keep_of K draws the arrays for K models and keeps the first M of them, as `partial_run` does with a run: the IN
counts then differ between canaries (tens of counts at M = 448 of 512), where LiRA's balanced keep matrix of M
models gives every canary M / 2. The row records how many distinct counts there are and how many programs they
compile (one for the run's counts, lira/balanced_padded.py, and one per count whose balanced fits take its kept rows).
Writes one JSON (device, versions, every timing and difference) and prints a table. Runs as it is on a GPU machine
with jax, flax, optax, orbax, numpy, scipy, scikit-learn and matplotlib installed and the project importable.
The JSON is rewritten after every row, so a run stopped by a time limit keeps what it measured; each evaluate
command has its own limit (--evaluate_timeout).
"""

import argparse
import datetime
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# The jax process of this script and each `evaluate --backend=jax` it starts share the GPU: neither grabs 75% of it.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import lira  # noqa: E402
from lira import balanced_padded  # noqa: E402
from lira import gram  # noqa: E402
from lira import loo_device  # noqa: E402
from lira import loo_jax  # noqa: E402
from lira import synthetic  # noqa: E402

VARIANTS = [(c, s) for c in ("univariate", "independent", "oas") for s in (False, True)]


def timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def six(loss, keep, progress=False, **fields):
  """progress: leave_one_out_variants' block bar on stderr (it starts after the programs compile)."""
  scorings = [lira.Scoring(covariance=c, shared=s, **fields) for c, s in VARIANTS]
  return np.stack(lira.leave_one_out_variants(loss, keep, scorings, progress=progress))


def rel_diff(a, b):
  return float((np.abs(a - b) / np.maximum(1.0, np.abs(b))).max())


def one_count_compile(M, T, k, balanced, precision, key, B=64):
  """(seconds to lower, seconds to compile) the six-variant block of IN count k's program (key: k itself, or its
  run's lira.balanced_padded.Layout), on B canaries: what each of a many-count run's programs costs the host
  (lowering traces Python under the GIL; compiling runs in XLA)."""
  from lira.loo_jax import x64_context
  scorings = [lira.Scoring(covariance=c, shared=s, balance_counts=balanced, backend="jax", precision=precision)
              for c, s in VARIANTS]
  spec = loo_device.Spec.of(scorings, False)
  keep = np.zeros((M, B), bool)
  keep[:k] = True
  with x64_context(precision):
    start = time.perf_counter()
    lowered = loo_device.jitted().lower(jax.ShapeDtypeStruct((M, B, T), np.float32),
                                        jax.ShapeDtypeStruct((B, T), bool), keep, (None,) * len(VARIANTS),
                                        spec=spec, k=key)
    lowered_s = time.perf_counter() - start
    lowered.compile()
  return lowered_s, time.perf_counter() - start - lowered_s


def run_loo(M, N, T, seed, save=None, keep_of=None, modes=("balanced", "plain"), progress=False):
  score = functools.partial(six, progress=progress)
  loss, keep, _ = synthetic.synthetic_losses(num_models=max(M, keep_of or M), num_canaries=N, seq_len=T, shift=0.3,
                                             seed=seed)
  loss, keep = loss[:M], keep[:M]
  in_counts = len(np.unique(keep.sum(axis=0)))
  rows = []
  for balanced in [mode == "balanced" for mode in modes]:
    row = {"M": M, "N": N, "T": T, "balance_counts": balanced, "keep_of": keep_of or M, "in_counts": in_counts}
    if in_counts > 1:  # what one program costs, before the calls that build all of them
      counts = sorted({int(c) for c in keep.sum(axis=0)})
      keys = balanced_padded.program_keys(counts, M, balanced=balanced)
      row["programs"] = len(set(keys.values()))
      k = int(np.median(keep.sum(axis=0)))
      row["one_count_lower_s"], row["one_count_compile_s"] = one_count_compile(M, T, k, balanced, "float64", keys[k])
      print(f"M = {M}, the program of IN count {k}, float64: lowered in {row['one_count_lower_s']:.2f} s, compiled "
            f"in {row['one_count_compile_s']:.2f} s; {in_counts} counts, {row['programs']} programs", flush=True)
    for precision in ("float64", "float32"):
      jax_llr, first = timed(lambda: score(loss, keep, balance_counts=balanced, backend="jax", precision=precision))
      _, second = timed(lambda: score(loss, keep, balance_counts=balanced, backend="jax", precision=precision))
      row[f"jax_{precision}_first_s"], row[f"jax_{precision}_s"] = first, second
      print(f"M = {M}, {'balanced' if balanced else 'plain'}, jax {precision}: {second:.2f} s (first {first:.2f} s)",
            flush=True)
      row[f"jax_{precision}_llr"] = jax_llr
    if jax.default_backend() == "cpu":  # backend="jax" scores float64 with numpy here; the device pipeline forced
      os.environ[loo_jax.PIPELINE_ON_CPU_ENV] = "1"
      pipe_llr, row["jax_float64_pipeline_first_s"] = timed(
          lambda: score(loss, keep, balance_counts=balanced, backend="jax", precision="float64"))
      _, row["jax_float64_pipeline_s"] = timed(
          lambda: score(loss, keep, balance_counts=balanced, backend="jax", precision="float64"))
      del os.environ[loo_jax.PIPELINE_ON_CPU_ENV]
      row["jax_float64_pipeline_rel_diff"] = rel_diff(pipe_llr, row["jax_float64_llr"])
      print(f"M = {M}, jax float64, the device pipeline on the CPU: {row['jax_float64_pipeline_s']:.2f} s (first "
            f"{row['jax_float64_pipeline_first_s']:.2f} s)", flush=True)
    if jax.default_backend() == "gpu":  # float32 with jax's default GPU eigh (Jacobi up to 32 rows) beside QR
      gram.GPU_FLOAT32_EIGH = None
      jax.clear_caches()
      loo_device.jitted.cache_clear()
      jacobi_llr, row["jax_float32_jacobi_first_s"] = timed(
          lambda: score(loss, keep, balance_counts=balanced, backend="jax", precision="float32"))
      _, row["jax_float32_jacobi_s"] = timed(
          lambda: score(loss, keep, balance_counts=balanced, backend="jax", precision="float32"))
      gram.GPU_FLOAT32_EIGH = "qr"
      jax.clear_caches()
      loo_device.jitted.cache_clear()
    numpy_llr, row["numpy_s"] = timed(lambda: score(loss, keep, balance_counts=balanced))
    if "jax_float32_jacobi_s" in row:
      row["jax_float32_jacobi_vs_float64_rel_diff"] = rel_diff(jacobi_llr, row["jax_float64_llr"])
      print(f"M = {M}, float32 with jax's default GPU eigh: {row['jax_float32_jacobi_s']:.2f} s, "
            f"{row['jax_float32_jacobi_vs_float64_rel_diff']:.1e} from float64", flush=True)
    f32, f64 = row.pop("jax_float32_llr"), row.pop("jax_float64_llr")
    row["jax_float64_rel_diff"] = rel_diff(f64, numpy_llr)
    row["jax_float32_rel_diff"] = rel_diff(f32, numpy_llr)
    row["jax_float32_vs_float64_rel_diff"] = rel_diff(f32, f64)  # both on the device
    rows.append(row)
    print(json.dumps(row), flush=True)
    if save:
      save(rows)
  return rows


def run_evaluate(M, N, T, timeout):
  out = {}
  with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
    run_dir = os.path.join(tmp, f"synthetic{M}")
    subprocess.run([sys.executable, "-m", "experiments.make_synthetic", f"--run_dir={run_dir}", f"--num_models={M}",
                    f"--num_canaries={N}", f"--seq_len={T}", "--noprogress"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    for backend in ("jax", "numpy"):
      cmd = [sys.executable, "-m", "experiments.evaluate", f"--run_dir={run_dir}", f"--backend={backend}",
             "--noprogress"]
      try:
        _, seconds = timed(lambda: subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                                                  timeout=timeout))
      except subprocess.TimeoutExpired:
        print(f"evaluate --backend={backend} at M={M}: over {timeout} s, stopped", flush=True)
        out[f"evaluate_{backend}_s"] = None
        continue
      out[f"evaluate_{backend}_s"] = seconds
      print(f"evaluate --backend={backend} at M={M}: {seconds:.1f} s", flush=True)
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--Ms", type=int, nargs="+", default=[64, 484])
  parser.add_argument("--N", type=int, default=10000)
  parser.add_argument("--T", type=int, default=128)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--keep_of", type=int, default=None,
                      help="draw the arrays for this many models and keep the first M (many IN counts)")
  parser.add_argument("--counts", nargs="+", choices=["balanced", "plain"], default=["balanced", "plain"],
                      help="balanced and/or plain leave-one-out")
  parser.add_argument("--noevaluate", dest="evaluate", action="store_false")
  parser.add_argument("--progress", action="store_true", help="show each leave-one-out call's blocks on stderr (on "
                      "many IN counts: how long the compiles took, and the blocks' pace)")
  parser.add_argument("--evaluate_timeout", type=float, default=240, help="seconds per evaluate command")
  parser.add_argument("--out", default=None, help="JSON file (default benchmarks/results/loo_device_<platform>.json)")
  args = parser.parse_args()
  device = jax.devices()[0]
  info = {"date": datetime.date.today().isoformat(), "command": " ".join(sys.argv), "platform": device.platform,
          "device": device.device_kind, "device_count": jax.device_count(), "cpu_count": os.cpu_count(),
          "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
          "jax": jax.__version__, "numpy": np.__version__}
  print(json.dumps(info), flush=True)
  out = Path(args.out or ROOT / "benchmarks" / "results" / f"loo_device_{device.platform}.json")
  out.parent.mkdir(parents=True, exist_ok=True)
  result = {**info, "rows": []}

  def save(rows):  # after every row, so a run stopped by a time limit keeps what it measured
    result["rows"] = list(rows)
    out.write_text(json.dumps(result, indent=1) + "\n")

  done = []
  for M in args.Ms:
    done += run_loo(M, args.N, args.T, args.seed, save=lambda rows: save(done + rows), keep_of=args.keep_of,
                    modes=args.counts, progress=args.progress)
  if args.evaluate:
    result["evaluate"] = {"M": max(args.Ms), **run_evaluate(max(args.Ms), args.N, args.T, args.evaluate_timeout)}
    save(done)
  print(f"\nsix variants, seconds on {device.device_kind} ({device.platform}) against numpy on {os.cpu_count()} CPU "
        "cores; first calls (compiles included) in brackets")
  print(f"{'M':>5} {'counts':>9} {'jax f64':>15} {'jax f32':>15} {'numpy':>8} {'f64 diff':>9} {'f32 diff':>9} "
        f"{'f32-f64':>9} {'IN counts':>9}")
  for r in done:
    print(f"{r['M']:>5} {'balanced' if r['balance_counts'] else 'plain':>9} "
          f"{r['jax_float64_s']:>6.2f} ({r['jax_float64_first_s']:>6.2f}) "
          f"{r['jax_float32_s']:>6.2f} ({r['jax_float32_first_s']:>6.2f}) {r['numpy_s']:>8.2f} "
          f"{r['jax_float64_rel_diff']:>9.1e} {r['jax_float32_rel_diff']:>9.1e} "
          f"{r['jax_float32_vs_float64_rel_diff']:>9.1e} {r.get('in_counts', 1):>9}")
  if args.evaluate:
    e = result["evaluate"]
    print(f"evaluate at M = {e['M']}: " + ", ".join(
        f"--backend={b} " + ("over the time limit" if e[f"evaluate_{b}_s"] is None else f"{e[f'evaluate_{b}_s']:.1f} s")
        for b in ("jax", "numpy")))
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
