"""Tests for lira.cov_error and experiments.covariance_error (Rossi et al. 2025, Figs. 2, 3, 6, 8)."""

import json
import os

import numpy as np
import pytest
from sklearn.covariance import OAS

from lira import cov_error
from lira import evaluation
from lira import transforms
from lira.errors import InputError


def make_keep(M, N, seed=0):
  rng = np.random.default_rng(seed)
  order = rng.uniform(size=(M, N)).argsort(0)
  return order < M // 2


def random_losses(M, N, T, seed=0):
  return np.random.default_rng(seed).gamma(2.0, 0.5, size=(M, N, T)).astype(np.float32)


def correlated_losses(M, N, T, keep_MxN, rho=0.9, seed=0):
  """Losses whose logit statistic is Gaussian with an AR(1) covariance (strong correlations), shifted for IN."""
  rng = np.random.default_rng(seed)
  lag_TxT = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])
  scale_T = np.geomspace(0.3, 3.0, T)  # unequal variances, so diag(S) beats sigma^2 I
  cov_TxT = rho**lag_TxT * np.outer(scale_T, scale_T)
  stat_MxNxT = rng.multivariate_normal(np.zeros(T), cov_TxT, size=(M, N)) + 0.5 * keep_MxN[:, :, None]
  # Invert the logit: stat = ln p - ln(1 - p), loss = -ln p = softplus(-stat).
  return np.logaddexp(0.0, -stat_MxNxT)


def reference_errors(stat_SxNxT, keep_SxN, stat_MxNxT, keep_MxN):
  """Brute-force per-canary loop with numpy and sklearn: {(class, estimator, mode): error_N}, NaN where skipped."""
  N, T = stat_SxNxT.shape[1:]
  out = {}
  for n in range(N):
    x, k = stat_SxNxT[:, n], keep_SxN[:, n]
    gold = {"in": np.cov(stat_MxNxT[keep_MxN[:, n], n].T, bias=True),
            "out": np.cov(stat_MxNxT[~keep_MxN[:, n], n].T, bias=True)}
    rows = {"in": x[k], "out": x[~k]}
    pooled = np.concatenate([r - r.mean(axis=0) for r in rows.values() if len(r)])
    for c in ("in", "out"):
      if len(rows[c]) < 2:
        continue  # skipped for this class: stays NaN in both modes
      fits = {"classwise": (rows[c], False), "shared": (pooled, True)}
      for mode, (xs, centred) in fits.items():
        mle = xs.T @ xs / len(xs) if centred else np.cov(xs.T, bias=True)
        est = {"univariate": np.trace(mle) / T * np.eye(T), "independent": np.diag(np.diag(mle)),
               "oas": OAS(assume_centered=centred).fit(xs).covariance_}
        for e, cov in est.items():
          out.setdefault((c, e, mode), np.full(N, np.nan))[n] = np.linalg.norm(cov - gold[c])
  return out


def test_all_models_matches_sklearn_loop():
  M, N, T = 8, 6, 5
  keep = make_keep(M, N)
  loss = random_losses(M, N, T)
  rows = cov_error.covariance_errors(loss, keep, shadow_counts=[M], draws=3)
  stat = transforms.to_statistic(loss, "logit")
  ref = reference_errors(stat, keep, stat, keep)
  assert len(rows) == 2 * 3 * 2  # m == M is a single subset, drawn once
  for r in rows:
    assert r["n_canaries"] == N and r["n_skipped"] == 0
    # Batched scatters vs np.cov / sklearn per canary: float64 sums in another order (~1e-15); OAS's rho
    # divides by a difference that can cancel a few digits, hence 1e-10.
    np.testing.assert_allclose(r["error"], ref[r["class"], r["estimator"], r["mode"]].mean(), rtol=1e-10)
  # Class-wise MLE on all models is the gold standard itself; OAS must then only shrink a little.
  oas_cw = [r["error"] for r in rows if r["estimator"] == "oas" and r["mode"] == "classwise"]
  assert all(e > 0 for e in oas_cw)


