"""Leave-one-out LiRA scores against independent references (brute-force scipy/sklearn loops, theory)."""

import zlib

import numpy as np
import pytest
import scipy.stats
import sklearn.covariance
from sklearn.metrics import roc_auc_score

import lira
from lira.errors import InputError
from bruteforce import bruteforce_llr

VARIANTS = [(c, s) for c in ("univariate", "independent", "oas") for s in (False, True)]



def plain_loo(loss, keep, scoring=None, **kw):
  """lira.leave_one_out with plain (unbalanced) leave-one-out unless the test asks for balanced counts: the closed
  forms under test here are the plain ones (balanced refits are tested against the brute force separately)."""
  return lira.leave_one_out(loss, keep, scoring, **({**kw} if scoring is not None else {"balance_counts": False, **kw}))


def make_losses(M=10, N=5, T=7, seed=0, shift=0.3, rho=0.6):
  """Correlated (AR(1)) per-token logits with a membership shift, returned as float32 losses."""
  rng = np.random.default_rng(seed)
  corr = rho ** np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
  z = rng.normal(size=(M, N, T)) @ np.linalg.cholesky(corr).T + rng.normal(size=(1, N, T))
  keep = rng.uniform(size=(M, N)).argsort(0) < M // 2
  z = z + shift * keep[:, :, None]
  return np.logaddexp(0, -z).astype(np.float32), keep


def assert_scores_close(fast, ref):
  # float64 closed-form downdates (W - c z z^T), Sherman-Morrison and eigh against scipy/sklearn refits: the
  # llr is a difference of log-densities that cancels digits; the worst error measured over 12 seeds x 24
  # settings was 1.3e-12 relative, so 1e-8 holds with room on any IEEE float64 machine.
  np.testing.assert_allclose(fast, ref, rtol=1e-8, atol=1e-8 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("reduction", [None, "group:3", "min:2", "max:3"])
def test_matches_bruteforce(covariance, shared, reduction):
  # crc32, not hash(): Python randomises str hashes per process, and every run must draw the same numbers
  loss, keep = make_losses(M=8, N=4, T=7, seed=zlib.crc32(repr((covariance, shared, reduction)).encode()) % 1000)
  fast = plain_loo(loss, keep, covariance=covariance, shared=shared, reduction=reduction)
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared, reduction=reduction)
  assert_scores_close(fast, ref)


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("M,T", [(8, 16), (14, 5)])
def test_ragged_mask_in_gram_and_position_space(covariance, shared, M, T):
  # n < T (Gram space) and n >= T (position space), with a ragged mask: rank handling of both paths.
  loss, keep = make_losses(M=M, N=4, T=T, seed=3)
  mask = np.random.default_rng(3).uniform(size=(4, T)) < 0.6
  mask[:, 0] = True
  fast = plain_loo(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask)
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask)
  assert_scores_close(fast, ref)


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
@pytest.mark.parametrize("statistic", ["logit", "loss"])
def test_offline_matches_bruteforce(covariance, statistic):
  loss, keep = make_losses(M=10, N=4, T=6, seed=5)
  for shift in ("uniform", "std"):
    kw = dict(covariance=covariance, shared=False, offline=True, statistic=statistic, offline_shift=shift)
    assert_scores_close(plain_loo(loss, keep, **kw), bruteforce_llr(loss, keep, **kw))


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
@pytest.mark.parametrize("M,T", [(10, 6), (8, 16)])
def test_offline_std_shift_matches_bruteforce(covariance, M, T):
  # Position space (n >= T) and Gram space (n < T), a ragged mask, and the loss statistic's sign.
  loss, keep = make_losses(M=M, N=4, T=T, seed=11)
  mask = np.random.default_rng(11).uniform(size=(4, T)) < 0.7
  mask[:, :2] = True
  for statistic in ("logit", "loss"):
    kw = dict(covariance=covariance, shared=False, offline=True, statistic=statistic, mask_NxT=mask)
    fast = plain_loo(loss, keep, offline_shift="std", **kw)
    assert_scores_close(fast, bruteforce_llr(loss, keep, offline_shift="std", **kw))


