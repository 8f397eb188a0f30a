"""lira.nonmember_pairs against a brute-force loop over every (model, canary) pair."""

import numpy as np
import pytest

from lira import nonmember_pairs


def brute_force(score_MxN, keep_MxN, top):
  pairs = [(-score_MxN[m, n], n, m) for m in range(score_MxN.shape[0]) for n in range(score_MxN.shape[1])
           if not keep_MxN[m, n] and np.isfinite(score_MxN[m, n])]
  pairs.sort()
  chosen = pairs[:top]
  held = {}
  for _, n, _ in chosen:
    held[n] = held.get(n, 0) + 1
  ranked = sorted(held, key=lambda n: (-held[n], n))
  return chosen, len(pairs), ranked, [held[n] for n in ranked]


@pytest.mark.parametrize("seed,top", [(0, 1), (1, 7), (2, 40), (3, 1000)])
def test_equals_brute_force_with_ties_and_nans(seed, top):
  rng = np.random.default_rng(seed)
  score = np.round(rng.normal(size=(9, 13)), 1)  # rounded: many ties
  score[rng.random(score.shape) < 0.1] = np.nan
  keep = rng.random(score.shape) < 0.5
  got = nonmember_pairs.top_nonmember_pairs(score, keep, top)
  chosen, n_neg, ranked, counts = brute_force(score, keep, top)
  assert got["n_nonmember"] == n_neg
  np.testing.assert_array_equal(got["canary_K"], [n for _, n, _ in chosen])
  np.testing.assert_array_equal(got["model_K"], [m for _, _, m in chosen])
  np.testing.assert_array_equal(got["score_K"], [-s for s, _, _ in chosen])
  np.testing.assert_array_equal(got["canaries"], ranked)
  np.testing.assert_array_equal(got["pairs"], counts)
  np.testing.assert_array_equal(got["out_models"], [(~keep[:, n] & np.isfinite(score[:, n])).sum() for n in ranked])


def test_top_count_is_the_pairs_above_the_fpr_threshold():
  assert nonmember_pairs.top_count(80_000, 1e-4) == 8
  assert nonmember_pairs.top_count(160_000, 1e-3) == 160
  assert nonmember_pairs.top_count(500, 1e-4) == 1  # fewer than 1 / FPR pairs: the single highest


def test_fpr_counts_the_pairs_above_its_threshold():
  rng = np.random.default_rng(4)
  score, keep = rng.normal(size=(10, 30)), rng.random((10, 30)) < 0.5
  n_neg = int((~keep).sum())
  by_fpr = nonmember_pairs.top_nonmember_pairs(score, keep, fpr=0.05)
  by_top = nonmember_pairs.top_nonmember_pairs(score, keep, top=nonmember_pairs.top_count(n_neg, 0.05))
  assert by_fpr["canary_K"].size == int(0.05 * n_neg)
  np.testing.assert_array_equal(by_fpr["canary_K"], by_top["canary_K"])
  with pytest.raises(ValueError, match="exactly one of top and fpr"):
    nonmember_pairs.top_nonmember_pairs(score, keep, top=3, fpr=0.05)


def test_shapes_must_match():
  with pytest.raises(ValueError, match="must both be"):
    nonmember_pairs.top_nonmember_pairs(np.zeros((3, 4)), np.zeros((3, 5), bool), 2)
