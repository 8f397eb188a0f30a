"""lira.score_targets: separate target models scored from all shadows, against a brute-force refit per target."""

import numpy as np
import pytest

import lira
from bruteforce import fit_covariance, log_density, model_vector, offline_score
from lira import synthetic
from lira.errors import InputError

# Both sides compute the same float64 quantities in a different order (closed forms in an eigenbasis against
# scipy/sklearn refits); scores are O(10-100), so 1e-8 relative leaves ~1e4 ulps of headroom for the rounding of
# the eigendecompositions and solves, far below any real disagreement.
RTOL, ATOL = 1e-8, 1e-8


def bruteforce_targets(shadow_loss_MxNxT, keep_MxN, target_loss_KxNxT, *, covariance, shared, reduction=None,
                       statistic="logit", mask_NxT=None, offline=False, offline_shift="std", var_floor=1e-8):
  """Per (target, canary): fit IN and OUT on all shadow rows with scipy/sklearn, score the target's vector."""
  M, N, T = shadow_loss_MxNxT.shape
  mask_NxT = np.ones((N, T), bool) if mask_NxT is None else mask_NxT
  sign = {"logit": 1.0, "loss": -1.0}[statistic]
  llr_KxN = np.full((len(target_loss_KxNxT), N), np.nan)
  for n in range(N):
    vec = lambda loss_T: model_vector(loss_T, mask_NxT[n], covariance, statistic, reduction)  # noqa: E731
    x_MxP = np.stack([vec(shadow_loss_MxNxT[m, n]) for m in range(M)])
    rows_in, rows_out = x_MxP[keep_MxN[:, n]], x_MxP[~keep_MxN[:, n]]
    mean_in, mean_out = rows_in.mean(axis=0), rows_out.mean(axis=0)
    if shared:
      cov_in = cov_out = fit_covariance(np.concatenate([rows_in - mean_in, rows_out - mean_out]), covariance, True,
                                        var_floor)
    else:
      cov_in = fit_covariance(rows_in, covariance, False, var_floor)
      cov_out = fit_covariance(rows_out, covariance, False, var_floor)
    for k, target_NxT in enumerate(target_loss_KxNxT):
      s = vec(target_NxT[n])
      llr_KxN[k, n] = (offline_score(s, mean_out, cov_out, sign, offline_shift) if offline
                       else log_density(s, mean_in, cov_in) - log_density(s, mean_out, cov_out))
  return llr_KxN


@pytest.fixture(scope="module")
def data():
  loss, keep, mask = synthetic.synthetic_losses(num_models=14, num_canaries=12, seq_len=7, ragged=True, seed=4)
  shadow, target, keep = loss[:10], loss[10:13], keep[:10].copy()  # targets: 3 models the shadows do not include
  keep[:, 5] = [True] * 4 + [False] * 6  # unequal class counts on one canary
  return None, None, target, mask, shadow, keep


SETTINGS = [(c, s, o) for c in ("univariate", "independent", "oas") for s in (False, True) for o in (False, True)
            if not (s and o)]


@pytest.mark.parametrize("covariance,shared,offline", SETTINGS)
@pytest.mark.parametrize("reduction", [None, "min:3"])
def test_scores_equal_a_brute_force_refit(data, covariance, shared, offline, reduction):
  _, _, target, mask, loss, keep = data
  ours = lira.score_targets(loss, keep, target, covariance=covariance, shared=shared, offline=offline,
                            reduction=reduction, mask_NxT=mask)
  ref = bruteforce_targets(loss, keep, target, covariance=covariance, shared=shared, offline=offline,
                           reduction=reduction, mask_NxT=mask)
  np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("covariance", ["univariate", "independent", "oas"])