def test_offline_std_shift_does_not_depend_on_the_units_of_a_position():
  # Rescaling one position's statistic (here: its logit around the OUT mean) changes the uniform test, not "std".
  loss, keep = make_losses(M=12, N=5, T=4, seed=2)
  x = lira.to_statistic(loss)
  x[:, :, 1] *= 3.0
  scaled = np.logaddexp(0, -x)  # the loss whose logit is x
  for shift, same in (("std", True), ("uniform", False)):
    a = plain_loo(loss, keep, covariance="independent", shared=False, offline=True, offline_shift=shift)
    b = plain_loo(scaled, keep, covariance="independent", shared=False, offline=True, offline_shift=shift)
    assert np.allclose(a, b, rtol=1e-6) == same  # logit -> loss -> logit round trip: ~1e-12 relative


@pytest.mark.parametrize("covariance,shared", VARIANTS)
@pytest.mark.parametrize("M,T", [(10, 5), (8, 12)])
def test_balanced_counts_match_bruteforce(covariance, shared, M, T):
  # Balanced keep, then one canary with 4 IN of 10 / 3 IN of 8 (the larger class drops more), ragged mask.
  loss, keep = make_losses(M=M, N=5, T=T, seed=21)
  keep[:, 2] = np.arange(M) < (4 if M == 10 else 3)
  mask = np.random.default_rng(21).uniform(size=(5, T)) < 0.7
  mask[:, :3] = True
  for reduction in (None, "min:2"):
    kw = dict(covariance=covariance, shared=shared, mask_NxT=mask, reduction=reduction, balance_counts=True)
    assert_scores_close(plain_loo(loss, keep, **kw), bruteforce_llr(loss, keep, **kw))


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
@pytest.mark.parametrize("shift", ["uniform", "std"])
def test_balanced_offline_matches_bruteforce(covariance, shift):
  loss, keep = make_losses(M=10, N=4, T=6, seed=23)
  kw = dict(covariance=covariance, shared=False, offline=True, offline_shift=shift, balance_counts=True,
            statistic="loss")
  assert_scores_close(plain_loo(loss, keep, **kw), bruteforce_llr(loss, keep, **kw))


@pytest.mark.parametrize("covariance,shared", VARIANTS)
def test_balanced_unequal_counts_and_position_space_match_bruteforce(covariance, shared):
  # Keep matrices of one's own: every canary its own IN count (3 to M - 3), so the larger class drops up to M - 5
  # rows (a rank-(M - 5) downdate); T = 4 < the class sizes puts OAS in position space; loss statistic, group:2.
  M, N = 14, 9
  loss, _ = make_losses(M=M, N=N, T=4, seed=31)
  rng = np.random.default_rng(31)
  keep = np.stack([rng.permutation(M) < k for k in np.linspace(3, M - 3, N).astype(int)], axis=1)
  for kw in (dict(statistic="loss"), dict(reduction="group:2")):
    kw = dict(covariance=covariance, shared=shared, balance_counts=True, **kw)
    assert_scores_close(plain_loo(loss, keep, **kw), bruteforce_llr(loss, keep, **kw))


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
def test_balanced_offline_unequal_counts_match_bruteforce(covariance):
  M, N = 12, 7
  loss, _ = make_losses(M=M, N=N, T=5, seed=37)
  rng = np.random.default_rng(37)
  keep = np.stack([rng.permutation(M) < k for k in np.linspace(3, M - 3, N).astype(int)], axis=1)
  mask = rng.uniform(size=(N, 5)) < 0.7
  mask[:, :2] = True
  for shift in ("std", "uniform"):
    kw = dict(covariance=covariance, shared=False, offline=True, offline_shift=shift, balance_counts=True,
              mask_NxT=mask)
    assert_scores_close(plain_loo(loss, keep, **kw), bruteforce_llr(loss, keep, **kw))


