"""Reports of a leave-one-out evaluation: results.json, results.md and the log-log ROC plot."""

import os
import time

from lira import evaluation
from lira import metrics
from lira import plots
from lira import rundir
from lira import transforms
from lira.errors import InputError


def evaluate_run(run_dir, out_dir=None, reduction=None, statistic="logit", variants=None, offline=False,
                 fix_variance=False, n_boot=200, seed=0, progress=True):
  """Evaluate a run folder, write the reports, and return (table text, result dict)."""
  transforms.parse_reduction(reduction)
  chosen = evaluation.select_variants(variants)
  if offline:
    chosen = tuple(v for v in chosen if not v[2])
  if fix_variance:
    chosen = tuple(v for v in chosen if v[1] != "oas")
  if not chosen:
    raise InputError("no variant left: offline needs class-wise variants, fix_variance needs univariate/independent")
  run = rundir.load_run(run_dir)
  out_dir = out_dir or run_dir
  start = time.perf_counter()
  rows, _ = evaluation.evaluate_variants(
      run.loss_MxNxT, run.keep_MxN, mask_NxT=run.mask_NxT, reduction=reduction, statistic=statistic,
      variants=chosen, n_boot=n_boot, seed=seed, progress=progress, offline=offline, fix_variance=fix_variance)
  seconds = time.perf_counter() - start
  M, N, T = run.loss_MxNxT.shape
  setting = (f"M={M} models, N={N} canaries, T={T} positions; statistic={statistic}, reduction={reduction or 'none'}"
             f"{', offline' if offline else ''}{', fixed variance' if fix_variance else ''}; leave-one-out")
  table_rows = [(r["name"], r["summary"]) for r in rows]
  result = {"run_dir": os.path.abspath(run_dir), "setting": setting, "shape": {"M": M, "N": N, "T": T},
            "statistic": statistic, "reduction": reduction, "offline": offline, "fix_variance": fix_variance,
            "seconds": seconds, "variants": rows, "run_config": run.config}
  rundir.save_json(os.path.join(out_dir, "results.json"), result)
  rundir.save_text(os.path.join(out_dir, "results.md"),
                   f"# Leave-one-out LiRA\n\n{setting}\n\n{metrics.format_markdown(table_rows)}\n")
  curves = [(r["name"], r["summary"]["roc"]["fpr"], r["summary"]["roc"]["tpr"], r["summary"]["auc"]) for r in rows]
  fig = plots.roc_figure(curves, title=f"LiRA leave-one-out (M={M}, N={N}, T={T})")
  rundir.save_figure(os.path.join(out_dir, "roc.png"), fig)
  return f"{setting}\n\n{metrics.format_table(table_rows)}", result
