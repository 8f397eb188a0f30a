"""The paper's evaluations on per-token arrays: the six-variant LOO table (Table II), the shadow-count
sweep (Figure 5) and the length-reduction grid (Figures 11-14)."""

import numpy as np
from tqdm.auto import tqdm

from lira import metrics
from lira.loo import check_arrays, leave_one_out, leave_one_out_variants
from lira.errors import InputError

# Table II's rows: (name, covariance, shared).
VARIANTS = (
    ("Univariate Class-Wise", "univariate", False),
    ("Univariate Shared", "univariate", True),
    ("Independent Class-Wise", "independent", False),
    ("Independent Shared", "independent", True),
    ("OAS Class-Wise", "oas", False),
    ("OAS Shared", "oas", True),
)


def variant_key(variant):
  """Command-line key of a variant: "univariate-classwise", ..., "oas-shared"."""
  _, covariance, shared = variant
  return f"{covariance}-{'shared' if shared else 'classwise'}"


def _folded(name):
  # "oas_shared", "OAS-Shared", "OAS Shared" and "oas-shared" are one name; so are "Class-Wise" and "classwise".
  return "".join(ch for ch in str(name).lower() if ch not in " -_")


def select_variants(names=None):
  """Variants by key ("oas-shared", ...) or Table II name, case, "-", "_" and spaces ignored; None = all six."""
  if not names:
    return VARIANTS
  by_name = {_folded(n): v for v in VARIANTS for n in (variant_key(v), v[0])}
  out = []
  for name in names:
    variant = by_name.get(_folded(name))
    if variant is None:
      raise InputError(f"unknown variant {name!r}; choose from {', '.join(variant_key(v) for v in VARIANTS)}")
    if variant not in out:
      out.append(variant)
  return tuple(out)


def applicable_variants(variants, *, offline=False, fix_variance=False):
  """Split variants into (kept, dropped): offline has no shared variants, fix_variance no OAS.

  dropped is a list of (name, reason) so a report can say once which variants were left out and why.
  """
  kept, dropped = [], []
  for variant in variants:
    name, covariance, shared = variant
    reasons = []
    if offline and shared:
      reasons.append("offline scoring fits the OUT models alone, so it has no shared IN/OUT covariance")
    if fix_variance and covariance == "oas":
      reasons.append("fix_variance (LiRA's global variance) applies to univariate and independent, not OAS")
    if reasons:
      dropped.append((name, "; ".join(reasons)))
    else:
      kept.append(variant)
  return tuple(kept), dropped


def evaluate_variants(loss_MxNxT, keep_MxN, *, mask_NxT=None, reduction=None, statistic="logit",
                      variants=VARIANTS, fprs=metrics.DEFAULT_FPRS, n_boot=200, seed=0, progress=True, summarize=True,
                      **loo_kwargs):
  """Leave-one-out scores of each variant pooled into one ROC each; returns [{name, ..., summary}] and scores.

  summarize=False skips the ROCs (summary None): the processes of a jax.distributed run other than the first.
  """
  # One pass over the losses for all variants (each block's statistic computed once), then one ROC per variant.
  llrs = leave_one_out_variants(loss_MxNxT, keep_MxN, variants=[(c, s) for _, c, s in variants], reduction=reduction,
                                statistic=statistic, mask_NxT=mask_NxT, progress=progress, **loo_kwargs)
  rows, scores = [], {}
  for (name, covariance, shared), llr_MxN in zip(tqdm(variants, desc="variants", disable=not progress), llrs):
    summary = metrics.summarize(llr_MxN, keep_MxN, fprs=fprs, n_boot=n_boot, seed=seed) if summarize else None
    rows.append({"name": name, "covariance": covariance, "shared": shared, "summary": summary})
    scores[name] = llr_MxN
  return rows, scores


class ModelRows:
  """loss_MxNxT[models] without the copy: canary blocks are read from the (memory-mapped) array as they are used."""

  def __init__(self, loss_MxNxT, models):
    self.array, self.models = loss_MxNxT, np.asarray(models)
    self.shape = (len(self.models),) + tuple(loss_MxNxT.shape[1:])
    self.ndim, self.dtype = 3, loss_MxNxT.dtype

  def __getitem__(self, key):
    if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], slice) and key[0] == slice(None)):
      raise IndexError("ModelRows is indexed as [:, canaries]")
    return np.asarray(self.array[:, key[1]])[self.models]


def _powers_of_two(start, stop):
  out, m = [], start
  while m < stop:
    out.append(m)
    m *= 2
  return out + [stop]


def default_shadow_counts(num_models):
  """4, 8, 16, ... below M, then M itself: the x axis of the shadow-count sweep and the covariance error (Figs. 2, 5)."""
  return _powers_of_two(4, num_models) if num_models > 4 else [num_models]