def test_balanced_refuses_too_few_models_per_class_after_balancing():
  loss, keep = make_losses(M=8, N=3, T=4, seed=1)
  keep[:, 1] = np.arange(8) < 2
  with pytest.raises(InputError, match="canary 1 has 2 IN and 6 OUT models"):
    plain_loo(loss, keep, covariance="independent", shared=True, balance_counts=True)
  with pytest.raises(InputError, match="fix_variance"):
    plain_loo(loss, keep, covariance="independent", shared=True, balance_counts=True, fix_variance=True)


def test_loss_statistic_matches_bruteforce():
  loss, keep = make_losses(M=8, N=3, T=5, seed=9)
  for covariance, shared in VARIANTS:
    fast = plain_loo(loss, keep, covariance=covariance, shared=shared, statistic="loss")
    ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared, statistic="loss")
    assert_scores_close(fast, ref)


def test_unbalanced_keep_matches_bruteforce():
  # Canaries with different IN counts go through different Gram groups.
  loss, _ = make_losses(M=9, N=6, T=5, seed=11)
  keep = np.random.default_rng(11).uniform(size=(9, 6)) < 0.5
  keep[:3, :] = True
  keep[3:6, :] = False
  for covariance, shared in VARIANTS:
    fast = plain_loo(loss, keep, covariance=covariance, shared=shared)
    ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared)
    assert_scores_close(fast, ref)


def test_leave_one_out_equals_refit_without_target():
  """Score of target m = Gaussians fitted (sklearn OAS) on the data set with model m deleted, then scored."""
  loss, keep = make_losses(M=8, N=3, T=6, seed=2)
  llr = plain_loo(loss, keep, covariance="oas", shared=False)
  stat = lira.logit_scale(loss)
  for m in (0, 5):
    others = np.delete(np.arange(8), m)
    for n in range(3):
      rows, k = stat[others, n], keep[others, n]
      dens = [scipy.stats.multivariate_normal(rows[sel].mean(0), sklearn.covariance.OAS().fit(rows[sel]).covariance_)
              for sel in (k, ~k)]
      expected = dens[0].logpdf(stat[m, n]) - dens[1].logpdf(stat[m, n])
      np.testing.assert_allclose(llr[m, n], expected, rtol=1e-9)  # float64 refit vs downdate, as assert_scores_close


def test_group_one_equals_univariate():
  loss, keep = make_losses(M=8, N=5, T=9, seed=4)
  for shared in (False, True):
    for covariance in ("independent", "oas"):
      a = plain_loo(loss, keep, covariance=covariance, shared=shared, reduction="group:1")
      b = plain_loo(loss, keep, covariance="univariate", shared=shared)
      # Two float64 paths to the same mean (chunk einsum vs masked sum): rounding ~1e-15, cancelled a little in the llr.
      np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_full_density_with_diagonal_covariance_equals_independent():
  loss, keep = make_losses(M=8, N=3, T=5, seed=6)
  llr = plain_loo(loss, keep, covariance="independent", shared=False)
  stat = lira.logit_scale(loss)
  for m in range(8):
    for n in range(3):
      others = np.arange(8) != m
      dens = []
      for sel in (keep[:, n], ~keep[:, n]):
        rows = stat[others & sel, n]
        dens.append(scipy.stats.multivariate_normal(rows.mean(0), np.diag(rows.var(0))).logpdf(stat[m, n]))
      np.testing.assert_allclose(llr[m, n], dens[0] - dens[1], rtol=1e-9)  # float64 refit vs downdate


@pytest.mark.parametrize("shared", [False, True])
def test_single_position_reduces_every_variant_to_univariate(shared):
  loss, keep = make_losses(M=10, N=6, T=1, seed=7)
  ref = plain_loo(loss, keep, covariance="univariate", shared=shared)
  for covariance in ("independent", "oas"):
    # Gram / diagonal code paths vs the scalar one: float64 rounding of the same sums, ~1e-14.
    np.testing.assert_allclose(plain_loo(loss, keep, covariance=covariance, shared=shared), ref, rtol=1e-10)
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
  np.testing.assert_allclose(ref[m, n], expected, rtol=1e-10)  # closed form vs scipy.stats.norm in float64


