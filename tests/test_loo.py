"""Leave-one-out LiRA scores against independent references (brute-force scipy/sklearn loops, theory)."""

import zlib

import numpy as np
import pytest
import scipy.stats
import sklearn.covariance
from sklearn.metrics import roc_auc_score

import lira
from bruteforce import bruteforce_llr

VARIANTS = [(c, s) for c in ("univariate", "independent", "oas") for s in (False, True)]


def make_losses(M=10, N=5, T=7, seed=0, shift=0.3, rho=0.6):
  """Correlated (AR(1)) per-token logits with a membership shift, returned as float32 losses."""
  rng = np.random.default_rng(seed)
  corr = rho ** np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
  z = rng.normal(size=(M, N, T)) @ np.linalg.cholesky(corr).T + rng.normal(size=(1, N, T))
  keep = rng.uniform(size=(M, N)).argsort(0) < M // 2
  z = z + shift * keep[:, :, None]
  return np.logaddexp(0, -z).astype(np.float32), keep


def assert_scores_close(fast, ref):
  np.testing.assert_allclose(fast, ref, rtol=1e-8, atol=1e-8 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("reduction", [None, "group:3", "min:2", "max:3"])
def test_matches_bruteforce(covariance, shared, reduction):
  # crc32, not hash(): Python randomises str hashes per process, and every run must draw the same numbers
  loss, keep = make_losses(M=8, N=4, T=7, seed=zlib.crc32(repr((covariance, shared, reduction)).encode()) % 1000)
  fast = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared, reduction=reduction)
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared, reduction=reduction)
  assert_scores_close(fast, ref)


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("M,T", [(8, 16), (14, 5)])
def test_ragged_mask_in_gram_and_position_space(covariance, shared, M, T):
  # n < T (Gram space) and n >= T (position space), with a ragged mask: rank handling of both paths.
  loss, keep = make_losses(M=M, N=4, T=T, seed=3)
  mask = np.random.default_rng(3).uniform(size=(4, T)) < 0.6
  mask[:, 0] = True
  fast = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask)
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask)
  assert_scores_close(fast, ref)


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
@pytest.mark.parametrize("statistic", ["logit", "loss"])
def test_offline_matches_bruteforce(covariance, statistic):
  loss, keep = make_losses(M=10, N=4, T=6, seed=5)
  fast = lira.leave_one_out(loss, keep, covariance=covariance, shared=False, offline=True, statistic=statistic)
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=False, offline=True, statistic=statistic)
  assert_scores_close(fast, ref)


def test_loss_statistic_matches_bruteforce():
  loss, keep = make_losses(M=8, N=3, T=5, seed=9)
  for covariance, shared in VARIANTS:
    fast = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared, statistic="loss")
    ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared, statistic="loss")
    assert_scores_close(fast, ref)


def test_unbalanced_keep_matches_bruteforce():
  # Canaries with different IN counts go through different Gram groups.
  loss, _ = make_losses(M=9, N=6, T=5, seed=11)
  keep = np.random.default_rng(11).uniform(size=(9, 6)) < 0.5
  keep[:3, :] = True
  keep[3:6, :] = False
  for covariance, shared in VARIANTS:
    fast = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared)
    ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared)
    assert_scores_close(fast, ref)


def test_leave_one_out_equals_refit_without_target():
  """Score of target m = Gaussians fitted (sklearn OAS) on the data set with model m deleted, then scored."""
  loss, keep = make_losses(M=8, N=3, T=6, seed=2)
  llr = lira.leave_one_out(loss, keep, covariance="oas", shared=False)
  stat = lira.logit_scale(loss)
  for m in (0, 5):
    others = np.delete(np.arange(8), m)
    for n in range(3):
      rows, k = stat[others, n], keep[others, n]
      dens = [scipy.stats.multivariate_normal(rows[sel].mean(0), sklearn.covariance.OAS().fit(rows[sel]).covariance_)
              for sel in (k, ~k)]
      expected = dens[0].logpdf(stat[m, n]) - dens[1].logpdf(stat[m, n])
      np.testing.assert_allclose(llr[m, n], expected, rtol=1e-9)


