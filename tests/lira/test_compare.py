"""lira.compare.paired_difference against a brute-force paired bootstrap that expands every resample with sklearn."""

import numpy as np
import pytest

from lira import compare
from lira import metrics
from lira.errors import InputError


def _brute_force(a_MxN, b_MxN, labels_MxN, fprs, n_boot, seed):
  """Each replicate: repeat every canary's column by its bootstrap count and score both attacks with sklearn."""
  w_BxN = metrics.bootstrap_weights(a_MxN.shape[1], n_boot, seed)
  diffs_BxF, auc_B = [], []
  for w_N in w_BxN:
    cols = np.repeat(np.arange(a_MxN.shape[1]), w_N)
    lab = labels_MxN[:, cols].ravel()
    if lab.all() or not lab.any():
      continue
    sa, sb = a_MxN[:, cols].ravel(), b_MxN[:, cols].ravel()
    diffs_BxF.append([metrics.tpr_at_fpr(sa, lab, f) - metrics.tpr_at_fpr(sb, lab, f) for f in fprs])
    auc_B.append(metrics.auc(sa, lab) - metrics.auc(sb, lab))
  return np.array(diffs_BxF), np.array(auc_B)


@pytest.mark.parametrize("ties,backend", [(False, "numpy"), (True, "numpy"), (True, "jax")])
def test_paired_difference_equals_brute_force(ties, backend):
  rng = np.random.default_rng(3)
  m, n, fprs, n_boot = 6, 150, (0.1, 0.02, 0.005), 40
  labels = rng.random((m, n)) < 0.5
  a = rng.normal(size=(m, n)) + 1.0 * labels
  b = a + rng.normal(scale=0.8, size=(m, n))
  if ties:  # rounded scores make tie groups, which the ROC must treat as one threshold
    a, b = np.round(a, 1), np.round(b, 1)
  got = compare.paired_difference(a, b, labels, fprs, n_boot=n_boot, seed=5, backend=backend)
  d_BxF, dauc_B = _brute_force(a, b, labels, fprs, n_boot, seed=5)
  assert got["n_boot_undefined"] == n_boot - len(dauc_B)
  for f, fpr in enumerate(fprs):
    row = got["tpr"][metrics.fpr_key(fpr)]
    # Both sides count the same integers and divide once: equal up to float64 rounding of the percentiles.
    np.testing.assert_allclose(row["ci"], np.percentile(d_BxF[:, f], [2.5, 97.5]), rtol=0, atol=1e-12)
    assert row["a"] == pytest.approx(metrics.tpr_at_fpr(a, labels, fpr), abs=1e-12)
    assert row["b"] == pytest.approx(metrics.tpr_at_fpr(b, labels, fpr), abs=1e-12)
    assert row["p_le_0"] == pytest.approx(np.mean(d_BxF[:, f] <= 0), abs=1e-12)
  np.testing.assert_allclose(got["auc"]["ci"], np.percentile(dauc_B, [2.5, 97.5]), rtol=0, atol=1e-12)
  assert got["auc"]["diff"] == pytest.approx(metrics.auc(a, labels) - metrics.auc(b, labels), abs=1e-12)


def test_identical_attacks_differ_by_exactly_zero_and_a_perfect_one_wins_in_every_resample():
  rng = np.random.default_rng(0)
  labels = rng.random((4, 300)) < 0.5
  noise = rng.normal(size=labels.shape)
  same = compare.paired_difference(noise, noise, labels, n_boot=50)
  assert all(r["diff"] == 0 and r["ci"] == [0.0, 0.0] and r["p_le_0"] == 1.0 for r in same["tpr"].values())
  perfect = compare.paired_difference(labels + 0.01 * noise, noise, labels, fprs=(0.01,), n_boot=50)
  row = perfect["tpr"]["0.01"]
  assert row["a"] == 1.0 and row["ci"][0] > 0.5 and row["p_le_0"] == 0.0


def test_replicates_on_jax_equal_numpy_exactly():
  # The device computes the same integer sums, and the host finishes both with the same float64 operations.
  rng = np.random.default_rng(1)
  labels = rng.random((5, 400)) < 0.5
  a = np.round(rng.normal(size=labels.shape) + labels, 2)
  b = a + rng.normal(scale=0.5, size=labels.shape)
  valid = rng.random(labels.shape) < 0.9
  got, want = (compare.paired_difference(a, b, labels, (0.1, 0.01), n_boot=60, seed=2, valid_MxN=valid, backend=k)
               for k in ("jax", "numpy"))
  assert got == want


def test_shapes_must_match():
  with pytest.raises(InputError, match="differ in shape"):
    compare.paired_difference(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((2, 3), bool))
  with pytest.raises(InputError, match="backend"):
    compare.paired_difference(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3), bool), backend="torch")
