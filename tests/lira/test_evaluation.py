"""Run folders, synthetic runs and the evaluation drivers (their commands as a user runs them:
tests/e2e/test_evaluate_command.py)."""

import json
import os

import numpy as np
import pytest

import lira
import lira.errors
from lira import evaluation, synthetic
from lira.reports import loo_report
import run_folder
from lira.reports import synthetic_run
from lira import scoring as scoring_lib


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("run"))
  synthetic_run.write_synthetic_run(path, num_models=8, num_canaries=150, seq_len=6, seed=3)
  return path


def test_keep_matrix_is_balanced_and_reproducible():
  keep = synthetic.keep_matrix(10, 50, seed=7)
  assert (keep.sum(axis=0) == 5).all()
  np.testing.assert_array_equal(keep, synthetic.keep_matrix(10, 50, seed=7))
  assert not np.array_equal(keep, synthetic.keep_matrix(10, 50, seed=8))
  with pytest.raises(ValueError, match="even"):
    synthetic.keep_matrix(7, 5, seed=0)


def test_synthetic_losses_carry_the_documented_shift():
  loss, keep, mask = synthetic.synthetic_losses(40, 300, 8, shift=1.0, seed=1)
  assert loss.dtype == np.float32 and mask is None
  z = lira.logit_scale(loss)
  diff = z[keep].mean() - z[~keep].mean()  # 25% of positions shifted by 1 sd (sd ~ U(0.5, 1.5), mean 1)
  assert 0.15 < diff < 0.35
  _, _, ragged = synthetic.synthetic_losses(8, 20, 8, ragged=True, seed=1)
  assert ragged.shape == (20, 8) and ragged[:, 0].all() and not ragged.all()


