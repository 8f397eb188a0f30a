"""The covariance-error analysis written out (experiments/covariance_error.py; docs/outputs.md).

covariance_error.csv holds lira.cov_error.error_rows (one per canary, class, m, draw, estimator and mode);
covariance_error_summary.csv one row per (m, class, estimator) with the class-wise and shared errors and the relative
error; covariance_error_differences.csv the paired differences error(A) - error(B) with their 95% intervals;
covariance_error.json (schema "seqlira.covariance_error"): the block every report opens with
(lira.reports.provenance.header), then `rows`, `aggregated`, `relative` and `differences`. Figures:
error_vs_shadow_models.png, relative_error.png and covariance_heatmap.png (one canary's gold-standard covariances).
Settings other than their defaults are appended to the names; the heatmap's name carries only statistic and canary.
"""

import csv
import io

from lira import cov_error
from lira.reports import cov_plots
from lira.reports import provenance
import run_folder

STEMS = (("covariance_error", "csv"), ("covariance_error_summary", "csv"), ("covariance_error_differences", "csv"),
         ("covariance_error", "json"), ("error_vs_shadow_models", "png"), ("relative_error", "png"))


def to_csv(rows):
  """Rows of dicts as CSV text (columns from the first row)."""
  buf = io.StringIO()
  writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
  writer.writeheader()
  writer.writerows(rows)
  return buf.getvalue()


def summary_rows(aggregated, relative):
  """One row per (m, class, estimator): class-wise and shared errors (mean, std over draws) and relative error."""
  agg = {(r["m"], r["class"], r["estimator"], r["mode"]): r for r in aggregated}
  out = []
  for r in relative:
    cw, sh = (agg[r["m"], r["class"], r["estimator"], md] for md in cov_error.MODES)
    out.append({"m": r["m"], "class": r["class"], "estimator": r["estimator"],
                "classwise_error_mean": cw["error_mean"], "classwise_error_std": cw["error_std"],
                "shared_error_mean": sh["error_mean"], "shared_error_std": sh["error_std"],
                "relative_error_mean": r["relative_error_mean"], "relative_error_std": r["relative_error_std"],
                "n_canaries_mean": cw["n_canaries_mean"], "draws": r["draws"]})
  return out


def table(summary):
  """Short readable table: class-wise / shared error and relative error per class, m and estimator."""
  lines = [f"{'class':<5} {'m':>5} {'estimator':<12} {'class-wise':>11} {'shared':>11} {'relative':>9} {'canaries':>9}"]
  for r in summary:
    lines.append(f"{r['class']:<5} {r['m']:>5} {r['estimator']:<12} {r['classwise_error_mean']:>11.4g} "
                 f"{r['shared_error_mean']:>11.4g} {r['relative_error_mean']:>+9.3f} {r['n_canaries_mean']:>9.1f}")
  return "\n".join(lines)


def differences_table(differences):
  """Readable table of the paired differences: error(A) - error(B) with its 95% interval (below 0: A closer)."""
  lines = [f"{'class':<5} {'m':>5} {'A - B':<46} {'difference':>11} {'95% interval':>24}"]
  for r in differences:
    lines.append(f"{r['class']:<5} {r['m']:>5} {r['a'] + ' - ' + r['b']:<46} {r['difference']:>+11.4g} "
                 f"{'[' + format(r['ci_low'], '+.4g') + ', ' + format(r['ci_high'], '+.4g') + ']':>24}")
  return "\n".join(lines)


def output_paths(out_dir, settings, defaults):
  """{file name: path} of every output, named by the settings that change it (the heatmap: statistic and canary
  only; the others: every setting but canary)."""
  named = {k: v for k, v in settings.items() if k != "canary"}
  heatmap = {"statistic": settings["statistic"], "canary": settings["canary"]}
  paths = {f"{stem}.{ext}": provenance.report_path(out_dir, stem, ext, named, defaults) for stem, ext in STEMS}
  paths["covariance_heatmap.png"] = provenance.report_path(out_dir, "covariance_heatmap", "png", heatmap, defaults)
  return paths


def write(out_dir, run_dir, run, *, settings, defaults, recorded, rows, aggregated, relative, differences,
          cov_in_TxT, cov_out_TxT, analysed, row_width=None):
  """Write the CSVs, the JSON and the three figures atomically; returns (text to print, paths written).

  settings name the files where they differ from defaults (statistic, shadow_counts, draws, max_canaries, seed,
  n_boot, canary); recorded: the JSON's settings block; rows, aggregated, relative, differences: lira.cov_error's;
  cov_in_TxT, cov_out_TxT: the gold-standard covariances of settings["canary"]; analysed: how many canaries the
  errors cover; row_width: an image run's row width (the heatmap marks where each image row starts).
  """
  paths = output_paths(out_dir, settings, defaults)
  summary = summary_rows(aggregated, relative)
  header = provenance.header("covariance_error", run_dir, run, recorded, "seqlira.covariance_error")
  M, N, T = run.loss_MxNxT.shape
  shape = provenance.shape_line({"M": M, "N": N, "T": T})
  run_words = provenance.run_description(run_dir, run.config)
  statistic, canary = settings["statistic"], settings["canary"]
  subtitle = (f"{run_words}\n{shape}; statistic={statistic}, {analysed} canaries analysed, {settings['draws']} draws "
              f"per m (seed {settings['seed']})")
  n_in = int(run.keep_MxN[:, canary].sum())
  heatmap = cov_plots.plot_covariance_heatmap(cov_in_TxT, cov_out_TxT, canary,
                                              subtitle=f"{run_words}\n{shape}; statistic={statistic}",
                                              row_width=row_width, counts={"in": n_in, "out": M - n_in},
                                              unit="nats\u00b2" if statistic == "loss" else "logit\u00b2")
  run_folder.save_text(paths["covariance_error.csv"], to_csv(rows))
  run_folder.save_text(paths["covariance_error_summary.csv"], to_csv(summary))
  run_folder.save_text(paths["covariance_error_differences.csv"], to_csv(differences))
  run_folder.save_json(paths["covariance_error.json"], {**header, "rows": rows, "aggregated": aggregated,
                                                        "relative": relative, "differences": differences})
  run_folder.save_figure(paths["error_vs_shadow_models.png"], cov_plots.plot_errors(aggregated, subtitle))
  run_folder.save_figure(paths["relative_error.png"], cov_plots.plot_relative_errors(relative, subtitle))
  run_folder.save_figure(paths["covariance_heatmap.png"], heatmap)
  text = (f"{subtitle}\n\n{table(summary)}\n\n"
          "error(A) - error(B), mean over draws and canaries (below 0: A closer to the gold standard); 95% interval "
          f"of a bootstrap over canaries and draws\n{differences_table(differences)}")
  return text, list(paths.values())
