"""The paper's evaluations on per-token arrays: the six-variant LOO table (Table II), the shadow-count
sweep (Figure 5) and the length-reduction grid (Figures 11-14)."""

import concurrent.futures
import dataclasses

import numpy as np
from tqdm.auto import tqdm

from lira import compare
from lira import metrics
from lira import metrics_jax
from lira.checks import check_arrays
from lira.errors import InputError
from lira.loo import leave_one_out, leave_one_out_variants
from lira.scoring import VARIANTS, Scoring

def evaluate_variants(loss_MxNxT, keep_MxN, scoring=None, *, mask_NxT=None, variants=VARIANTS,
                      fprs=metrics.DEFAULT_FPRS, n_boot=metrics.N_BOOT, seed=0, progress=False, summarize=True,
                      num_threads=None, **fields):
  """Leave-one-out scores of each variant (Table II's rows) under `scoring` (its covariance and shared set per
  variant), pooled into one ROC each; returns ([{name, covariance, shared, summary}], {name: llr_MxN}).

  summarize=False skips the ROCs (summary None): the processes of a jax.distributed run other than the first.
  progress=True shows progress bars (the commands'; a library call draws none by default).
  """
  scoring = Scoring.of(scoring, **fields)
  # One pass over the losses for all variants (each block's statistic computed once), then one ROC per variant.
  llrs = leave_one_out_variants(loss_MxNxT, keep_MxN, [scoring.variant(c, s) for _, c, s in variants],
                                mask_NxT=mask_NxT, progress=progress, num_threads=num_threads)
  boot = metrics_jax.bootstrap_backend(scoring.backend)

  def summary(llr_MxN):
    return metrics.summarize(llr_MxN, keep_MxN, fprs=fprs, n_boot=n_boot, seed=seed, backend=boot) if summarize \
        else None

  # Two variants at a time: a summary's sort and ROC run on one core, its replicates on all of them.
  workers = 2 if summarize and boot == "numpy" and len(llrs) > 1 else 1
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    summaries = list(tqdm(pool.map(summary, llrs), total=len(llrs), desc="variants", disable=not progress))
  rows = [{"name": name, "covariance": covariance, "shared": shared, "summary": s}
          for (name, covariance, shared), s in zip(variants, summaries)]
  return rows, {name: llr_MxN for (name, _, _), llr_MxN in zip(variants, llrs)}


class ModelRows:
  """loss_MxNxT[models] without the copy: canary blocks are read from the (memory-mapped) array as they are used."""

  def __init__(self, loss_MxNxT, models):
    self.array, self.models = loss_MxNxT, np.asarray(models)
    self.shape = (len(self.models),) + tuple(loss_MxNxT.shape[1:])
    self.ndim, self.dtype = 3, loss_MxNxT.dtype

  def __getitem__(self, key):
    """[:, canaries] (a block of every model's rows), or [m] (model m's [N, T])."""
    if isinstance(key, (int, np.integer)):
      return self.array[int(self.models[key])]
    if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], slice) and key[0] == slice(None)):
      raise IndexError("ModelRows is indexed as [:, canaries] or [m]")
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


def smallest_count(scoring, variants=VARIANTS):
  """The fewest models m of a subset in which every canary can be scored by every variant: 6 for balanced counts,
  class-wise or offline fits (3 IN and 3 OUT models, one of them the target), else 4 (2 per class, shared)."""
  if scoring.balance_counts or scoring.offline or not all(shared for _, _, shared in variants):
    return 6
  return 4


def sweep_counts(num_models, scoring, variants=VARIANTS):
  """The sweep's default m: 4, 8, 16, ... and M, without the counts below smallest_count (always n/a); M is kept."""
  low = smallest_count(scoring, variants)
  return [m for m in default_shadow_counts(num_models) if m >= low or m == num_models]


