"""Tests for training.canaries: average- and worst-case canaries, the keep matrix, per-model indices."""

import numpy as np
import pytest
from scipy import stats

from lira import synthetic
from training import canaries


def test_average_case_canaries_are_distinct_heldout_rows():
  rng = np.random.default_rng(0)
  heldout_SxT = rng.integers(1, 50, size=(40, 6)).astype(np.int32)
  heldout_SxT[10] = heldout_SxT[3]  # a duplicate row: only one of the two may be drawn
  canaries_NxT = canaries.average_case_canaries(heldout_SxT, 39, seed=1)
  assert canaries_NxT.dtype == np.int32 and canaries_NxT.shape == (39, 6)
  rows = {tuple(r) for r in heldout_SxT.tolist()}
  assert all(tuple(c) in rows for c in canaries_NxT.tolist())
  assert len({tuple(c) for c in canaries_NxT.tolist()}) == 39
  np.testing.assert_array_equal(canaries.average_case_canaries(heldout_SxT, 39, seed=1), canaries_NxT)
  assert not np.array_equal(canaries.average_case_canaries(heldout_SxT, 39, seed=2), canaries_NxT)


def test_average_case_canaries_error_names_both_counts():
  heldout_SxT = np.arange(20, dtype=np.int32).reshape(5, 4)
  with pytest.raises(ValueError, match=r"num_canaries=6 .* 5 distinct"):
    canaries.average_case_canaries(heldout_SxT, 6, seed=0)


def test_worst_case_canaries_skip_excluded_ids_and_are_uniform():
  vocab, exclude = 50, (0, 3)
  canaries_NxT = canaries.worst_case_canaries(400, 25, vocab, seed=0, exclude_ids=exclude)
  assert canaries_NxT.dtype == np.int32 and canaries_NxT.shape == (400, 25)
  assert not np.isin(canaries_NxT, exclude).any()
  assert canaries_NxT.min() >= 0 and canaries_NxT.max() < vocab
  counts = np.bincount(canaries_NxT.ravel(), minlength=vocab)
  allowed = np.setdiff1d(np.arange(vocab), exclude)
  # 10,000 draws over 48 equally likely ids; the seed is fixed, so the p-value is one fixed number on every run
  # and machine (numpy's Generator streams are stable): 1e-4 flags only a sampler that is not uniform.
  assert stats.chisquare(counts[allowed]).pvalue > 1e-4
  np.testing.assert_array_equal(canaries.worst_case_canaries(400, 25, vocab, seed=0, exclude_ids=exclude),
                                canaries_NxT)


def test_worst_case_canaries_errors_name_the_field():
  with pytest.raises(ValueError, match="vocab_size"):
    canaries.worst_case_canaries(3, 4, 2, seed=0, exclude_ids=(0, 1))
  with pytest.raises(ValueError, match="seq_len"):
    canaries.worst_case_canaries(3, 0, 10, seed=0)
  with pytest.raises(ValueError, match="num_canaries"):
    canaries.worst_case_canaries(-1, 4, 10, seed=0)


def test_keep_matrix_is_balanced_reproducible_and_the_reference_construction():
  keep_MxN = canaries.keep_matrix(8, 300, seed=5)
  assert keep_MxN.dtype == bool and keep_MxN.shape == (8, 300)
  np.testing.assert_array_equal(keep_MxN.sum(0), 4)
  order_MxN = np.random.default_rng(5).uniform(size=(8, 300)).argsort(0)
  np.testing.assert_array_equal(keep_MxN, order_MxN < 4)
  np.testing.assert_array_equal(keep_MxN, synthetic.keep_matrix(8, 300, 5))
  assert not np.array_equal(canaries.keep_matrix(8, 300, seed=6), keep_MxN)
  for bad in (0, 7):
    with pytest.raises(ValueError, match="num_models"):
      canaries.keep_matrix(bad, 10, seed=0)


def test_training_indices_are_shared_examples_then_in_canaries():
  keep_MxN = np.array([[True, False, True], [False, True, False]])
  np.testing.assert_array_equal(canaries.training_indices(4, keep_MxN, 0), [0, 1, 2, 3, 4, 6])
  np.testing.assert_array_equal(canaries.training_indices(4, keep_MxN, 1), [0, 1, 2, 3, 5])
  assert canaries.training_indices(4, keep_MxN, 1).dtype == np.int64
  keep_MxN = canaries.keep_matrix(6, 50, seed=0)  # brute force against the definition
  for m in range(6):
    want = list(range(10)) + [10 + n for n in range(50) if keep_MxN[m, n]]
    assert canaries.training_indices(10, keep_MxN, m).tolist() == want
  with pytest.raises(ValueError, match="model"):
    canaries.training_indices(10, keep_MxN, 6)
