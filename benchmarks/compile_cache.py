"""The device pipeline's first call with JAX's persistent compilation cache (JAX_COMPILATION_CACHE_DIR) against
without it: a model subset with many IN counts and the full run, each call in a fresh process.

  python benchmarks/compile_cache.py                 # 3 rounds, the first 448 of 512 synthetic models and all 512

Each round, for the subset and for the full run (the six balanced variants, float64, as benchmarks/first_call_ab.py
runs them; on a CPU the device pipeline is forced): a process without the cache, one with an empty cache folder
(it compiles and writes the programs), and one more with that folder (it reads them). Prints each call's first and
second seconds and the medians of the first calls.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import first_call_ab  # noqa: E402

KINDS = ("no cache", "empty cache", "warm cache")


def call(M, m, N, T, cache_dir):
  """(first, second) seconds of one fresh process; cache_dir None: JAX's persistent cache off."""
  env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
  if cache_dir is not None:
    env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
  out = subprocess.run([sys.executable, "-c", first_call_ab.ONE_CALL, str(first_call_ab.ROOT), str(M), str(m), str(N),
                        str(T), "jax"], capture_output=True, text=True, check=True, env=env).stdout.split()
  return float(out[-2]), float(out[-1])


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  first_call_ab.add_shape_flags(ap, reps=3)
  a = ap.parse_args()
  firsts = {(m, kind): [] for m in (a.subset, a.M) for kind in KINDS}
  for rep in range(a.reps):
    for m in (a.subset, a.M):
      with tempfile.TemporaryDirectory() as cache:
        for kind, cache_dir in zip(KINDS, (None, cache, cache)):
          first, second = call(a.M, m, a.N, a.T, cache_dir)
          firsts[(m, kind)].append(first)
          print(f"round {rep + 1}, {m:4d} of {a.M} models, {kind:11s}: first {first:6.2f} s, second {second:6.2f} s",
                flush=True)
  print(f"first calls, medians over {a.reps} rounds (seconds):")
  print(f"{'models':>8s} " + " ".join(f"{k:>12s}" for k in KINDS))
  for m in (a.subset, a.M):
    print(f"{m:8d} " + " ".join(f"{statistics.median(firsts[(m, k)]):12.2f}" for k in KINDS))
  sub, full = ({k: statistics.median(firsts[(m, k)]) for k in KINDS} for m in (a.subset, a.M))
  print("subset / full: " + ", ".join(f"{k} {sub[k] / full[k]:.2f}x" for k in KINDS))


if __name__ == "__main__":
  main()