def test_group_one_equals_univariate():
  loss, keep = make_losses(M=8, N=5, T=9, seed=4)
  for shared in (False, True):
    for covariance in ("independent", "oas"):
      a = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared, reduction="group:1")
      b = lira.leave_one_out(loss, keep, covariance="univariate", shared=shared)
      np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_full_density_with_diagonal_covariance_equals_independent():
  loss, keep = make_losses(M=8, N=3, T=5, seed=6)
  llr = lira.leave_one_out(loss, keep, covariance="independent", shared=False)
  stat = lira.logit_scale(loss)
  for m in range(8):
    for n in range(3):
      others = np.arange(8) != m
      dens = []
      for sel in (keep[:, n], ~keep[:, n]):
        rows = stat[others & sel, n]
        dens.append(scipy.stats.multivariate_normal(rows.mean(0), np.diag(rows.var(0))).logpdf(stat[m, n]))
      np.testing.assert_allclose(llr[m, n], dens[0] - dens[1], rtol=1e-9)


@pytest.mark.parametrize("shared", [False, True])
def test_single_position_reduces_every_variant_to_univariate(shared):
  loss, keep = make_losses(M=10, N=6, T=1, seed=7)
  ref = lira.leave_one_out(loss, keep, covariance="univariate", shared=shared)
  for covariance in ("independent", "oas"):
    np.testing.assert_allclose(lira.leave_one_out(loss, keep, covariance=covariance, shared=shared), ref, rtol=1e-10)
  # ... and univariate is LiRA: log N(x | mu_in, var_in) - log N(x | mu_out, var_out) from np.mean / np.var.
  stat = lira.logit_scale(loss)[:, :, 0]
  m, n = 3, 2
  others = np.arange(10) != m
  x_in, x_out = stat[others & keep[:, n], n], stat[others & ~keep[:, n], n]
  if shared:
    var_in = var_out = np.concatenate([x_in - x_in.mean(), x_out - x_out.mean()]).var()
  else:
    var_in, var_out = x_in.var(), x_out.var()
  expected = (scipy.stats.norm.logpdf(stat[m, n], x_in.mean(), np.sqrt(var_in))
              - scipy.stats.norm.logpdf(stat[m, n], x_out.mean(), np.sqrt(var_out)))
  np.testing.assert_allclose(ref[m, n], expected, rtol=1e-10)


@pytest.mark.parametrize("covariance,shared", VARIANTS)
def test_identical_distributions_give_chance_auc(covariance, shared):
  # With few models leave-one-out is biased towards "non-member" (the target's own class is fitted
  # on one model fewer: AUC ~0.45 at M = 16, see README), so this uses M = 64 where it is < 0.01.
  loss, keep = make_losses(M=64, N=150, T=6, seed=8, shift=0.0)
  llr = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared)
  assert abs(roc_auc_score(keep.ravel(), llr.ravel()) - 0.5) < 0.02


def test_known_shift_gives_gaussian_theory_auc():
  # Independent unit-variance tokens shifted by delta: the likelihood ratio is linear in the
  # Mahalanobis direction, so AUC = Phi(||delta|| / sqrt(2)) (equal covariances). Estimating the
  # Gaussians from M/2 models per class costs a little AUC (0.79 at M = 64); M = 256 is within 0.005.
  rng = np.random.default_rng(10)
  M, N, T = 256, 150, 4
  delta = np.array([1.0, 0.0, 0.6, 0.4])
  keep = rng.uniform(size=(M, N)).argsort(0) < M // 2
  z = rng.normal(size=(M, N, T)) + rng.normal(size=(1, N, T)) + delta * keep[:, :, None]
  loss = np.logaddexp(0, -z)
  theory = scipy.stats.norm.cdf(np.linalg.norm(delta) / np.sqrt(2))
  for covariance in ("independent", "oas"):
    llr = lira.leave_one_out(loss, keep, covariance=covariance, shared=True)
    assert abs(roc_auc_score(keep.ravel(), llr.ravel()) - theory) < 0.01, covariance
  llr = lira.leave_one_out(loss, keep, covariance="univariate", shared=True)
  theory_mean = scipy.stats.norm.cdf(delta.mean() / np.sqrt(2 / T))  # mean of T unit tokens has var 1/T
  assert abs(roc_auc_score(keep.ravel(), llr.ravel()) - theory_mean) < 0.01


