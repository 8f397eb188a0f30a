"""attacks/: every score against a direct per-row Python computation of its formula (loops, sorted, zlib.compress)."""

import math
import zlib

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import attacks
from lira.errors import InputError


def ragged(rng, N=7, T=9, nan_first=True):
  """lp rows with NaN at position 0 and right padding of random length, with ties planted in some rows."""
  lp = -rng.exponential(2.0, size=(N, T))
  lp[2, 3:6] = -1.25  # ties
  length = rng.integers(2, T + 1, size=N)
  length[0] = 2  # one scored position only
  for n in range(N):
    lp[n, length[n]:] = np.nan
  if nan_first:
    lp[:, 0] = np.nan
  return lp


def scored(row):
  return [float(v) for v in row if not math.isnan(v)]


def ll(row):
  values = scored(row)
  return sum(values) / len(values)


def lowest(values, k):
  values = sorted(values)
  return sum(values[:max(1, int(k * len(values)))]) / max(1, int(k * len(values)))


# Both sides sum the same float64 values in a different order: ~1e-15 relative.
CLOSE = dict(rtol=1e-12, atol=1e-12)


def test_loss_zlib_reference_neighbourhood():
  rng = np.random.default_rng(0)
  lp, ref = ragged(rng), ragged(rng)
  neighbours = np.stack([ragged(rng) for _ in range(3)], axis=1)  # [N, J, T]
  texts = [f"text number {i} " * (i + 1) + "é" for i in range(7)]
  np.testing.assert_allclose(attacks.loss(lp), [ll(r) for r in lp], **CLOSE)
  np.testing.assert_allclose(attacks.zlib(lp, texts),
                             [ll(r) / len(zlib.compress(t.encode("utf-8"))) for r, t in zip(lp, texts)], **CLOSE)
  np.testing.assert_allclose(attacks.reference(lp, ref), [ll(a) - ll(b) for a, b in zip(lp, ref)], **CLOSE)
  want = [ll(lp[n]) - sum(ll(neighbours[n, j]) for j in range(3)) / 3 for n in range(7)]  # the MEAN, not the min
  np.testing.assert_allclose(attacks.neighbourhood(lp, neighbours), want, **CLOSE)


@pytest.mark.parametrize("k", [0.05, 0.2, 0.5, 1.0])
def test_min_k_and_min_k_pp(k):
  rng = np.random.default_rng(1)
  lp = ragged(rng)
  mu = lp - rng.exponential(1.0, size=lp.shape)
  sigma = rng.uniform(0.5, 2.0, size=lp.shape)
  sigma[3, 1] = 0.0  # a one-hot or uniform distribution: lp == mu there, z = 0 (finite)
  mu[3, 1] = lp[3, 1]
  np.testing.assert_allclose(attacks.min_k(lp, k), [lowest(scored(r), k) for r in lp], **CLOSE)
  z = [[(a - m) / max(s, attacks.SIGMA_FLOOR) for a, m, s in zip(r, mr, sr) if not math.isnan(a)]
       for r, mr, sr in zip(lp, mu, sigma)]
  ours = attacks.min_k_pp(lp, mu, sigma, k)
  np.testing.assert_allclose(ours, [lowest(zr, k) for zr in z], **CLOSE)
  assert np.isfinite(ours).all()


def test_min_k_floor_of_one_token_where_int_k_n_is_zero():
  lp = np.array([[np.nan, -3.0, -1.0, -2.0]])  # n = 3, int(0.2 * 3) = 0: the lowest single value
  assert attacks.min_k(lp, 0.2)[0] == -3.0