def test_load_run_validates_files(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    run_folder.load_run(str(tmp_path / "missing"))
  run_folder.save_npy(str(tmp_path / "losses.npy"), np.ones((4, 3, 2), np.float32))
  with pytest.raises(FileNotFoundError, match="keep.npy"):
    run_folder.load_run(str(tmp_path))
  run_folder.save_npy(str(tmp_path / "keep.npy"), np.ones((4, 2), bool))
  with pytest.raises(ValueError, match=r"keep.npy: shape \(4, 2\)"):
    run_folder.load_run(str(tmp_path))
  np.save(tmp_path / "keep.npy", np.array([[object()]] * 4), allow_pickle=True)
  with pytest.raises(ValueError, match=r"holds Python objects \(dtype object\), which seqlira never loads"):
    run_folder.load_run(str(tmp_path))
  run_folder.save_npy(str(tmp_path / "keep.npy"), np.ones((4, 3), np.int64))
  run_folder.save_npy(str(tmp_path / "mask.npy"), np.ones((3, 2), np.float32))
  with pytest.raises(ValueError, match="mask.npy"):
    run_folder.load_run(str(tmp_path))
  os.remove(tmp_path / "mask.npy")
  run = run_folder.load_run(str(tmp_path))
  assert run.keep_MxN.dtype == bool and run.config == {}


def test_atomic_writes_leave_no_temporary_files(tmp_path):
  run_folder.save_json(str(tmp_path / "a.json"), {"x": 1})
  run_folder.save_csv(str(tmp_path / "a.csv"), [{"a": 1, "b": 2}])
  assert sorted(os.listdir(tmp_path)) == ["a.csv", "a.json"]
  assert (tmp_path / "a.csv").read_text() == "a,b\n1,2\n"


def test_evaluate_command_writes_reports(run_dir, tmp_path):
  out = str(tmp_path)
  table, result = loo_report.evaluate_run(run_dir, out, n_boot=20, progress=False)
  scores = [f"scores_{scoring_lib.variant_key(v)}.npy" for v in scoring_lib.VARIANTS]  # n_boot changes no score
  assert set(os.listdir(out)) == {"results_nboot-20.json", "results_nboot-20.md", "roc_nboot-20.png", *scores}
  assert result["files"] == ["results_nboot-20.json", "results_nboot-20.md", "roc_nboot-20.png"] + scores
  with open(os.path.join(out, "results_nboot-20.json")) as f:
    saved = json.load(f)
  assert (saved["n_boot"], saved["seed"], saved["level"], saved["dropped_variants"]) == (20, 0, 0.95, [])
  assert [v["name"] for v in saved["variants"]] == [v[0] for v in scoring_lib.VARIANTS]
  # 8 models x 150 canaries = 600 negatives: 1% is resolved, 0.1% and 0.01% are not, and say so.
  tpr = saved["variants"][0]["summary"]["tpr"]
  assert tpr["0.01"]["resolved"] and not tpr["0.001"]["resolved"] and not tpr["0.0001"]["resolved"]
  assert "n/r" in table and "n/r" in open(os.path.join(out, "results_nboot-20.md")).read()
  # The scores behind the table are leave_one_out's.
  run = run_folder.load_run(run_dir)
  # the commands fit balanced leave-one-out by default
  llr = lira.leave_one_out(run.loss_MxNxT, run.keep_MxN, covariance="oas", shared=True, balance_counts=True)
  oas_shared = saved["variants"][5]["summary"]
  assert oas_shared["tpr"]["0.01"]["tpr"] == lira.tpr_at_fpr(llr.ravel(), run.keep_MxN.ravel(), 0.01)
  np.testing.assert_array_equal(np.load(os.path.join(out, "scores_oas-shared.npy")), llr)


def test_evaluate_refuses_bad_reduction_before_work(run_dir, tmp_path):
  with pytest.raises(ValueError, match="reduction"):
    loo_report.evaluate_run(run_dir, str(tmp_path), reduction="avg:3", progress=False)
  with pytest.raises(ValueError, match="canary 0 has 6"):
    loo_report.evaluate_run(run_dir, str(tmp_path), reduction="min:7", progress=False)
  assert os.listdir(tmp_path) == []


def test_length_grid_baseline_and_group_full_length_agree(run_dir):
  run = run_folder.load_run(run_dir)
  rows = evaluation.length_grid(run.loss_MxNxT, run.keep_MxN, lengths=[1, 6], strategies=("group", "min"),
                                covariances=("independent",), fpr=0.01, progress=False)
  by = {(r["strategy"], r["K"]): r for r in rows}
  assert by["group", 6]["auc"] == pytest.approx(by["none", 6]["auc"], abs=1e-12)
  uni = lira.leave_one_out(run.loss_MxNxT, run.keep_MxN, covariance="univariate", shared=True)
  assert by["group", 1]["tpr"] == lira.tpr_at_fpr(uni.ravel(), run.keep_MxN.ravel(), 0.01)


def test_shadow_count_sweep_excludes_undefined_pairs(run_dir):
  run = run_folder.load_run(run_dir)
  rows = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 8], draws=2, fpr=0.01,
                                       variants=scoring_lib.select_variants(["oas-shared", "univariate-classwise"]),
                                       progress=False)
  assert len(rows) == (2 + 1) * 2
  full = [r for r in rows if r["m"] == 8]
  assert all(r["n_excluded"] == 0 and r["n_pairs"] == 8 * 150 for r in full)
  # With 4 models, class-wise fits never have 2 rows of the target's class left: all pairs excluded.
  small_cw = [r for r in rows if r["m"] == 4 and r["variant"] == "Univariate Class-Wise"]
  assert all(r["n_pairs"] == 0 and np.isnan(r["tpr"]) for r in small_cw)
  with pytest.raises(ValueError, match="shadow counts"):
    evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[16])


def test_shadow_count_sweep_rows_and_paired_differences_from_their_definitions(run_dir):
  # Each row against leave_one_out of its variant alone on the same random subset (the draws' generator replayed),
  # and each pair's difference and interval against lira.compare.paired_difference on those scores.
  from lira import compare
  run = run_folder.load_run(run_dir)
  variants = scoring_lib.select_variants(["oas-shared", "univariate-shared", "independent-classwise"])
  pairs = [("OAS Shared", "Univariate Shared"), ("Independent Class-Wise", "OAS Shared")]
  rows = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[6, 8], draws=2, fpr=0.05,
                                       variants=variants, pairs=pairs, pair_fprs=(0.05, 0.2), n_boot=50, seed=4,
                                       progress=False)
  rng = np.random.default_rng(4)
  for m, d in ((6, 0), (6, 1), (8, 0)):
    models = np.sort(rng.choice(8, size=m, replace=False))
    keep = run.keep_MxN[models]
    scores = {name: lira.leave_one_out(run.loss_MxNxT[models], keep, covariance=c, shared=s, on_undefined="nan")
              for name, c, s in variants}
    for name, llr in scores.items():
      row = next(r for r in rows if r["variant"] == name and r["m"] == m and r["draw"] == d)
      ok = np.isfinite(llr)
      assert row["kind"] == "variant" and row["n_pairs"] == ok.sum()
      assert row["tpr"] == lira.tpr_at_fpr(llr[ok], keep[ok], 0.05)
    for a, b in pairs:
      ok = np.isfinite(scores[a]) & np.isfinite(scores[b])
      want = compare.paired_difference(np.where(ok, scores[a], 0), np.where(ok, scores[b], 0), keep,
                                       fprs=(0.05, 0.2), n_boot=50, seed=4, valid_MxN=ok)
      for f in (0.05, 0.2):
        row = next(r for r in rows if r["variant"] == f"{a} - {b}" and r["m"] == m and r["draw"] == d
                   and r["fpr"] == f)
        cell = want["tpr"][lira.metrics.fpr_key(f)]
        assert row["kind"] == "pair" and row["tpr"] == cell["diff"] and [row["ci_low"], row["ci_high"]] == cell["ci"]
        assert row["tpr"] == lira.tpr_at_fpr(scores[a][ok], keep[ok], f) - lira.tpr_at_fpr(scores[b][ok], keep[ok], f)
  with pytest.raises(lira.errors.InputError, match="pair OAS Shared - RMIA: 'RMIA' is not one of the sweep's rows"):
    evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[8], variants=variants,
                                  pairs=[("OAS Shared", "RMIA")], progress=False)