@pytest.mark.parametrize("statistic", ["logit", "loss"])
def test_subset_errors_match_sklearn_loop_with_skips(statistic):
  M, N, T = 10, 12, 4
  keep = make_keep(M, N, seed=1)
  loss = random_losses(M, N, T, seed=1)
  stat = transforms.to_statistic(loss, statistic)
  models = np.array([0, 3, 4, 7])  # four models: some canaries have < 2 rows of a class
  gold_in, gold_out = cov_error._gold(stat, keep)
  got = cov_error.subset_errors(stat[models], keep[models], gold_in, gold_out)
  ref = reference_errors(stat[models], keep[models], stat, keep)
  n_in = keep[models].sum(axis=0)
  assert ((n_in < 2) | (n_in > 2)).any(), "the subset should leave some canary short of one class"
  for key, err_N in ref.items():
    np.testing.assert_array_equal(np.isnan(got[key]), np.isnan(err_N))
    np.testing.assert_allclose(got[key], err_N, rtol=1e-10, equal_nan=True)  # as in test_all_models_matches_sklearn_loop
  assert np.isnan(got["in", "oas", "classwise"]).sum() == (n_in < 2).sum()


def test_mask_keeps_only_full_canaries_and_subsamples():
  M, N, T = 8, 10, 3
  keep, loss = make_keep(M, N), random_losses(M, N, T)
  mask = np.ones((N, T), bool)
  mask[[1, 4], -1] = False
  index = cov_error.select_canaries(keep, mask, max_canaries=100)
  np.testing.assert_array_equal(index, [0, 2, 3, 5, 6, 7, 8, 9])
  sub = cov_error.select_canaries(keep, mask, max_canaries=3, seed=2)
  assert len(sub) == 3 and set(sub) <= set(index)
  rows = cov_error.covariance_errors(loss, keep, shadow_counts=[M], mask_NxT=mask, max_canaries=3, seed=2)
  assert all(r["n_canaries"] == 3 for r in rows)
  with pytest.raises(ValueError, match="mask"):
    cov_error.covariance_errors(loss, keep, shadow_counts=[M], mask_NxT=np.zeros((N, T), bool))


def test_bad_arguments():
  keep, loss = make_keep(8, 4), random_losses(8, 4, 3)
  with pytest.raises(ValueError, match="shadow_counts"):
    cov_error.covariance_errors(loss, keep, shadow_counts=[16])
  with pytest.raises(ValueError, match="draws"):
    cov_error.covariance_errors(loss, keep, shadow_counts=[4], draws=0)


def test_estimators_ordered_and_errors_shrink_with_more_models():
  M, N, T = 64, 24, 12
  keep = make_keep(M, N)
  loss = correlated_losses(M, N, T, keep)
  counts = [4, 8, 16, 32, 64]
  agg = cov_error.aggregate(cov_error.covariance_errors(loss, keep, shadow_counts=counts, draws=4, seed=3))
  err = {(r["m"], r["class"], r["estimator"], r["mode"]): r["error_mean"] for r in agg}
  for c in cov_error.CLASSES:
    for mode in cov_error.MODES:
      for m in (8, 16):
        assert err[m, c, "oas", mode] < err[m, c, "independent", mode] < err[m, c, "univariate", mode]
      curve = [err[m, c, "oas", mode] for m in counts]
      assert all(a > b for a, b in zip(curve, curve[1:])), (c, mode, curve)
    # Univariate and independent are biased (they miss the correlations), so they only fall to a plateau.
    for e in ("univariate", "independent"):
      assert err[64, c, e, "classwise"] < err[4, c, e, "classwise"]
    # With all 64 models the class-wise OAS is nearly the MLE gold standard itself.
    assert err[64, c, "oas", "classwise"] < 0.2 * err[4, c, "oas", "classwise"]


def test_aggregate_and_relative_errors_by_hand():
  rows = []
  for d, (cw, sh) in enumerate([(3.0, 2.0), (2.0, 2.0)]):
    for mode, e in (("classwise", cw), ("shared", sh)):
      rows.append({"m": 4, "draw": d, "class": "in", "estimator": "oas", "mode": mode, "error": e,
                   "n_canaries": 5, "n_skipped": 1})
  agg = {r["mode"]: r for r in cov_error.aggregate(rows)}
  assert agg["classwise"]["error_mean"] == 2.5 and agg["classwise"]["error_std"] == 0.5
  assert agg["shared"]["error_mean"] == 2.0 and agg["shared"]["draws"] == 2
  (rel,) = cov_error.relative_errors(rows)
  # (3 - 2) / 2 and 0 have mean 0.25, std 0.25, each a float64 rounding or two from exact (approx: 1e-6).
  assert rel["relative_error_mean"] == pytest.approx(0.25) and rel["relative_error_std"] == pytest.approx(0.25)


