"""The length-reduction grid written out (experiments/length_grid.py; docs/outputs.md): TPR and AUC against K.

length_grid.json (schema "seqlira.length_grid"): the block every report opens with (lira.reports.provenance.header),
then `fpr` and `rows` (lira.evaluation.length_grid's rows: one per strategy, K and covariance, the unreduced
baseline first, with bootstrap intervals); length_grid.csv holds the rows; length_grid.png draws TPR against K, one
panel per covariance. Settings other than their defaults are appended to the names (length_grid_statistic-loss.json).
"""

from lira import metrics
from lira.reports import plots
from lira.reports import provenance
import run_folder


def _interval(lo, hi, scale=100.0, fmt="{:.2f}"):
  """' [lo, hi]' scaled and formatted; '' without an interval."""
  return "" if lo is None or hi is None else f" [{fmt.format(scale * lo)}, {fmt.format(scale * hi)}]"


def table(rows, fpr):
  """The grid as printed: TPR in % and AUC with their intervals; n/r where the FPR is not resolved."""
  label = f"TPR@{100 * fpr:g}% (%)"
  lines = [f"{'strategy':<8} {'K':>5} {'covariance':<12} {label:>24} {'AUC':>24}"]
  for r in rows:
    tpr = "n/r" if not r["resolved"] else f"{100 * r['tpr']:.2f}" + _interval(r["tpr_ci_low"], r["tpr_ci_high"])
    auc = f"{r['auc']:.4f}" + _interval(r["auc_ci_low"], r["auc_ci_high"], 1.0, "{:.4f}")
    lines.append(f"{r['strategy']:<8} {r['K']:>5} {r['covariance']:<12} {tpr:>24} {auc:>24}")
  if any(r["tpr_ci_low"] is not None for r in rows):
    lines.append("[bracketed] = 95% bootstrap percentile interval over canaries.")
  if not all(r["resolved"] for r in rows):
    lines.append(f"n/r = not resolved: TPR@{100 * fpr:g}% FPR needs >= {metrics.min_negatives(fpr):,} negatives; "
                 f"available {rows[0]['n_neg']:,}.")
  return "\n".join(lines)


def write(out_dir, run_dir, run, rows, settings, defaults, recorded):
  """length_grid[_settings].{json,csv,png} in out_dir; returns (text to print, paths written).

  settings name the files where they differ from defaults (lengths None at its default); recorded: the JSON's
  settings block (the lengths used, the intervals' level).
  """
  paths = provenance.save_rows(out_dir, "length_grid", run_dir, run, rows, settings, defaults, recorded,
                               {"fpr": settings["fpr"]})
  M, N, T = run.loss_MxNxT.shape
  shape = provenance.shape_line({"M": M, "N": N, "T": T})
  mode = "shared" if settings["shared"] else "class-wise"
  ci = (f"95% bootstrap CI over canaries ({settings['n_boot']} replicates, seed {settings['seed']})"
        if settings["n_boot"] else "no CI")
  balanced = ", balanced counts" if settings["balance_counts"] else ""
  title = (f"{provenance.run_description(run_dir, run.config)}: length reduction, {shape}\n"
           f"statistic={settings['statistic']}, {mode} covariance{balanced}; {ci}")
  figure = plots.length_grid_figure(rows, fpr_label=f"TPR @ {100 * settings['fpr']:g}% FPR", title=title)
  run_folder.save_figure(paths[2], figure)
  text = (f"{shape}; statistic={settings['statistic']}, {mode} covariance, FPR={settings['fpr']:g}\n\n"
          f"{table(rows, settings['fpr'])}")
  return text, paths