def shadow_count_sweep(loss_MxNxT, keep_MxN, scoring=None, *, counts=None, draws=3, variants=VARIANTS, mask_NxT=None,
                       fpr=1e-4, seed=0, progress=True, attack_scorers=(), pairs=(), pair_fprs=(1e-3, 1e-4),
                       n_boot=metrics.N_BOOT, cells=None, **fields):
  """LOO evaluation on random subsets of m models, several draws per m (paper Figure 5).

  Within a subset every model is the target in turn and the other m-1 are its shadow models. With few
  models some canaries have too few IN or OUT models for a fit; their pairs are left out and counted. The variants of
  a subset are scored together (lira.leave_one_out_variants: one read of each block; on the jax backend one program
  for every IN count of the subset, shared by the subsets of one size).
  attack_scorers [(name, scorer)] add other attacks' rows on the same subsets: scorer(model_ids, on_undefined) gives
  the scores [m, N] of the subset's models (NaN where undefined). pairs [(name_a, name_b)] add, per subset and FPR of
  pair_fprs, the paired difference TPR(a) - TPR(b) on the pairs both score, with its paired canary-bootstrap interval
  (lira.compare.paired_difference, n_boot replicates; on jax's device where the backend is jax and the device a GPU
  or TPU): rows of kind "pair" named "a - b", whose tpr is the difference. The full arrays are checked first
  (lira.checks.check_arrays), and errors name the run's model ids.
  cells: where finished subsets are kept (lira.reports.sweep_report.Cells, or any object with its load and save):
  load(m, draw, models) gives a subset's rows from an earlier call, or None to score it; save(m, draw, models, rows)
  keeps them. The subsets are drawn in the same order either way, so a sweep stopped part-way resumes where it
  stopped and returns the rows a whole one would.
  """
  scoring = Scoring.of(scoring, **fields)
  M = np.shape(keep_MxN)[0]
  counts = sweep_counts(M, scoring, variants) if counts is None else sorted(counts)
  if min(counts) < 4 or max(counts) > M:
    raise InputError(f"shadow counts must lie in [4, M={M}], got {counts}")
  known = [name for name, _, _ in variants] + [name for name, _ in attack_scorers]
  for a, b in pairs:
    for name in (a, b):
      if name not in known:
        raise InputError(f"pair {a} - {b}: {name!r} is not one of the sweep's rows ({', '.join(known)})")
  # Checked once on the full run, so that errors name the run's model ids, before any subset is scored.
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT, scoring.reduction)
  rng = np.random.default_rng(seed)
  boot = metrics_jax.bootstrap_backend(scoring.backend)  # the pairs' replicates on a GPU or TPU with --backend=jax
  jobs = [(m, d) for m in counts for d in range(1 if m == M else draws)]
  rows = []
  for m, d in tqdm(jobs, desc="shadow-count sweep", disable=not progress):
    models = np.sort(rng.choice(M, size=m, replace=False))
    done = None if cells is None else cells.load(m, d, models)
    if done is not None:
      rows.extend(done)
      continue
    first = len(rows)
    loss, keep = ModelRows(loss_MxNxT, models), keep_MxN[models]
    llrs = leave_one_out_variants(loss, keep, [scoring.variant(c, s) for _, c, s in variants], mask_NxT=mask_NxT,
                                  on_undefined="nan", model_ids=models) if variants else []
    scores = {name: llr for (name, _, _), llr in zip(variants, llrs)}
    scores.update((name, scorer(models, on_undefined="nan")) for name, scorer in attack_scorers)
    for name, llr in scores.items():
      valid = np.isfinite(llr)
      row = _sweep_row("variant" if name in known[:len(variants)] else "attack", name, m, d, scoring, fpr, valid,
                       keep)
      labels = keep[valid]
      if labels.any() and (~labels).any():
        row.update(tpr=metrics.tpr_at_fpr(llr[valid], labels, fpr), auc=metrics.auc(llr[valid], labels),
                   resolved=metrics.is_resolved(int((~labels).sum()), fpr))
      rows.append(row)
    for a, b in pairs:
      valid = np.isfinite(scores[a]) & np.isfinite(scores[b])
      labels = keep[valid]
      defined = labels.any() and (~labels).any()
      diff = compare.paired_difference(np.where(valid, scores[a], 0.0), np.where(valid, scores[b], 0.0), keep,
                                       fprs=pair_fprs, n_boot=n_boot, seed=seed, valid_MxN=valid, backend=boot) \
          if defined else None
      for f in pair_fprs:
        row = _sweep_row("pair", f"{a} - {b}", m, d, scoring, f, valid, keep)
        if diff is not None:
          cell = diff["tpr"][metrics.fpr_key(f)]
          row.update(tpr=cell["diff"], auc=diff["auc"]["diff"], resolved=metrics.is_resolved(row["n_neg"], f),
                     ci_low=cell["ci"][0], ci_high=cell["ci"][1], p_le_0=cell["p_le_0"], n_boot=int(n_boot))
        rows.append(row)
    if cells is not None:
      cells.save(m, d, models, rows[first:])
  return rows