@pytest.mark.parametrize("covariance,shared", VARIANTS)
def test_zero_variance_positions_give_finite_scores(covariance, shared):
  loss, keep = make_losses(M=8, N=3, T=6, seed=12)
  loss[:, :, 2] = 0.0  # every model predicts this token perfectly
  loss[:, 1, 4] = 0.25  # the same loss from every model
  llr = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared)
  assert np.isfinite(llr).all()
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared)
  assert_scores_close(llr, ref)


def test_non_finite_loss_names_model_and_canary():
  loss, keep = make_losses(M=8, N=4, T=5)
  loss[5, 2, 3] = np.nan
  with pytest.raises(ValueError, match=r"model 5 on canary 2 at position 3"):
    lira.leave_one_out(loss, keep, covariance="oas", shared=True)
  loss[5, 2, 3] = np.inf
  with pytest.raises(ValueError, match=r"model 5 on canary 2"):
    lira.leave_one_out(loss, keep, covariance="independent", shared=False)


def test_non_finite_loss_at_masked_position_is_ignored():
  loss, keep = make_losses(M=8, N=4, T=5)
  mask = np.ones((4, 5), bool)
  mask[2, 3] = False
  clean = lira.leave_one_out(loss, keep, covariance="oas", shared=True, mask_NxT=mask)
  loss[:, 2, 3] = np.nan
  dirty = lira.leave_one_out(loss, keep, covariance="oas", shared=True, mask_NxT=mask)
  np.testing.assert_array_equal(clean, dirty)


def test_too_few_models_names_canary():
  loss, keep = make_losses(M=8, N=4, T=5)
  keep[:, 3] = False
  keep[:2, 3] = True  # 2 IN models: 1 left when an IN target is removed
  with pytest.raises(ValueError, match=r"canary 3 has 2 IN and 6 OUT"):
    lira.leave_one_out(loss, keep, covariance="oas", shared=False)
  llr = lira.leave_one_out(loss, keep, covariance="oas", shared=False, on_undefined="nan")
  assert np.isnan(llr[:, 3]).all() and np.isfinite(llr[:, :3]).all()


def test_bad_arguments_are_named():
  loss, keep = make_losses(M=8, N=4, T=5)
  with pytest.raises(ValueError, match="covariance"):
    lira.leave_one_out(loss, keep, covariance="full", shared=False)
  with pytest.raises(ValueError, match="statistic"):
    lira.leave_one_out(loss, keep, covariance="oas", shared=False, statistic="prob")
  with pytest.raises(ValueError, match="reduction"):
    lira.leave_one_out(loss, keep, covariance="oas", shared=False, reduction="mean:2")
  with pytest.raises(ValueError, match="canary 0 has 5"):
    lira.leave_one_out(loss, keep, covariance="oas", shared=False, reduction="min:6")
  with pytest.raises(ValueError, match="keep"):
    lira.leave_one_out(loss, keep[:, :3], covariance="oas", shared=False)
  with pytest.raises(ValueError, match="offline"):
    lira.leave_one_out(loss, keep, covariance="oas", shared=True, offline=True)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("covariance", ["univariate", "independent"])
def test_fixed_global_variance_matches_pooled_loop(covariance, shared):
  loss, keep = make_losses(M=8, N=5, T=4, seed=13)
  llr = lira.leave_one_out(loss, keep, covariance=covariance, shared=shared, fix_variance=True)
  stat = lira.logit_scale(loss)
  if covariance == "univariate":
    stat = stat.mean(axis=2, keepdims=True)
  M, N, T = stat.shape
  for m in (0, 4):
    others = np.arange(M) != m
    sq = {True: 0.0, False: 0.0}
    cnt = {True: 0, False: 0}
    for n in range(N):
      for cls in (True, False):
        rows = stat[others & (keep[:, n] == cls), n]
        sq[cls] += ((rows - rows.mean(0)) ** 2).sum()
        cnt[cls] += rows.size
    var = {c: sq[c] / cnt[c] for c in (True, False)}
    if shared:
      var = dict.fromkeys((True, False), (sq[True] + sq[False]) / (cnt[True] + cnt[False]))
    for n in range(N):
      mu = {c: stat[others & (keep[:, n] == c), n].mean(0) for c in (True, False)}
      dens = {c: scipy.stats.norm.logpdf(stat[m, n], mu[c], np.sqrt(var[c])).sum() for c in (True, False)}
      np.testing.assert_allclose(llr[m, n], dens[True] - dens[False], rtol=1e-9)
