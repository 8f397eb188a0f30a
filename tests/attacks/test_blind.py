"""The blind baseline (attacks.blind) and its row in pretrain_attacks.

Its out-of-fold scores are checked against a brute-force loop that builds the documented classifier from sklearn's
parts on each fold's training texts and scores the held-out texts; its AUC against what a text-only classifier must
give (1 when members carry a marker word, about 0.5 on label-independent texts); and that no text is scored by a
classifier that saw it (texts carrying a unique word, which a classifier that saw them memorises).
"""

import os

import numpy as np
import pytest
from absl import flags
from sklearn import metrics as skm
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import FeatureUnion, Pipeline

from attacks import blind
from attacks import feature_folder
from attacks import report
from lira.errors import InputError
from attack_cli import make_features, pretrain_cli, run_cli, strict_json  # noqa: F401 (a fixture)

VOCAB = [f"w{i}" for i in range(200)]


def random_texts(rng, n, words=12, suffix=lambda i: ""):
  return [" ".join(rng.choice(VOCAB, words)) + suffix(i) for i in range(n)]


def null_auc_tolerance(n_pos, n_neg):
  """4 standard deviations of the AUC of label-independent scores, sqrt((n_pos + n_neg + 1) / (12 n_pos n_neg))
  (Mann-Whitney U without ties): a cross-validated classifier on such texts lands further only with odds < 1e-4."""
  return 4 * np.sqrt((n_pos + n_neg + 1) / (12 * n_pos * n_neg))


def test_out_of_fold_scores_equal_a_brute_force_loop():
  rng = np.random.default_rng(0)
  labels_N = np.array([1, 0, 0] * 20)  # 20 members, 40 non-members: stratification matters
  # Members use the first half of the vocabulary more often: a signal, but not a perfect one.
  texts = [" ".join(rng.choice(VOCAB[:120] if y else VOCAB[80:], 10)) for y in labels_N]
  scores_N, fold_N = blind.blind(texts, labels_N, folds=4, seed=3)
  reference_N, seen = np.full(len(texts), np.nan), np.zeros(len(texts), int)
  splits = StratifiedKFold(n_splits=4, shuffle=True, random_state=3).split(np.zeros(len(texts)), labels_N)
  for f, (train, held_out) in enumerate(splits):
    classifier = Pipeline([
        ("features", FeatureUnion([
            ("words", TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True)),
            ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True))])),
        ("logistic", LogisticRegression(C=1.0, max_iter=1000))])
    classifier.fit([texts[i] for i in train], labels_N[train])
    reference_N[held_out] = classifier.decision_function([texts[i] for i in held_out])
    np.testing.assert_array_equal(fold_N[held_out], f)
    assert not set(train) & set(held_out)
    seen[held_out] += 1
  assert (seen == 1).all()  # every text scored once, by the classifier of the one fold that held it out
  # The same float64 fits and dot products in the same order: equal up to a few ulps of scores of order 1.
  np.testing.assert_allclose(scores_N, reference_N, rtol=0, atol=1e-12)
  assert scores_N.dtype == np.float64
  assert skm.roc_auc_score(labels_N, scores_N) > 0.5


def test_folds_are_stratified_and_seeded():
  labels_N = np.array([1] * 13 + [0] * 29)
  fold_N = blind.fold_ids(labels_N, folds=5, seed=1)
  for y in (0, 1):
    counts = np.bincount(fold_N[labels_N == y], minlength=5)
    assert counts.max() - counts.min() <= 1 and counts.sum() == (labels_N == y).sum()
  np.testing.assert_array_equal(fold_N, blind.fold_ids(labels_N, folds=5, seed=1))
  assert not np.array_equal(fold_N, blind.fold_ids(labels_N, folds=5, seed=2))


def test_a_marker_word_in_members_gives_auc_one():
  rng = np.random.default_rng(1)
  labels_N = np.array([1, 0] * 100)
  texts = random_texts(rng, len(labels_N), suffix=lambda i: " zebra" if labels_N[i] else "")
  scores_N, _ = blind.blind(texts, labels_N)
  assert skm.roc_auc_score(labels_N, scores_N) >= 0.99


def test_label_independent_texts_give_auc_near_half():
  rng = np.random.default_rng(2)
  labels_N = np.array([1, 0] * 200)
  texts = random_texts(rng, len(labels_N))
  scores_N, _ = blind.blind(texts, labels_N)
  assert abs(skm.roc_auc_score(labels_N, scores_N) - 0.5) < null_auc_tolerance(200, 200)  # 0.116


def test_no_text_is_scored_by_a_classifier_that_saw_it():
  # Each text carries a word of its own and random labels: a classifier that saw a text (and its label) reads the
  # label off that word, one that did not has nothing to go on.
  rng = np.random.default_rng(3)
  labels_N = rng.permutation(np.array([1, 0] * 150))
  texts = random_texts(rng, len(labels_N), suffix=lambda i: f" uid{i}x")
  in_sample = blind.pipeline().fit(texts, labels_N).decision_function(texts)
  assert skm.roc_auc_score(labels_N, in_sample) > 0.99  # the memorisation this test would catch
  scores_N, _ = blind.blind(texts, labels_N)
  assert abs(skm.roc_auc_score(labels_N, scores_N) - 0.5) < null_auc_tolerance(150, 150)