def test_gold_covariance():
  M, N, T = 8, 3, 70
  keep, loss = make_keep(M, N), random_losses(M, N, T)
  cov_in, cov_out = cov_error.gold_covariance(loss, keep, 1, statistic="loss")
  x = loss[:, 1].astype(np.float64)
  # float64 sums of 4 rows in another order than np.cov: ~1e-16 relative.
  np.testing.assert_allclose(cov_in, np.cov(x[keep[:, 1]].T, bias=True), rtol=1e-12)
  np.testing.assert_allclose(cov_out, np.cov(x[~keep[:, 1]].T, bias=True), rtol=1e-12)
  mask = np.ones((N, T), bool)
  mask[1, :10] = False
  cov_in_masked, _ = cov_error.gold_covariance(loss, keep, 1, statistic="loss", mask_NxT=mask)
  np.testing.assert_allclose(cov_in_masked, cov_in[10:, 10:], rtol=1e-12)


def test_default_shadow_counts_is_the_sweeps():
  assert cov_error.default_shadow_counts is evaluation.default_shadow_counts


def test_bad_losses_are_refused_as_leave_one_out_refuses_them():
  keep, loss = make_keep(8, 4), random_losses(8, 4, 3)
  loss[5, 2, 1] = np.nan
  with pytest.raises(InputError, match=r"model 5 on canary 2 at position 1 is nan"):
    cov_error.covariance_errors(loss, keep, shadow_counts=[4])
  loss[5, 2, 1] = -0.5
  with pytest.raises(InputError, match=r"model 5 on canary 2 at position 1 is -0.5"):
    cov_error.covariance_errors(loss, keep, shadow_counts=[4])
  # A bad loss at an unscored position is ignored, as in leave_one_out.
  mask = np.ones((4, 3), bool)
  mask[2, 1] = False
  rows = cov_error.covariance_errors(loss, keep, shadow_counts=[8], mask_NxT=mask)
  assert all(r["n_canaries"] == 3 for r in rows)


def test_paired_differences_equal_the_averages_and_a_replicate_loop():
  M, N, T = 12, 30, 4
  keep = make_keep(M, N, seed=2)
  errors = cov_error.canary_errors(random_losses(M, N, T, seed=2), keep, shadow_counts=[6, 12], draws=3)
  rows = {(r["m"], r["draw"], r["class"], r["estimator"], r["mode"]): r for r in cov_error.error_rows(errors)}
  assert any(r["n_skipped"] > 0 for r in rows.values())  # some subsets of 6 leave a class under 2 rows: skipped
  B, rng = 50, np.random.default_rng(5)
  w_BxN = np.stack([np.bincount(rng.integers(0, N, N), minlength=N) for _ in range(B)])
  wd_BxD = np.stack([np.bincount(rng.integers(0, 3, 3), minlength=3) for _ in range(B)])
  out = cov_error.paired_differences(errors, n_boot=B, weights_BxN=w_BxN, draw_weights_BxD=wd_BxD)
  assert len(out) == 2 * 2 * len(cov_error.COMPARISONS)
  for r in out:
    (ea, ma), (eb, mb) = r["a"].split(), r["b"].split()
    draws = range(3) if r["m"] == 6 else range(1)
    # the point estimate is the difference of the canary averages (both skip the same canaries), averaged over draws
    expected = np.mean([rows[r["m"], d, r["class"], ea, ma]["error"] - rows[r["m"], d, r["class"], eb, mb]["error"]
                        for d in draws])
    assert r["difference"] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # each replicate by a loop: the resampled canaries (np.repeat of the counts) averaged per draw, then the
    # resampled draws averaged (m = M has one draw, weight 1); skipped canaries are left out of both
    reps = []
    for b in range(B):
      idx = np.repeat(np.arange(N), w_BxN[b])
      per_draw = [np.nanmean(errors[r["m"], d, r["class"], ea, ma][idx] - errors[r["m"], d, r["class"], eb, mb][idx])
                  for d in draws]
      dw = wd_BxD[b] if len(draws) > 1 else np.ones(1)
      reps.append(np.sum(np.asarray(per_draw) * dw) / dw.sum())
    low, high = np.percentile(reps, [2.5, 97.5])
    # the same replicates summed in another order: a few ulps of the errors (~1), far below 1e-9
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((low, high), rel=1e-9, abs=1e-9)
    used = np.any([np.isfinite(errors[r["m"], d, r["class"], ea, ma]) for d in draws], axis=0).sum()
    assert r["draws"] == len(draws) and r["n_canaries"] == used


