"""Where a leave-one-out block's time goes: features and each variant's block scoring, per canary, on one thread.

  python benchmarks/lira_loo_blocks.py --M 484 --B 100 --T 128

Times lira.gaussian's block kernels (the per-token statistic, position_features, loo_diag, gram.loo_oas) on one block
of B random canaries with BLAS on one thread, best of --reps; prints ms per canary and the load average.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import threadpoolctl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lira import gaussian, gram, transforms  # noqa: E402
from lira.synthetic import keep_matrix  # noqa: E402


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--M", type=int, default=484)
  parser.add_argument("--B", type=int, default=100)
  parser.add_argument("--T", type=int, default=128)
  parser.add_argument("--reps", type=int, default=2)
  args = parser.parse_args(argv)
  rng = np.random.default_rng(0)
  keep_MxB = keep_matrix(args.M, args.B, 0)
  loss_MxBxT = np.logaddexp(0, -rng.normal(1, 1.5, size=(args.M, args.B, args.T))).astype(np.float32)

  def timed(name, f):
    best, out = np.inf, None
    for _ in range(args.reps):
      start = time.perf_counter()
      out = f()
      best = min(best, time.perf_counter() - start)
    print(f"{name:<28} {best / args.B * 1e3:7.2f} ms/canary", flush=True)
    return out

  print(f"M={args.M} B={args.B} T={args.T}, one BLAS thread; load average {os.getloadavg()}")
  with threadpoolctl.threadpool_limits(1, user_api="blas"):
    timed("logit statistic", lambda: transforms.logit_scale(loss_MxBxT))
    x, valid = timed("features (all positions)", lambda: gaussian.position_features(loss_MxBxT, None, None, "logit"))
    xu, vu = gaussian.univariate(x, valid)
    for shared in (False, True):
      kind = "shared" if shared else "class-wise"
      timed(f"univariate {kind}", lambda: gaussian.loo_diag(xu, keep_MxB, vu, shared, False, 1.0, 1e-8, None))
      timed(f"independent {kind}", lambda: gaussian.loo_diag(x, keep_MxB, valid, shared, False, 1.0, 1e-8, None))
      timed(f"OAS {kind}", lambda: gram.loo_oas(x, keep_MxB, valid, shared=shared, offline=False, sign=1.0,
                                                 floor=1e-8))
  print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
  main()
