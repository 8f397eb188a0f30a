"""Large runs without large memory: memory-mapped losses give the same scores and shadow sweeps as in-memory ones
(the peak memory, set by the block: tests/e2e/test_streaming_memory.py)."""

import numpy as np

import lira
from lira import evaluation
from lira import scoring as scoring_lib
from test_loo import make_losses


def test_memory_mapped_equals_in_memory(tmp_path):
  loss, keep = make_losses(M=10, N=30, T=8, seed=1)
  np.save(tmp_path / "losses.npy", loss)
  mapped = np.load(tmp_path / "losses.npy", mmap_mode="r")
  for cov, shared in (("oas", True), ("independent", False)):
    kw = dict(covariance=cov, shared=shared, reduction="min:3", block_size=7)
    np.testing.assert_array_equal(lira.leave_one_out(mapped, keep, **kw), lira.leave_one_out(loss, keep, **kw))
  sweep = dict(counts=[6, 10], draws=2, variants=scoring_lib.VARIANTS[:3], progress=False)
  assert evaluation.shadow_count_sweep(mapped, keep, **sweep) == evaluation.shadow_count_sweep(loss, keep, **sweep)