@pytest.fixture
def run_dir(tmp_path):
  M, N, T = 8, 12, 6
  keep = make_keep(M, N)
  np.save(tmp_path / "losses.npy", random_losses(M, N, T))
  np.save(tmp_path / "keep.npy", keep)
  return tmp_path


@pytest.fixture
def cli():
  from experiments import covariance_error
  yield covariance_error
  covariance_error.FLAGS.unparse_flags()


OUTPUTS = ("covariance_error.csv", "covariance_error_summary.csv", "covariance_error_differences.csv",
           "covariance_error.json",
           "error_vs_shadow_models.png", "relative_error.png", "covariance_heatmap.png")


def test_cli_end_to_end(run_dir, cli, capsys):
  out_dir = run_dir / "out"
  cli.FLAGS(["prog", f"--run_dir={run_dir}", f"--out_dir={out_dir}", "--noprogress"])
  cli.main([])
  assert sorted(os.listdir(out_dir)) == sorted(OUTPUTS)  # the default settings keep the plain names
  result = json.loads((out_dir / "covariance_error.json").read_text())
  assert result["schema"]["name"] == "seqlira.covariance_error" and result["shape"] == {"M": 8, "N": 12, "T": 6}
  assert result["settings"]["shadow_counts"] == [4, 8]
  assert len(result["rows"]) == (5 + 1) * 12  # m=4: 5 draws, m=8=M: 1 draw; 2 classes x 3 estimators x 2 modes
  summary = (out_dir / "covariance_error_summary.csv").read_text().splitlines()
  assert summary[0].startswith("m,class,estimator,classwise_error_mean") and len(summary) == 1 + 2 * 2 * 3
  printed = capsys.readouterr().out
  assert "relative" in printed and str(out_dir / "covariance_heatmap.png") in printed
  # every ordering of Figs. 2 and 3, per m and class: 3 estimator pairs x 2 modes + 3 class-wise - shared
  differences = (out_dir / "covariance_error_differences.csv").read_text().splitlines()
  assert differences[0] == "m,class,a,b,difference,ci_low,ci_high,draws,n_canaries"
  assert len(differences) == 1 + 2 * 2 * 9 and result["differences"][0]["a"] == "oas classwise"
  assert "oas shared - independent shared" in printed


def test_cli_drops_shadow_counts_above_m_with_a_note(run_dir, cli, capsys):
  cli.FLAGS(["prog", f"--run_dir={run_dir}", "--shadow_counts=4,8,16,32", "--draws=1", "--noprogress"])
  cli.main([])
  printed = capsys.readouterr().out
  assert "--shadow_counts values [16, 32] exceed M=8" in printed
  result = json.loads((run_dir / "covariance_error" / "covariance_error_draws-1.json").read_text())
  assert result["settings"]["shadow_counts"] == [4, 8] and "16" in result["settings"]["dropped_counts_note"]


def test_cli_rejects_shadow_counts_all_above_m(run_dir, cli):
  cli.FLAGS(["prog", f"--run_dir={run_dir}", "--shadow_counts=16,32"])
  with pytest.raises(ValueError, match=r"--shadow_counts.*\[16, 32\].*M=8"):
    cli.main([])
  assert not os.path.exists(run_dir / "covariance_error")


def test_cli_names_outputs_by_their_settings(run_dir, cli):
  out_dir = run_dir / "out"
  cli.FLAGS(["prog", f"--run_dir={run_dir}", "--draws=2", "--statistic=loss", f"--out_dir={out_dir}", "--noprogress"])
  cli.main([])
  assert sorted(os.listdir(out_dir)) == sorted([
      "covariance_error_statistic-loss_draws-2.csv", "covariance_error_summary_statistic-loss_draws-2.csv",
      "covariance_error_differences_statistic-loss_draws-2.csv",
      "covariance_error_statistic-loss_draws-2.json", "error_vs_shadow_models_statistic-loss_draws-2.png",
      "relative_error_statistic-loss_draws-2.png", "covariance_heatmap_statistic-loss.png"])
