"""Is attack A better than attack B on the same (model, canary) pairs? A paired bootstrap over canaries.

Two variants' TPRs each carry an interval, but the intervals overlap far more often than the difference is in doubt:
both variants score the same canaries, so their errors are correlated. The paired bootstrap resamples the canaries
once per replicate and computes both TPRs (and AUCs) on that same resample; the percentile interval of the replicate
differences is the interval of the difference (the same replicates as lira.metrics.bootstrap_ci with the same seed).
"""

import numpy as np

from lira import metrics
from lira import weighted_roc
from lira.errors import InputError


def paired_difference(scores_a_MxN, scores_b_MxN, labels_MxN, fprs=metrics.DEFAULT_FPRS, n_boot=1000, level=metrics.LEVEL,
                      seed=0, valid_MxN=None, backend="numpy"):
  """TPR(A) - TPR(B) at each FPR and AUC(A) - AUC(B), with paired-bootstrap percentile intervals.

  Returns {"tpr": {fpr_key: {"fpr", "a", "b", "diff", "ci", "p_le_0"}}, "auc": {...}, "n_boot", "n_boot_undefined"};
  p_le_0 is the fraction of defined replicates whose difference is <= 0 (small: A is better in nearly every
  resample). Higher score = member for both; valid_MxN (optional) excludes the same pairs from both. backend "jax"
  computes both attacks' replicates on jax's default device (lira.metrics_jax), with the same results.
  """
  metrics.check_backend(backend)
  if np.shape(scores_a_MxN) != np.shape(scores_b_MxN):
    raise InputError(f"the two score arrays differ in shape: {np.shape(scores_a_MxN)} and {np.shape(scores_b_MxN)}")
  if n_boot < 1:
    raise InputError(f"n_boot must be >= 1, got {n_boot}")
  fprs = tuple(float(f) for f in fprs)
  ranked = [metrics.rank_pairs(s, labels_MxN, valid_MxN) for s in (scores_a_MxN, scores_b_MxN)]
  w_BxN = metrics.bootstrap_weights(ranked[0].n_canaries, n_boot, seed)
  replicates = weighted_roc.weighted_stats_on_device if backend == "jax" else weighted_roc.weighted_stats
  (tpr_a_BxF, auc_a_B), (tpr_b_BxF, auc_b_B) = (replicates(r, w_BxN, fprs) for r in ranked)
  ones_1xN = np.ones((1, ranked[0].n_canaries), np.int64)
  (tpr_a_F, auc_a), (tpr_b_F, auc_b) = (
      (t[0], a[0]) for t, a in (weighted_roc.weighted_stats(r, ones_1xN, fprs) for r in ranked))
  ok_B = np.isfinite(auc_a_B) & np.isfinite(auc_b_B)

  def entry(a, b, d_B):
    d_B = d_B[ok_B]
    return {"a": float(a), "b": float(b), "diff": float(a - b),
            "ci": [float(x) for x in metrics._percentile_ci(d_B, level)],
            "p_le_0": float(np.mean(d_B <= 0)) if d_B.size else None}

  tpr = {}
  for f, fpr in enumerate(fprs):
    tpr[metrics.fpr_key(fpr)] = {"fpr": fpr, **entry(tpr_a_F[f], tpr_b_F[f], tpr_a_BxF[:, f] - tpr_b_BxF[:, f])}
  return {"tpr": tpr, "auc": entry(auc_a, auc_b, auc_a_B - auc_b_B), "n_boot": int(n_boot),
          "n_boot_undefined": int((~ok_B).sum()), "ci_level": float(level)}