def clustered_auc_se(llr_MxN, keep_MxN):
  """Pooled AUC and its standard error with canaries as independent clusters (Obuchowski 1997, DeLong components)."""
  s, y = llr_MxN.ravel(), keep_MxN.ravel()
  canary = np.broadcast_to(np.arange(llr_MxN.shape[1]), llr_MxN.shape).ravel()
  P, Q, K = y.sum(), (~y).sum(), llr_MxN.shape[1]
  rank = scipy.stats.rankdata(s)
  v10 = (rank[y] - scipy.stats.rankdata(s[y])) / Q  # share of non-members below each member (ties 1/2)
  v01 = 1 - (rank[~y] - scipy.stats.rankdata(s[~y])) / P  # share of members above each non-member
  auc = v10.mean()
  d10 = np.bincount(canary[y], v10, K) - np.bincount(canary[y], minlength=K) * auc
  d01 = np.bincount(canary[~y], v01, K) - np.bincount(canary[~y], minlength=K) * auc
  var = K / (K - 1) * ((d10**2).sum() / P**2 + (d01**2).sum() / Q**2 + 2 * (d10 * d01).sum() / (P * Q))
  return auc, np.sqrt(var)


@pytest.mark.parametrize("covariance,shared", VARIANTS)
def test_identical_distributions_auc_is_below_chance_with_few_models(covariance, shared):
  # Leave-one-out fits the target's own class on one model fewer, which biases it towards "non-member":
  # with identical IN and OUT distributions (T = 6) the measured AUCs are 0.46-0.49 at M = 16 (class-wise
  # lowest) and 0.493-0.498 at M = 64. Each interval asserted is the measured AUC +- 3 standard errors:
  # canaries are independent here (every canary's fit uses only its own losses), so the SE is the
  # canary-clustered DeLong SE (about 0.0027 at M = 16, 0.0013 at M = 64 with 6,000 canaries; over 30 seeds
  # at 1,000 canaries it was 1.1-1.2x the observed spread, so it is not optimistic).
  for M, lo, hi in ((16, 0.45, 0.50), (64, 0.485, 0.515)):
    loss, keep = make_losses(M=M, N=6000, T=6, seed=8, shift=0.0)
    llr = plain_loo(loss, keep, covariance=covariance, shared=shared)
    auc, se = clustered_auc_se(llr, keep)
    # The same statistic: rank sums vs sklearn's trapezoid, float64 sums of ~5e4 terms in different orders.
    assert auc == pytest.approx(roc_auc_score(keep.ravel(), llr.ravel()), abs=1e-12)
    assert lo < auc - 3 * se and auc + 3 * se < hi, (M, auc, se)


def test_known_shift_gives_gaussian_theory_auc():
  # Independent unit-variance tokens shifted by delta: the likelihood ratio is linear in the
  # Mahalanobis direction, so AUC = Phi(||delta|| / sqrt(2)) (equal covariances). Estimating the
  # Gaussians from M/2 models per class costs a little AUC (0.79 at M = 64); M = 256 is within 0.005.
  # The bound 0.01 is that measured deviation (at most 0.0033) plus 3 canary-clustered standard errors of
  # the AUC (0.0023 each, clustered_auc_se); the data are drawn with a fixed seed, so it holds on any machine.
  rng = np.random.default_rng(10)
  M, N, T = 256, 150, 4
  delta = np.array([1.0, 0.0, 0.6, 0.4])
  keep = rng.uniform(size=(M, N)).argsort(0) < M // 2
  z = rng.normal(size=(M, N, T)) + rng.normal(size=(1, N, T)) + delta * keep[:, :, None]
  loss = np.logaddexp(0, -z)
  theory = scipy.stats.norm.cdf(np.linalg.norm(delta) / np.sqrt(2))
  for covariance in ("independent", "oas"):
    llr = plain_loo(loss, keep, covariance=covariance, shared=True)
    assert abs(roc_auc_score(keep.ravel(), llr.ravel()) - theory) < 0.01, covariance
  llr = plain_loo(loss, keep, covariance="univariate", shared=True)
  theory_mean = scipy.stats.norm.cdf(delta.mean() / np.sqrt(2 / T))  # mean of T unit tokens has var 1/T
  assert abs(roc_auc_score(keep.ravel(), llr.ravel()) - theory_mean) < 0.01