@pytest.mark.parametrize("texts, labels, folds, message", [
    (["a b"] * 8, [1] * 4 + [0] * 4, 5, r"blind: 4 member text\(s\), fewer than the 5 folds"),
    (["a b"] * 12, [1] * 9 + [0] * 3, 5, r"blind: 3 non-member text\(s\), fewer than the 5 folds"),
    (["a b"] * 8, [1] * 4 + [0] * 4, 1, r"folds must be an integer >= 2, got 1"),
    (["a b"] * 8, [1] * 7, 2, r"8 texts but labels of shape \[7\]"),
    (["a b"] * 7 + [3], [1] * 4 + [0] * 4, 2, r"every text must be a string"),
    (["a b"] * 8, [1] * 4 + [2] * 4, 2, r"labels must be 1 \(member\) or 0"),
    ([""] * 8, [1] * 4 + [0] * 4, 2, r"cannot be fitted on these texts"),
])
def test_bad_input_is_one_line(texts, labels, folds, message):
  with pytest.raises(InputError, match=message) as error:
    blind.blind(texts, labels, folds)
  assert "\n" not in str(error.value)


def summary(auc, ci=(None, None)):
  return {"auc": auc, "auc_ci": list(ci)}


@pytest.mark.parametrize("blind, best, says", [
    (summary(0.70, (0.65, 0.75)), summary(0.80, (0.75, 0.85)), None),
    (summary(0.76, (0.70, 0.82)), summary(0.80, (0.75, 0.85)),
     "AUC 0.7600 [0.7000, 0.8200] (its 95% interval excludes 0.5), within the 95% interval [0.7500, 0.8500]"),
    (summary(0.90, (0.85, 0.95)), summary(0.80, (0.75, 0.85)), "above the 95% interval"),
    # a blind AUC above the best attack's interval is worded so, not "about as well"
    (summary(0.8688, (0.83, 0.90)), summary(0.6087, (0.57, 0.65)), "separate these members from these non-members "
     "better than the attacks do"),
    # the blind classifier no better than chance by its own interval: no warning, whatever the attacks reach
    (summary(0.54, (0.40, 0.68)), summary(0.52, (0.36, 0.69)), None),
    (summary(0.79), summary(0.80), None),  # no bootstrap: the best row's AUC is the bar
    (summary(0.80), summary(0.80), "AUC 0.8000 (no bootstrap interval), at or above the AUC of the best attack"),
    (summary(0.80), summary(0.80), "about as well as the attacks do"),
    (summary(0.50), summary(0.45), None),  # no bootstrap and at chance
])
def test_blind_warning_against_the_best_attack(blind, best, says):
  rows = [{"name": "Loss", "attack": "loss", "summary": summary(0.4, (0.35, 0.45))},
          {"name": "Min-K%", "attack": "min_k", "summary": best},
          {"name": "Blind", "attack": "blind", "summary": blind}]
  warning = report.blind_warning(rows)
  if says is None:
    assert warning is None
  else:
    assert warning.startswith("WARNING: the blind baseline") and says in warning
    assert f"(Min-K%, AUC {best['auc']:.4f})" in warning
    assert "differ in distribution" not in warning  # what the numbers show, not a cause
  assert report.blind_warning(rows[2:]) is None and report.blind_warning(rows[:2]) is None


def test_pretrain_attacks_blind_row_and_warning(tmp_path, pretrain_cli, capsys):
  arrays, texts = make_features(tmp_path)  # members' texts say "member", non-members' "other": a shifted split
  run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss,blind", "--folds=4", "--seed=2", "--n_boot=50")
  printed = capsys.readouterr().out
  result = strict_json(tmp_path / "results_attacks-loss+blind_folds-4_nboot-50_seed-2.json")
  row = result["rows"][1]
  assert row["attack"] == "blind" and row["params"]["folds"] == 4 and row["name"] in printed
  labels_N = arrays["labels"]
  expected_N, _ = blind.blind(texts, labels_N, folds=4, seed=2)
  assert row["summary"]["auc"] == pytest.approx(skm.roc_auc_score(labels_N, expected_N), abs=1e-12)  # count ratio
  assert row["summary"]["auc"] == 1.0 and result["settings"]["folds"] == 4
  assert result["blind_warning"].startswith("WARNING") and result["blind_warning"] in printed
  assert result["notes"][0] == result["blind_warning"]


def test_pretrain_attacks_no_warning_on_label_independent_texts(tmp_path, pretrain_cli, capsys):
  make_features(tmp_path)
  rng = np.random.default_rng(4)
  feature_folder.write_json(tmp_path, "texts", random_texts(rng, 40))
  run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss,blind", "--n_boot=50")
  result = strict_json(tmp_path / "results_attacks-loss+blind_nboot-50.json")
  assert result["blind_warning"] is None and "WARNING" not in capsys.readouterr().out
  assert result["rows"][0]["summary"]["auc"] > result["rows"][1]["summary"]["auc"]


def test_pretrain_attacks_refuses_more_folds_than_texts_of_a_class(tmp_path, pretrain_cli):
  make_features(tmp_path)  # 20 members, 20 non-members
  with pytest.raises(InputError, match=r"blind: 20 member text\(s\), fewer than the 21 folds"):
    run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss,blind", "--folds=21")
  pretrain_cli.FLAGS.unparse_flags()
  with pytest.raises(flags.IllegalFlagValueError, match=r"--folds=1: must be >= 2"):
    run_cli(pretrain_cli, f"--features={tmp_path}", "--folds=1")
  assert not any(f.startswith("results") for f in os.listdir(tmp_path))
