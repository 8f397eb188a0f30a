"""One block of the traced-count balanced OAS program (lira.balanced_padded.per_canary) against the same block on
another source tree, in one process, the calls alternated: the per-block cost of a change to lira/removal_stream.py
or lira/balanced_padded.py, on the device jax runs on (the CPU here).

  git worktree add /tmp/base <commit> --detach
  python benchmarks/padded_block_ab.py --base /tmp/base                 # M = 448, T = 128, 4 canaries, d = 0..20
  python benchmarks/padded_block_ab.py --base /tmp/base --counts 224,216 --reps 9

The other tree's lira package is copied into a temporary folder as `lira_base` (its imports of lira rewritten), so
both programs are traced and compiled in this process. Each count: a block of B canaries of IN count k of M models
(normal rows, sorted IN-first), the Layout of the counts 214..235 (the first 448 of 512 models: d = M - 2k within
[-32, 32] after widening), OAS class-wise and shared; min and median seconds over the alternated calls, the ratio of
the minima, and the largest difference of the two trees' scores.
"""

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
jax.config.update("jax_enable_x64", True)

from lira import balanced  # noqa: E402
from lira import balanced_padded  # noqa: E402


def base_package(tree):
  """The lira package of another source tree, imported as lira_base."""
  folder = Path(tempfile.mkdtemp())
  shutil.copytree(Path(tree) / "lira", folder / "lira_base")
  for path in (folder / "lira_base").rglob("*.py"):
    text = path.read_text()
    text = re.sub(r"\bfrom lira import", "from lira_base import", text)
    text = re.sub(r"\bfrom lira\.", "from lira_base.", text)
    path.write_text(text)
  sys.path.insert(0, str(folder))
  from lira_base import balanced_padded as base
  return base


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--base", required=True, help="a checkout of the commit to compare against")
  ap.add_argument("--M", type=int, default=448)
  ap.add_argument("--D", type=int, default=128)
  ap.add_argument("--B", type=int, default=4)
  ap.add_argument("--counts", default="224,222,220,216,214")
  ap.add_argument("--reps", type=int, default=7)
  a = ap.parse_args()
  base = base_package(a.base)
  rng = np.random.default_rng(0)
  counts = list(range(214, 236))
  lays = {"new": balanced_padded.layout(counts, a.M), "base": base.layout(counts, a.M)}
  valid = jnp.ones((a.B, a.D), bool)
  print(f"M = {a.M}, D = {a.D}, {a.B} canaries a block, {jax.devices()[0].platform}; ms per block, min (median)")
  for shared in (False, True):
    opts = dict(oas=True, shared=shared, offline=False, floor=1e-8)

    def unpacked(fn, lay):  # per_canary returns (scores, its buffer) in newer trees, scores in older ones
      def f(x, k_B, first):
        out = fn(x, k_B, first, valid, lay, **opts)
        return out[0] if isinstance(out, tuple) else out
      return jax.jit(f)
    programs = {"new": unpacked(balanced_padded.per_canary, lays["new"]), "base": unpacked(base.per_canary,
                                                                                            lays["base"])}
    for k in (int(c) for c in a.counts.split(",")):
      x = jnp.asarray(rng.normal(size=(a.B, a.M, a.D)))
      first = balanced.first_after(jnp.asarray(np.tile(np.arange(a.M), (a.B, 1))), k)
      k_B = jnp.full((a.B,), k)
      out = {name: np.asarray(f(x, k_B, first)) for name, f in programs.items()}
      seconds = {name: [] for name in programs}
      for _ in range(a.reps):
        for name, f in programs.items():
          t = time.perf_counter()
          jax.block_until_ready(f(x, k_B, first))
          seconds[name].append(time.perf_counter() - t)
      new, old = np.array(seconds["new"]) * 1e3, np.array(seconds["base"]) * 1e3
      print(f"{'shared' if shared else 'class-wise':>10} k = {k} (d = {a.M - 2 * k:+d}): new {new.min():6.1f} "
            f"({np.median(new):6.1f}), base {old.min():6.1f} ({np.median(old):6.1f}), new / base "
            f"{new.min() / old.min():.2f}, max diff {np.abs(out['new'] - out['base']).max():.1e}", flush=True)


if __name__ == "__main__":
  main()