@pytest.mark.parametrize("covariance,shared", VARIANTS)
def test_zero_variance_positions_give_finite_scores(covariance, shared):
  loss, keep = make_losses(M=8, N=3, T=6, seed=12)
  loss[:, :, 2] = 0.0  # every model predicts this token perfectly
  loss[:, 1, 4] = 0.25  # the same loss from every model
  llr = plain_loo(loss, keep, covariance=covariance, shared=shared)
  assert np.isfinite(llr).all()
  ref = bruteforce_llr(loss, keep, covariance=covariance, shared=shared)
  assert_scores_close(llr, ref)


def test_non_finite_loss_names_model_and_canary():
  loss, keep = make_losses(M=8, N=4, T=5)
  loss[5, 2, 3] = np.nan
  with pytest.raises(ValueError, match=r"model 5 on canary 2 at position 3"):
    plain_loo(loss, keep, covariance="oas", shared=True)
  loss[5, 2, 3] = np.inf
  with pytest.raises(ValueError, match=r"model 5 on canary 2"):
    plain_loo(loss, keep, covariance="independent", shared=False)


def test_non_finite_loss_at_masked_position_is_ignored():
  loss, keep = make_losses(M=8, N=4, T=5)
  mask = np.ones((4, 5), bool)
  mask[2, 3] = False
  clean = plain_loo(loss, keep, covariance="oas", shared=True, mask_NxT=mask)
  loss[:, 2, 3] = np.nan
  dirty = plain_loo(loss, keep, covariance="oas", shared=True, mask_NxT=mask)
  np.testing.assert_array_equal(clean, dirty)


def test_too_few_models_names_canary():
  loss, keep = make_losses(M=8, N=4, T=5)
  keep[:, 3] = False
  keep[:2, 3] = True  # 2 IN models: 1 left when an IN target is removed
  with pytest.raises(ValueError, match=r"canary 3 has 2 IN and 6 OUT"):
    plain_loo(loss, keep, covariance="oas", shared=False)
  llr = plain_loo(loss, keep, covariance="oas", shared=False, on_undefined="nan")
  assert np.isnan(llr[:, 3]).all() and np.isfinite(llr[:, :3]).all()


def test_bad_arguments_are_named():
  loss, keep = make_losses(M=8, N=4, T=5)
  with pytest.raises(ValueError, match="covariance"):
    plain_loo(loss, keep, covariance="full", shared=False)
  with pytest.raises(ValueError, match="statistic"):
    plain_loo(loss, keep, covariance="oas", shared=False, statistic="prob")
  with pytest.raises(ValueError, match="reduction"):
    plain_loo(loss, keep, covariance="oas", shared=False, reduction="mean:2")
  with pytest.raises(ValueError, match="canary 0 has 5"):
    plain_loo(loss, keep, covariance="oas", shared=False, reduction="min:6")
  with pytest.raises(ValueError, match="keep"):
    plain_loo(loss, keep[:, :3], covariance="oas", shared=False)
  with pytest.raises(ValueError, match="offline"):
    plain_loo(loss, keep, covariance="oas", shared=True, offline=True)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("covariance", ["univariate", "independent"])