def _same_rows(got, want):
  """Rows equal value for value, NaN where NaN, keys in the same order (the CSV's columns)."""
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert list(g) == list(w)
    for key in w:
      assert g[key] == w[key] or (isinstance(w[key], float) and np.isnan(w[key]) and np.isnan(g[key])), key


def test_a_stopped_shadow_count_sweep_resumes_to_the_rows_of_a_whole_one(run_dir, tmp_path, monkeypatch):
  """Subsets kept as they finish (sweep_report.Cells) are read back, not scored again, for the same arrays, settings
  and models; a sweep with more counts reuses the subsets it shares with an earlier one (the draws' order is the
  same); another fingerprint, other settings or other models score again."""
  from lira.reports import sweep_report
  run = run_folder.load_run(run_dir)
  variants = scoring_lib.select_variants(["oas-shared", "univariate-classwise"])  # class-wise at m = 4: NaN rows
  kw = dict(draws=2, fpr=0.01, variants=variants, pairs=[("OAS Shared", "Univariate Class-Wise")], pair_fprs=(0.05,),
            n_boot=20, seed=5, progress=False)
  whole = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 6, 8], **kw)
  assert any(np.isnan(r["tpr"]) for r in whole)
  real = evaluation.leave_one_out_variants
  scored = []

  def counting(loss, keep, *a, **k):
    scored.append(int(keep.shape[0]))
    return real(loss, keep, *a, **k)
  monkeypatch.setattr(evaluation, "leave_one_out_variants", counting)

  def cells(folder="cells", fingerprint="run-a", settings=None):
    return sweep_report.Cells(str(tmp_path / folder), fingerprint, settings or {"seed": 5, "pairs": [["a", "b"]]})
  # stopped after the subsets of m = 4 and 6: the same command with every count scores only m = 8
  first = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 6], cells=cells(), **kw)
  assert scored == [4, 4, 6, 6] and sorted(os.listdir(tmp_path / "cells")) == [
      "m-4_draw-0.json", "m-4_draw-1.json", "m-6_draw-0.json", "m-6_draw-1.json"]
  _same_rows(first, whole[:len(first)])
  scored.clear()
  store = cells()
  _same_rows(evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 6, 8], cells=store, **kw), whole)
  assert scored == [8] and store.resumed == 4
  # all read back now, and the files hold strict JSON (NaN listed beside the rows)
  scored.clear()
  _same_rows(evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 6, 8], cells=cells(), **kw), whole)
  assert scored == []
  json.loads(open(tmp_path / "cells" / "m-4_draw-0.json").read(), parse_constant=lambda c: pytest.fail(c))
  # other arrays or settings: every subset scored again (and its file replaced)
  for other in (cells(fingerprint="run-b"), cells(settings={"seed": 5, "pairs": [["a", "c"]]})):
    scored.clear()
    _same_rows(evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 6, 8], cells=other, **kw),
               whole)
    assert scored == [4, 4, 6, 6, 8] and other.resumed == 0
  # another seed draws other models: nothing read back for them
  scored.clear()
  store = cells(settings={"seed": 5, "pairs": [["a", "c"]]})
  evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 6, 8], cells=store, **{**kw, "seed": 6})
  assert store.resumed == 1 and scored == [4, 4, 6, 6]  # m = 8 is every model whatever the seed


