"""LiRA against separate target models: every canary's Gaussians fitted on all M shadow models (Carlini et al. 2022).

The auditor's setting: shadow models from a run folder, and the per-token losses of the same canaries on K target
models trained elsewhere. Per canary, the IN and OUT Gaussians come from all M shadows (no model is left out), and
each target's vector is scored by lira.gaussian.fit_score, as leave-one-out scores a shadow model against the other
M - 1 (docs/conventions.md, "Gaussian fits"). Balanced counts do not apply: nothing is left out.
"""

import numpy as np
from tqdm.auto import tqdm

from lira import gaussian
from lira import gram
from lira.checks import check_arrays, check_targets
from lira.scoring import Scoring


def score_targets(shadow_loss_MxNxT, shadow_keep_MxN, target_loss_KxNxT, scoring=None, *, mask_NxT=None,
                  block_size=None, progress=False, **fields):
  """LiRA scores llr_KxN (float64, higher = member) of K target models' canary losses, fitted on all M shadows.

  target_loss_KxNxT holds the same N canaries' per-token losses on each target ([N, T] is one target). scoring: a
  lira.Scoring (default Scoring()), with any of its fields overridden by keyword (`covariance="independent"`);
  balance_counts, backend and precision do not apply (every target is scored from all M shadows, on the host).
  The shadow arrays and the targets are checked before any scoring; a bad target loss names the target, canary and
  position.
  """
  scoring = Scoring.of(scoring, **fields).check("targets")
  check_arrays(shadow_loss_MxNxT, shadow_keep_MxN, mask_NxT, scoring.reduction)
  M, N, T = np.shape(shadow_loss_MxNxT)
  target = check_targets(target_loss_KxNxT, N, T, mask_NxT)
  keep_MxN = np.asarray(shadow_keep_MxN, bool)
  gaussian.check_counts(keep_MxN, scoring, scorer="targets")
  K = target.shape[0]
  bs = block_size or gaussian.block_size(M + K, T, scoring.covariance)
  blocks = [slice(i, min(i + bs, N)) for i in range(0, N, bs)]

  def features(blk):  # shadows and targets through the same statistic and reduction
    mask = None if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
    both = np.concatenate([np.asarray(shadow_loss_MxNxT[:, blk]), np.asarray(target[:, blk])])
    x, valid = gaussian.features(both, mask, scoring)
    return x[:M], x[M:], valid

  global_var = None
  if scoring.fix_variance:
    totals = None
    for blk in blocks:
      x_MxBxD, _, valid_BxD = features(blk)
      totals = gaussian.add_scatter(totals, gaussian.pooled_scatter(x_MxBxD, keep_MxN[:, blk], valid_BxD))
    global_var = gaussian.pooled_variance(totals, scoring, leave_one_out=False)
  llr_KxN = np.empty((K, N))
  for blk in tqdm(blocks, desc=f"targets {scoring.key}", disable=not progress, leave=False):
    x_MxBxD, t_KxBxD, valid_BxD = features(blk)
    for k, cols, order_BxM in gram.sorted_groups(keep_MxN[:, blk]):  # canaries with k IN shadows: rows IN first
      x_BxMxD = np.take_along_axis(np.moveaxis(x_MxBxD[:, cols], 0, 1), order_BxM[:, :, None], axis=1)
      llr_KxN[:, np.arange(blk.start, blk.stop)[cols]] = gaussian.fit_score(
          x_BxMxD[:, :k], x_BxMxD[:, k:], np.moveaxis(t_KxBxD[:, cols], 0, 1), valid_BxD[cols], scoring,
          global_var=global_var).T
  bad = ~np.isfinite(llr_KxN)
  if bad.any():
    k, n = (int(i[0]) for i in np.nonzero(bad))
    raise FloatingPointError(f"non-finite score for target {k} on canary {n}; please report this with the data")
  return llr_KxN
