"""A blind baseline (Das, Zhang and Tramer 2024, arXiv 2406.16201): members told from non-members by their text alone.

It never looks at the model. The features of a text are tf-idf weights of its word 1- and 2-grams and of its character
2- to 4-grams (inside word boundaries); a logistic regression on them predicts the label. The texts are split into K
stratified folds (seeded); the classifier fitted on the other K - 1 folds scores each fold, so no text is scored by a
classifier that saw it or its label, and every text gets one score: the out-of-fold decision function w . x + b
(higher = member). When it separates the evaluated set about as well as the attacks do, the member / non-member split
differs in distribution and the attacks' numbers say little about what the model memorised.
"""

import numpy as np

from lira.errors import InputError

DEFAULT_FOLDS = 5


def pipeline():
  """The text classifier: word 1-2-gram and character 2-4-gram tf-idf, then a logistic regression (C = 1)."""
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression
  from sklearn.pipeline import make_pipeline, make_union
  features = make_union(TfidfVectorizer(analyzer="word", ngram_range=(1, 2), sublinear_tf=True),
                        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True))
  return make_pipeline(features, LogisticRegression(C=1.0, max_iter=1000))


def check_inputs(texts, labels_N, folds):
  """(texts as a list of str, labels as bool [N]) after the checks: one label per text, both classes, at least
  `folds` texts of each class, folds >= 2."""
  texts = list(texts)
  labels_N = np.asarray(labels_N)
  if not all(isinstance(t, str) for t in texts):
    raise InputError("blind: every text must be a string")
  if labels_N.shape != (len(texts),):
    raise InputError(f"blind: {len(texts)} texts but labels of shape {list(labels_N.shape)}")
  if not np.isin(labels_N, (0, 1)).all():
    raise InputError("blind: labels must be 1 (member) or 0 (non-member)")
  if int(folds) != folds or folds < 2:
    raise InputError(f"blind: folds must be an integer >= 2, got {folds}")
  labels_N = labels_N.astype(bool)
  for name, count in (("member", int(labels_N.sum())), ("non-member", int((~labels_N).sum()))):
    if count < folds:
      raise InputError(f"blind: {count} {name} text(s), fewer than the {folds} folds; every fold needs one of each "
                       "class (use fewer folds)")
  return texts, labels_N


def fold_ids(labels_N, folds=DEFAULT_FOLDS, seed=0):
  """int [N]: the stratified fold (0 .. folds - 1) each text is held out in (sklearn's StratifiedKFold, shuffled)."""
  from sklearn.model_selection import StratifiedKFold
  labels_N = np.asarray(labels_N, dtype=bool)
  fold_N = np.full(labels_N.shape, -1, dtype=np.int64)
  splitter = StratifiedKFold(n_splits=int(folds), shuffle=True, random_state=int(seed))
  for f, (_, held_out) in enumerate(splitter.split(np.zeros(len(labels_N)), labels_N)):
    fold_N[held_out] = f
  return fold_N


def blind(texts, labels_N, folds=DEFAULT_FOLDS, seed=0):
  """(scores float64 [N], fold int [N]): each text's decision function under the classifier fitted on the other
  folds (higher = member), and the fold it was held out in."""
  texts, labels_N = check_inputs(texts, labels_N, folds)
  from sklearn.model_selection import PredefinedSplit, cross_val_predict
  fold_N = fold_ids(labels_N, folds, seed)
  try:
    scores_N = cross_val_predict(pipeline(), np.asarray(texts, dtype=object), labels_N, cv=PredefinedSplit(fold_N),
                                 method="decision_function")
  except ValueError as e:  # a training part whose texts hold no word or character n-gram at all
    raise InputError(f"blind: the classifier cannot be fitted on these texts ({e})") from e
  return np.asarray(scores_N, dtype=np.float64), fold_N
