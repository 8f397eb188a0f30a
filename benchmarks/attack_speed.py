"""Seconds per call of each attacks.* function on N = 100,000 rows of T = 128 (goal: under 1 s each).

  python benchmarks/attack_speed.py                      # N = 100,000, T = 128, J = 5, 3 calls each
  python benchmarks/attack_speed.py --N 1000 --reps 1 --out /tmp/a.json   # smoke test

Inputs are synthetic float32 per-token arrays as a features folder stores them: lp in (-10, 0), NaN at position 0
and at right padding (text lengths uniform in 16..T), mu, sigma alike, texts of ~400 ASCII characters for Zlib.
Neighbourhood gets J neighbours per text ([N, J, T]; --J). Each function is called once untimed (first-touch
page faults), then --reps times; the median is reported. The float32 -> float64 conversion of the inputs
(attacks/rows.py) is part of each call, as it is for a caller.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import attacks  # noqa: E402


def per_token(rng, shape, lengths_N, low, high):
  """float32 [N, T] values in [low, high) with NaN at position 0 and past each row's length."""
  x_NxT = rng.uniform(low, high, shape).astype(np.float32)
  valid_NxT = (np.arange(shape[1]) >= 1) & (np.arange(shape[1]) < lengths_N[:, None])
  return np.where(valid_NxT, x_NxT, np.nan).astype(np.float32)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--N", type=int, default=100_000)
  ap.add_argument("--T", type=int, default=128)
  ap.add_argument("--J", type=int, default=5, help="neighbours per text")
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "attack_speed_cpu.json"))
  args = ap.parse_args()
  N, T, J = args.N, args.T, args.J
  rng = np.random.default_rng(0)
  lengths_N = rng.integers(16, T + 1, N)
  lp = per_token(rng, (N, T), lengths_N, -10, 0)
  mu = per_token(rng, (N, T), lengths_N, -6, -1)
  sigma = per_token(rng, (N, T), lengths_N, 0.5, 3)
  cond = per_token(rng, (N, T), lengths_N, -10, 0)
  cond_member = per_token(rng, (N, T), lengths_N, -10, 0)
  ref = per_token(rng, (N, T), lengths_N, -10, 0)
  neighbours = np.where(np.isnan(lp)[:, None], np.nan, rng.uniform(-10, 0, (N, J, T))).astype(np.float32)
  words = np.array(["the", "of", "memorised", "canary", "token", "model", "shadow", "text", "prefix", "likelihood"])
  texts = [" ".join(words[rng.integers(0, len(words), 60)]) for _ in range(N)]
  calls = {
      "loss": lambda: attacks.loss(lp),
      "zlib": lambda: attacks.zlib(lp, texts),
      "min_k": lambda: attacks.min_k(lp, 0.2),
      "min_k_pp": lambda: attacks.min_k_pp(lp, mu, sigma, 0.2),
      "reference": lambda: attacks.reference(lp, ref),
      f"neighbourhood (J={J})": lambda: attacks.neighbourhood(lp, neighbours),
      "recall": lambda: attacks.recall(lp, cond),
      "con_recall": lambda: attacks.con_recall(lp, cond, cond_member, 0.5),
  }
  res = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
             cpus=os.cpu_count(), numpy=np.__version__, N=N, T=T, J=J, reps=args.reps,
             loadavg_1min_start=os.getloadavg()[0], seconds={})
  print(f"N = {N:,}, T = {T}, J = {J}; median of {args.reps} calls (min)")
  for name, fn in calls.items():
    out = fn()
    assert out.shape == (N,) and out.dtype == np.float64 and np.isfinite(out).all(), name
    ts = []
    for _ in range(args.reps):
      t = time.perf_counter()
      fn()
      ts.append(time.perf_counter() - t)
    res["seconds"][name] = dict(median=float(np.median(ts)), min=float(np.min(ts)), times=ts)
    print(f"{name:22} {np.median(ts):7.3f} s ({np.min(ts):.3f})", flush=True)
  res["loadavg_1min_end"] = os.getloadavg()[0]
  tmp = args.out + ".tmp"
  with open(tmp, "w") as f:
    json.dump(res, f, indent=2)
  os.replace(tmp, args.out)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