def test_shadow_count_sweep_on_the_jax_pipeline_reuses_one_program_per_size(monkeypatch):
  # Subsets of one size have different IN counts but share one traced-count program (layouts widened to powers of
  # two, small programs' blocks sized to powers of two): three draws of m = 20 (counts 8-12) compile once; m = 16
  # adds its layout and a static program for count 5 (at most two block sizes). Scores equal the numpy backend's.
  from lira import balanced_padded
  from lira import loo_device
  from lira import loo_jax
  monkeypatch.setenv(loo_jax.PIPELINE_ON_CPU_ENV, "1")
  loss, keep = synthetic.synthetic_losses(24, 60, 4, seed=2)[:2]
  rng = np.random.default_rng(1)
  keys = {16: set(), 20: set()}
  for m in (16, 16, 16, 20, 20, 20):
    models = np.sort(rng.choice(24, size=m, replace=False))
    keys[m] |= set(balanced_padded.program_keys(sorted(set(keep[models].sum(0).tolist())), m).values())
  assert len(keys[20]) == 1 and len(keys[16]) == 2
  kw = dict(counts=[16, 20], draws=3, fpr=0.05, variants=scoring_lib.select_variants(["oas-shared"]), progress=False,
            seed=1)
  before = loo_device.jitted()._cache_size()
  got = evaluation.shadow_count_sweep(loss, keep, backend="jax", **kw)
  assert loo_device.jitted()._cache_size() - before <= 4
  want = evaluation.shadow_count_sweep(loss, keep, **kw)
  for g, w in zip(got, want):
    assert (g["m"], g["draw"]) == (w["m"], w["draw"]) and abs(g["auc"] - w["auc"]) < 1e-12


def test_shadow_count_sweep_pairs_bootstrap_on_the_device(monkeypatch):
  # With --backend=jax on a GPU or TPU the pairs' replicates run on jax's device (here: the CPU device, as if it
  # were one); the rows equal the numpy backend's, interval for interval.
  from lira import metrics_jax
  from lira import weighted_roc
  loss, keep = synthetic.synthetic_losses(12, 40, 4, seed=3)[:2]
  calls = []
  on_device = weighted_roc.weighted_stats_on_device
  monkeypatch.setattr(metrics_jax, "bootstrap_backend", lambda backend: "jax" if backend == "jax" else "numpy")
  monkeypatch.setattr(weighted_roc, "weighted_stats_on_device", lambda *a: calls.append(1) or on_device(*a))
  variants = scoring_lib.select_variants(["oas-shared", "univariate-shared"])
  kw = dict(counts=[8, 12], draws=1, fpr=0.05, variants=variants,
            pairs=[("OAS Shared", "Univariate Shared")], pair_fprs=(0.05, 0.2), n_boot=40, progress=False, seed=2)
  got = evaluation.shadow_count_sweep(loss, keep, backend="jax", **kw)
  assert len(calls) == 2 * 2  # two subsets, both attacks of the pair
  want = evaluation.shadow_count_sweep(loss, keep, **kw)
  for g, w in zip(got, want):
    if g["kind"] == "pair":
      assert (g["m"], g["fpr"], g["ci_low"], g["ci_high"], g["p_le_0"]) == (w["m"], w["fpr"], w["ci_low"],
                                                                           w["ci_high"], w["p_le_0"])
      assert abs(g["tpr"] - w["tpr"]) < 1e-12


def test_shadow_count_sweep_checks_the_full_run_first(run_dir, monkeypatch):
  run = run_folder.load_run(run_dir)
  loss = np.array(run.loss_MxNxT)
  loss[3, 7, 2] = np.nan

  def no_scoring(*args, **kwargs):
    raise AssertionError("a subset was scored before the inputs were checked")

  monkeypatch.setattr(evaluation, "leave_one_out", no_scoring)
  monkeypatch.setattr(evaluation, "leave_one_out_variants", no_scoring)
  # The run's model id (3), not its index inside a random subset.
  with pytest.raises(lira.errors.InputError, match=r"model 3 on canary 7 at position 2 is nan"):
    evaluation.shadow_count_sweep(loss, run.keep_MxN, counts=[4, 8], progress=False)
  with pytest.raises(lira.errors.InputError, match=r"reduction 'min:7' .* canary 0 has 6"):
    evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=[4, 8], reduction="min:7", progress=False)


def test_leave_one_out_names_subset_models_by_their_run_ids(run_dir):
  run = run_folder.load_run(run_dir)
  models = np.array([1, 2, 5, 6])
  loss = np.array(run.loss_MxNxT[models])
  loss[2, 4, 1] = -1.0
  with pytest.raises(lira.errors.InputError, match=r"model 5 on canary 4 at position 1 is -1.0"):
    lira.leave_one_out(loss, run.keep_MxN[models], covariance="oas", shared=True, on_undefined="nan",
                       model_ids=models)