def test_fixed_global_variance_matches_pooled_loop(covariance, shared):
  loss, keep = make_losses(M=8, N=5, T=4, seed=13)
  llr = plain_loo(loss, keep, covariance=covariance, shared=shared, fix_variance=True)
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
      np.testing.assert_allclose(llr[m, n], dens[True] - dens[False], rtol=1e-9)  # pooled sums in another order


@pytest.mark.parametrize("options", [dict(), dict(reduction="min:3", block_size=2), dict(offline=True),
                                     dict(fix_variance=True), dict(balance_counts=True, statistic="loss")])
def test_variants_in_one_pass_equal_one_call_each(options):
  loss, keep = make_losses(M=12, N=9, T=6, seed=4)
  mask = np.ones((9, 6), bool)
  mask[2, 4:] = False
  variants = [("univariate", False), ("oas", False), ("independent", False)]
  if not options.get("offline"):
    variants.append(("independent", True))
  if options.get("fix_variance"):
    variants = [v for v in variants if v[0] != "oas"]
  run_options = {k: options[k] for k in options if k == "block_size"}
  scoring = lira.Scoring(**{"balance_counts": False, **{k: v for k, v in options.items() if k != "block_size"}})
  together = lira.leave_one_out_variants(loss, keep, [scoring.variant(c, s) for c, s in variants], mask_NxT=mask,
                                         **run_options)
  for (covariance, shared), llr in zip(variants, together):
    alone = plain_loo(loss, keep, scoring.variant(covariance, shared), mask_NxT=mask, **run_options)
    np.testing.assert_array_equal(llr, alone)  # the same operations on the same block: bit for bit


@pytest.mark.parametrize("offline", [False, True])
def test_balanced_variants_in_one_pass_at_unequal_counts_equal_one_call_each(offline):
  # counts away from half remove windows of several rows; the class-wise and the shared diagonal fits of one pass
  # (offline: the independent fit and OAS) share the windows' sums, and each equals its own call bit for bit
  loss, _ = make_losses(M=16, N=6, T=6, seed=5)
  rng = np.random.default_rng(5)
  keep = np.stack([rng.permutation(16) < k for k in (5, 6, 7, 9, 10, 11)], axis=1)
  scoring = lira.Scoring(balance_counts=True, offline=offline, statistic="loss")
  variants = [("univariate", False), ("independent", False), ("oas", False)] if offline else VARIANTS
  together = lira.leave_one_out_variants(loss, keep, [scoring.variant(c, s) for c, s in variants], block_size=3)
  for (covariance, shared), llr in zip(variants, together):
    alone = plain_loo(loss, keep, scoring.variant(covariance, shared), block_size=3)
    np.testing.assert_array_equal(llr, alone)


@pytest.mark.parametrize("keep_of, words", [
    (lambda k: k * 0.5, "model 0, canary 0 holds 0.5"),
    (lambda k: k.astype(int) * 2, "holds 2"),
    (lambda k: np.where(k, 1, -1), "holds -1 (a -1/1 encoding? use True/False or 1/0 for IN/OUT)"),
    (lambda k: k.astype(str), "keep must be bool membership [M, N] (True = IN), got dtype <U5"),
])
def test_keep_that_is_not_membership_is_refused_not_read_as_truth_values(keep_of, words):
  from lira.synthetic import synthetic_losses
  loss, keep, _ = synthetic_losses(num_models=6, num_canaries=10, seq_len=4)
  keep = keep.copy()
  keep[0, 0] = True
  with pytest.raises(InputError) as e:
    lira.leave_one_out(loss, keep_of(keep))
  assert words in str(e.value)
  np.testing.assert_array_equal(lira.leave_one_out(loss, keep.astype(np.int8)), lira.leave_one_out(loss, keep))


def test_losses_as_a_python_list_are_refused_with_what_to_pass():
  from lira.synthetic import synthetic_losses
  loss, keep, _ = synthetic_losses(num_models=6, num_canaries=10, seq_len=4)
  with pytest.raises(InputError, match=r"losses must be an array \[M, N, T\] .*got list: pass np.asarray"):
    lira.leave_one_out(loss.tolist(), keep)