def _sweep_row(kind, name, m, draw, scoring, fpr, valid_MxN, keep_MxN):
  """A sweep row before its statistics (tpr, auc NaN; a pair's interval None)."""
  return {"kind": kind, "variant": name, "m": m, "draw": draw, "statistic": scoring.statistic,
          "reduction": scoring.reduction or "none", "fpr": fpr, "n_pairs": int(valid_MxN.sum()),
          "n_neg": int((~keep_MxN[valid_MxN]).sum()), "n_excluded": int((~valid_MxN).sum()),
          "tpr": float("nan"), "auc": float("nan"), "resolved": False, "ci_low": None, "ci_high": None,
          "p_le_0": None, "n_boot": None}


def default_lengths(shortest):
  """The powers of two below the shortest canary's scored length, then that length itself (12: 1, 2, 4, 8, 12)."""
  return _powers_of_two(1, shortest)


def length_grid(loss_MxNxT, keep_MxN, scoring=None, *, lengths=None, strategies=("group", "min", "max"),
                covariances=("independent", "oas"), mask_NxT=None, fpr=1e-4, n_boot=metrics.N_BOOT,
                level=metrics.LEVEL, seed=0, progress=True, **fields):
  """TPR at `fpr` against the reduced length K for each strategy and covariance (paper Figures 11-14), the other
  settings from `scoring` (its reduction and covariance are the grid's axes).

  Baselines (no reduction, all positions) come as rows with strategy "none" and K = T. Each row carries the
  canary-bootstrap percentile intervals of TPR and AUC (None if n_boot = 0) and whether `fpr` is resolved.
  """
  scoring = Scoring.of(scoring, **fields)
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
    cell = dataclasses.replace(scoring, covariance=covariance, reduction=reduction)
    llr_MxN = leave_one_out(loss_MxNxT, keep_MxN, cell, mask_NxT=mask_NxT)
    tpr_ci, auc_ci, n_undefined = (None, None), (None, None), 0
    if n_boot > 0:
      tpr_ci_1x2, auc_ci_2, n_undefined = metrics.bootstrap_ci(llr_MxN, keep_MxN, fprs=(fpr,), n_boot=n_boot,
                                                               level=level, seed=seed)
      tpr_ci, auc_ci = tuple(float(v) for v in tpr_ci_1x2[0]), tuple(float(v) for v in auc_ci_2)
    rows.append({"strategy": strategy or "none", "K": k, "covariance": covariance, "shared": scoring.shared,
                 "statistic": scoring.statistic, "fpr": fpr,
                 "tpr": metrics.tpr_at_fpr(llr_MxN.ravel(), keep_MxN.ravel(), fpr),
                 "tpr_ci_low": tpr_ci[0], "tpr_ci_high": tpr_ci[1],
                 "auc": metrics.auc(llr_MxN.ravel(), keep_MxN.ravel()), "auc_ci_low": auc_ci[0],
                 "auc_ci_high": auc_ci[1], "n_boot_undefined": int(n_undefined), "n_neg": n_neg,
                 "resolved": metrics.is_resolved(n_neg, fpr)})
  return rows
