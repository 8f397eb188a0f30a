"""Scoring a memory-mapped run in a fresh interpreter (a subprocess): the peak traced memory is set by the block, not
by the size of the losses."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_peak_memory_is_set_by_the_block(tmp_path):
  # 8 models x 16,384 canaries x 256 positions: 134 MB of float32 on disk, 268 MB as one float64 copy. Streamed,
  # the checks hold one chunk of 2**22 losses (lira.transforms.check_losses: its float32 values and three bool
  # masks, 7 bytes each, 29 MB) and the scoring one block of 64 canaries, under 20 float64 arrays of [8, 64, 256]
  # at once (1 MB each), plus llr_MxN (1 MB): 40 MB bounds either phase and is below a third of the array itself.
  code = f"""
    import tracemalloc, numpy as np, lira
    rng = np.random.default_rng(0)
    M, N, T = 8, 16384, 256
    keep = rng.uniform(size=(M, N)).argsort(0) < M // 2
    out = np.lib.format.open_memmap("{tmp_path}/losses.npy", mode="w+", dtype=np.float32, shape=(M, N, T))
    for lo in range(0, N, 2048):
      out[:, lo:lo + 2048] = rng.gamma(2.0, 1.0, size=(M, 2048, T))
    out.flush(); del out
    loss = np.load("{tmp_path}/losses.npy", mmap_mode="r")
    tracemalloc.start()
    for cov in ("independent", "oas"):
      lira.leave_one_out(loss, keep, covariance=cov, shared=True, block_size=64, num_threads=1)
    print(tracemalloc.get_traced_memory()[1])
  """
  env = {**os.environ, "PYTHONPATH": ROOT}
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  peak = int(out.stdout.split()[-1])
  assert peak < 40e6, f"peak {peak / 1e6:.0f} MB"
