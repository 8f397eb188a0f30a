"""How many canary slots (padding included) the jax backend scores for a model subset with many IN counts: blocks
of one IN count each at the run's block size, against blocks of one program each (the run's traced-count program,
lira/balanced_padded.py: a block mixes counts), sized to the program's canaries where it has fewer than a block
(lira.loo_jax._blocks).

  python benchmarks/padded_blocks.py                       # the first 448 of 512 models, 5,000 canaries
  python benchmarks/padded_blocks.py --M 64 --keep_of 484 --N 1000

The keep matrix is LiRA's (every canary IN for half of keep_of models, drawn per canary), cut to its first M models as
`partial_run` does. Block sizes are the canaries per block (on a GPU lira.loo_jax.block_size picks it from free
memory; 1,024 and more at T = 128 on one H100). Counts only: no scoring runs, so it takes a second anywhere.
"""

import argparse

import numpy as np

from lira import balanced_padded
from lira import loo_jax


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--M", type=int, default=448)
  ap.add_argument("--keep_of", type=int, default=512)
  ap.add_argument("--N", type=int, default=5000)
  ap.add_argument("--block_sizes", default="64,256,1024,4096")
  ap.add_argument("--seed", type=int, default=0)
  a = ap.parse_args()
  rng = np.random.default_rng(a.seed)
  keep_MxN = np.stack([rng.permutation(a.keep_of) < a.keep_of // 2 for _ in range(a.N)], axis=1)[:a.M]
  n_in_N = keep_MxN.sum(axis=0)
  counts = sorted(set(n_in_N.tolist()))
  key = balanced_padded.program_keys(counts, a.M)
  programs = list(dict.fromkeys(key.values()))
  by_program = np.array([programs.index(key[int(c)]) for c in n_in_N])
  by_count = np.array([counts.index(int(c)) for c in n_in_N])
  print(f"first {a.M} of {a.keep_of} models, {a.N} canaries: {len(counts)} IN counts, {len(programs)} programs")
  print(f"{'block size':>10} {'per count':>10} {'per program':>12} {'sized':>7} {'ratio':>6}   (canary slots)")
  for bs in map(int, a.block_sizes.split(",")):
    per_count = bs * len(loo_jax._blocks(by_count, a.N, bs))
    per_program = bs * len(loo_jax._blocks(by_program, a.N, bs))
    sized = sum(size for _, size in loo_jax._blocks(by_program, a.N, bs))
    print(f"{bs:>10} {per_count:>10} {per_program:>12} {sized:>7} {per_count / sized:>6.2f}")

if __name__ == "__main__":
  main()