def test_select_variants_accepts_keys_and_table_names_in_any_spelling():
  by_key = {scoring_lib.variant_key(v): v for v in scoring_lib.VARIANTS}
  assert list(by_key) == ["univariate-classwise", "univariate-shared", "independent-classwise", "independent-shared",
                          "oas-classwise", "oas-shared"]
  for spelling in ("oas-shared", "oas_shared", "OAS-Shared", "OAS Shared", " oas_SHARED "):
    assert scoring_lib.select_variants([spelling]) == (by_key["oas-shared"],)
  for spelling in ("Univariate Class-Wise", "univariate_classwise", "UNIVARIATE-CLASSWISE", "univariate class-wise"):
    assert scoring_lib.select_variants([spelling]) == (by_key["univariate-classwise"],)
  # Order as given, each variant once.
  assert scoring_lib.select_variants(["oas_shared", "independent-classwise", "OAS Shared"]) == (
      by_key["oas-shared"], by_key["independent-classwise"])
  assert scoring_lib.select_variants(None) == scoring_lib.VARIANTS
  with pytest.raises(lira.errors.InputError) as err:
    scoring_lib.select_variants(["oas-global"])
  assert str(err.value) == ("unknown variant 'oas-global'; choose from univariate-classwise, univariate-shared, "
                            "independent-classwise, independent-shared, oas-classwise, oas-shared")


def test_applicable_variants_says_what_is_dropped_and_why():
  kept, dropped = scoring_lib.applicable_variants(scoring_lib.VARIANTS, lira.Scoring())
  assert kept == scoring_lib.VARIANTS and dropped == []
  kept, dropped = scoring_lib.applicable_variants(scoring_lib.VARIANTS, lira.Scoring(offline=True))
  assert [v[0] for v in kept] == ["Univariate Class-Wise", "Independent Class-Wise", "OAS Class-Wise"]
  assert [d[0] for d in dropped] == ["Univariate Shared", "Independent Shared", "OAS Shared"]
  assert all("offline" in reason for _, reason in dropped)
  kept, dropped = scoring_lib.applicable_variants(scoring_lib.VARIANTS, lira.Scoring(offline=True, fix_variance=True))
  assert [v[0] for v in kept] == ["Univariate Class-Wise", "Independent Class-Wise"]
  reasons = dict(dropped)
  assert "offline" in reasons["OAS Shared"] and "fix_variance" in reasons["OAS Shared"]
  assert "offline" not in reasons["OAS Class-Wise"] and "fix_variance" in reasons["OAS Class-Wise"]
  kept, dropped = scoring_lib.applicable_variants(scoring_lib.select_variants(["oas-shared"]), lira.Scoring(offline=True))
  assert kept == () and dropped[0][0] == "OAS Shared"


def test_default_shadow_counts():
  assert evaluation.default_shadow_counts(64) == [4, 8, 16, 32, 64]
  assert evaluation.default_shadow_counts(48) == [4, 8, 16, 32, 48]
  assert evaluation.default_shadow_counts(5) == [4, 5]
  assert evaluation.default_shadow_counts(4) == [4]


@pytest.mark.parametrize("fields", [{}, {"balance_counts": False}, {"balance_counts": False, "offline": True}])
@pytest.mark.parametrize("variants", [scoring_lib.VARIANTS, [v for v in scoring_lib.VARIANTS if v[2]]])
def test_smallest_count_is_where_the_best_split_becomes_scoreable(fields, variants):
  """smallest_count agrees with the fit's own count check: with an even number m of models, half of them IN (as in
  every run), every variant scores the canary at m = smallest_count and some variant refuses it at m - 2."""
  scoring = scoring_lib.Scoring(**fields)
  low = evaluation.smallest_count(scoring, variants)

  def scoreable(m):
    keep = np.zeros((m, 1), bool)
    keep[: m // 2] = True
    return all(not lira.gaussian.check_counts(keep, scoring.variant(c, s), on_undefined="nan").any()
               for _, c, s in variants)

  assert scoreable(low) and not scoreable(low - 2)
  assert evaluation.sweep_counts(64, scoring, variants) == [m for m in (4, 8, 16, 32, 64) if m >= low]
  assert evaluation.sweep_counts(6, scoring, variants) == [m for m in (4, 6) if m >= low]