@pytest.mark.parametrize("shift", ["uniform", "std"])
def test_offline_shifts_equal_a_brute_force_refit(data, covariance, shift):
  _, _, target, mask, loss, keep = data
  kw = dict(covariance=covariance, shared=False, offline=True, offline_shift=shift, mask_NxT=mask)
  np.testing.assert_allclose(lira.score_targets(loss, keep, target, **kw), bruteforce_targets(loss, keep, target, **kw),
                             rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("covariance", ["independent", "oas"])
def test_long_sequences_use_the_gram_space_and_the_loss_statistic(covariance):
  loss, keep, _ = synthetic.synthetic_losses(num_models=8, num_canaries=5, seq_len=20, seed=2)
  target, _, _ = synthetic.synthetic_losses(num_models=2, num_canaries=5, seq_len=20, seed=9)
  for shared in (False, True):
    ours = lira.score_targets(loss, keep, target, covariance=covariance, shared=shared, statistic="loss")
    ref = bruteforce_targets(loss, keep, target, covariance=covariance, shared=shared, statistic="loss")
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)


def test_a_target_that_is_one_of_the_shadows_scores_like_a_shadow_with_itself_in_the_fit():
  loss, keep, _ = synthetic.synthetic_losses(num_models=8, num_canaries=30, seq_len=6, shift=2.0, seed=1)
  llr = lira.score_targets(loss, keep, loss[:2], covariance="oas", shared=True)
  assert llr.shape == (2, 30)
  one = lira.score_targets(loss, keep, loss[0], covariance="oas", shared=True)
  np.testing.assert_allclose(one[0], llr[0], rtol=RTOL, atol=ATOL)  # batched products round differently
  assert (llr[keep[:2]].mean() > llr[~keep[:2]].mean())  # members score higher


def test_fixed_variance_pools_every_canary_and_position():
  loss_all, keep_all, _ = synthetic.synthetic_losses(num_models=14, num_canaries=12, seq_len=7, seed=5)
  loss, keep, target = loss_all[:10], keep_all[:10], loss_all[10:]
  x = lira.to_statistic(loss)
  mean_in = np.stack([x[keep[:, n], n].mean(0) for n in range(12)])
  mean_out = np.stack([x[~keep[:, n], n].mean(0) for n in range(12)])
  r_in = np.concatenate([(x[keep[:, n], n] - mean_in[n]).ravel() for n in range(12)])
  r_out = np.concatenate([(x[~keep[:, n], n] - mean_out[n]).ravel() for n in range(12)])
  s = lira.to_statistic(target)
  for shared, (v_in, v_out) in ((False, (r_in.var(mean=0), r_out.var(mean=0))),
                                (True, (np.concatenate([r_in, r_out]).var(mean=0),) * 2)):
    ref = -0.5 * (((s - mean_in) ** 2 / v_in).sum(2) + 7 * np.log(v_in)) + 0.5 * (
        ((s - mean_out) ** 2 / v_out).sum(2) + 7 * np.log(v_out))
    ours = lira.score_targets(loss, keep, target, covariance="independent", shared=shared, fix_variance=True)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)


def test_bad_targets_are_refused_before_scoring(data):
  _, _, target, mask, loss, keep = data
  with pytest.raises(InputError, match=r"\[K, N, T\] or \[N, T\]"):
    lira.score_targets(loss, keep, target[:, :5], covariance="oas", shared=True, mask_NxT=mask)
  with pytest.raises(InputError, match=r"hold no target model \(shape \[0, "):
    lira.score_targets(loss, keep, target[:0], covariance="oas", shared=True, mask_NxT=mask)
  with pytest.raises(InputError, match="must be floating-point per-token losses, got dtype bool"):
    lira.score_targets(loss, keep, target > 1, covariance="oas", shared=True, mask_NxT=mask)
  bad = target.copy()
  bad[1, 2, 0] = np.nan
  with pytest.raises(InputError, match="loss of target 1 on canary 2 at position 0"):
    lira.score_targets(loss, keep, bad, covariance="oas", shared=True, mask_NxT=mask)
  few = keep.copy()
  few[:, 3] = [True] + [False] * 9
  with pytest.raises(InputError, match="canary 3 has 1 IN and 9 OUT"):
    lira.score_targets(loss, few, target, covariance="independent", shared=False, mask_NxT=mask)
  lira.score_targets(loss, few, target, covariance="independent", shared=True, mask_NxT=mask)  # 1 IN row is enough when shared