def test_recall_con_recall_ensemble_and_shots():
  rng = np.random.default_rng(2)
  lp = ragged(rng)
  cond = ragged(rng, nan_first=False)  # position 0 holds ln p(t_0 | P)
  member_cond = ragged(rng, nan_first=False)
  first_out = [ll(c[1:]) / ll(r) for c, r in zip(cond, lp)]
  np.testing.assert_allclose(attacks.recall(lp, cond), [ll(c) / ll(r) for c, r in zip(cond, lp)], **CLOSE)
  np.testing.assert_allclose(attacks.recall(lp, cond, score_first=False), first_out, **CLOSE)
  want = [(ll(a) - 0.4 * ll(b)) / ll(r) for a, b, r in zip(cond, member_cond, lp)]
  np.testing.assert_allclose(attacks.con_recall(lp, cond, member_cond, 0.4), want, **CLOSE)
  stack = np.stack([cond, member_cond])
  np.testing.assert_allclose(attacks.recall_ensemble(lp, stack),
                             [(ll(a) + ll(b)) / 2 / ll(r) for a, b, r in zip(cond, member_cond, lp)], **CLOSE)
  np.testing.assert_allclose(attacks.recall_shots(lp, stack)[1], attacks.recall(lp, member_cond), **CLOSE)


def test_em_mia_follows_algorithm_one():
  rng = np.random.default_rng(3)
  N, T = 12, 6
  lp = -rng.exponential(2.0, size=(N, T))
  lp[:, 0] = np.nan
  pairs = lp[None] * rng.uniform(0.8, 1.2, size=(N, N, T))
  init = rng.normal(size=N)
  f, r = attacks.em_mia(pairs, lp, init, iterations=3)
  # The same three rounds written out: R[p, x] = LL(x | p) / LL(x) without position 0, AUC against f > median(f).
  R = np.array([[ll(pairs[p, x, 1:]) / ll(lp[x]) for x in range(N)] for p in range(N)])
  g = init
  for _ in range(3):
    labels = g > np.median(g)
    g = -np.array([roc_auc_score(labels, R[p]) for p in range(N)])
  np.testing.assert_allclose(f, g, **CLOSE)
  np.testing.assert_allclose(r, -g, **CLOSE)
  kendall, _ = attacks.em_mia(pairs, lp, init, iterations=1, rank="kendall")
  assert np.isfinite(kendall).all()


def test_em_mia_recovers_planted_members_and_stays_near_chance_on_noise():
  rng = np.random.default_rng(4)
  N, T = 60, 8
  member = np.arange(N) < N // 2
  lp = -rng.uniform(1.0, 3.0, size=(N, T))
  lp[:, 0] = np.nan
  # A non-member prefix raises members' conditional likelihood more than non-members' (ReCaLL's observation);
  # a member prefix raises neither.
  gain = np.where(member[None, :], 0.5, 0.1) * (~member)[:, None]
  pairs = lp[None] * (1.0 - gain[:, :, None]) + rng.normal(0, 0.01, size=(N, N, T))
  init = member + rng.normal(0, 1.5, size=N)  # a weak baseline
  f, _ = attacks.em_mia(pairs, lp, init, iterations=10)
  assert roc_auc_score(member, f) > 0.95 > roc_auc_score(member, init)
  noise = lp[None] * rng.uniform(0.9, 1.1, size=(N, N, T))
  f_noise, _ = attacks.em_mia(noise, lp, rng.normal(size=N), iterations=10)
  assert abs(roc_auc_score(member, f_noise) - 0.5) < 0.25  # 30 vs 30 points: chance within ~3 standard errors


def test_bad_input_is_named():
  lp = np.array([[np.nan, -1.0], [np.nan, np.nan]])
  with pytest.raises(InputError, match="lp: row 1 has no scored position"):
    attacks.loss(lp)
  with pytest.raises(InputError, match=r"k must lie in \(0, 1\]"):
    attacks.min_k(np.array([[np.nan, -1.0]]), 0.0)
  with pytest.raises(InputError, match="texts: 3 texts, but lp has 1 rows"):
    attacks.zlib(np.array([[np.nan, -1.0]]), ["a", "b", "c"])
  with pytest.raises(InputError, match="P = N"):
    attacks.em_mia(np.full((2, 3, 2), -1.0), np.full((3, 2), -1.0), np.zeros(3))