def shadow_count_sweep(loss_MxNxT, keep_MxN, *, counts=None, draws=3, variants=VARIANTS, mask_NxT=None,
                       reduction=None, statistic="logit", fpr=1e-4, seed=0, progress=True, balance_counts=False,
                       backend="numpy", precision="float64"):
  """LOO evaluation on random subsets of m models, several draws per m (paper Figure 5).

  Within a subset every model is the target in turn and the other m-1 are its shadow models. With few
  models some canaries have too few IN or OUT models for a fit; their pairs are left out and counted.
  The full arrays are checked first (lira.loo.check_arrays), and errors name the run's model ids.
  """
  M = np.shape(keep_MxN)[0]
  counts = default_shadow_counts(M) if counts is None else sorted(counts)
  if min(counts) < 4 or max(counts) > M:
    raise InputError(f"shadow counts must lie in [4, M={M}], got {counts}")
  # Checked once on the full run, so that errors name the run's model ids, before any subset is scored.
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT, reduction)
  rng = np.random.default_rng(seed)
  jobs = [(m, d) for m in counts for d in range(1 if m == M else draws)]
  rows = []
  for m, d in tqdm(jobs, desc="shadow-count sweep", disable=not progress):
    models = np.sort(rng.choice(M, size=m, replace=False))
    loss, keep = ModelRows(loss_MxNxT, models), keep_MxN[models]
    for name, covariance, shared in variants:
      llr = leave_one_out(loss, keep, covariance=covariance, shared=shared, mask_NxT=mask_NxT, reduction=reduction,
                          statistic=statistic, on_undefined="nan", model_ids=models, balance_counts=balance_counts,
                          backend=backend, precision=precision)
      valid = np.isfinite(llr)
      row = {"variant": name, "m": m, "draw": d, "statistic": statistic, "reduction": reduction or "none", "fpr": fpr,
             "n_pairs": int(valid.sum()), "n_neg": int((~keep[valid]).sum()), "n_excluded": int((~valid).sum()),
             "tpr": float("nan"), "auc": float("nan"), "resolved": False}
      labels = keep[valid]
      if labels.any() and (~labels).any():
        row.update(tpr=metrics.tpr_at_fpr(llr[valid], labels, fpr), auc=metrics.auc(llr[valid], labels),
                   resolved=metrics.is_resolved(int((~labels).sum()), fpr))
      rows.append(row)
  return rows


def default_lengths(shortest):
  """1, 2, 4, ... up to the shortest canary's scored positions, and that length itself."""
  return _powers_of_two(1, shortest)


def length_grid(loss_MxNxT, keep_MxN, *, lengths=None, strategies=("group", "min", "max"),
                covariances=("independent", "oas"), shared=True, mask_NxT=None, statistic="logit", fpr=1e-4,
                n_boot=200, level=0.95, seed=0, progress=True, balance_counts=False, backend="numpy",
                precision="float64"):
  """TPR at `fpr` against the reduced length K for each strategy and covariance (paper Figures 11-14).

  Baselines (no reduction, all positions) come as rows with strategy "none" and K = T. Each row carries the
  canary-bootstrap percentile intervals of TPR and AUC (None if n_boot = 0) and whether `fpr` is resolved.
  """
  T = loss_MxNxT.shape[2]
  shortest = T if mask_NxT is None else int(np.asarray(mask_NxT, bool).sum(axis=1).min())
  lengths = default_lengths(shortest) if lengths is None else sorted(lengths)
  if max(lengths) > shortest:
    raise InputError(f"reduced length {max(lengths)} exceeds the shortest canary ({shortest} scored positions)")
  jobs = [(None, T, c) for c in covariances] + [(s, k, c) for s in strategies for k in lengths for c in covariances]
  n_neg = int((~np.asarray(keep_MxN, bool)).sum())
  rows = []
  for strategy, k, covariance in tqdm(jobs, desc="length grid", disable=not progress):
    reduction = None if strategy is None else f"{strategy}:{k}"
    llr_MxN = leave_one_out(loss_MxNxT, keep_MxN, covariance=covariance, shared=shared, reduction=reduction,
                            statistic=statistic, mask_NxT=mask_NxT, balance_counts=balance_counts, backend=backend,
                            precision=precision)
    tpr_ci, auc_ci, n_undefined = (None, None), (None, None), 0
    if n_boot > 0:
      tpr_ci_1x2, auc_ci_2, n_undefined = metrics.bootstrap_ci(llr_MxN, keep_MxN, fprs=(fpr,), n_boot=n_boot,
                                                               level=level, seed=seed)
      tpr_ci, auc_ci = tuple(float(v) for v in tpr_ci_1x2[0]), tuple(float(v) for v in auc_ci_2)
    rows.append({"strategy": strategy or "none", "K": k, "covariance": covariance, "shared": shared,
                 "statistic": statistic, "fpr": fpr,
                 "tpr": metrics.tpr_at_fpr(llr_MxN.ravel(), keep_MxN.ravel(), fpr),
                 "tpr_ci_low": tpr_ci[0], "tpr_ci_high": tpr_ci[1],
                 "auc": metrics.auc(llr_MxN.ravel(), keep_MxN.ravel()), "auc_ci_low": auc_ci[0],
                 "auc_ci_high": auc_ci[1], "n_boot_undefined": int(n_undefined), "n_neg": n_neg,
                 "resolved": metrics.is_resolved(n_neg, fpr)})
  return rows
