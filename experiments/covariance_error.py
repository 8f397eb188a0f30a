"""Covariance-error analysis of a run folder (Rossi et al. 2025, Figs. 2, 3, 6, 8).

python -m experiments.covariance_error --run_dir=DIR [--shadow_counts=4,8,16,32,64] [--draws=5]
Writes into RUN_DIR/covariance_error (or --out_dir) covariance_error.{csv,json}, covariance_error_summary.csv,
covariance_error_differences.csv (each ordering Figs. 2 and 3 are read for, error(A) - error(B) with a 95% interval),
error_vs_shadow_models.png, relative_error.png and covariance_heatmap.png; settings other than the defaults are
appended to the names (covariance_error_draws-3.json), so analyses with other settings are kept. Shadow counts
above the run's M are dropped with a note. On an image run (config.json with an image shape) the heatmap marks where
each image row starts, and the per-pixel maps are left to experiments.image_maps (seconds, one canary).
"""

import csv
import io
import os

from absl import app
from absl import flags
import tqdm

from experiments import cli
from lira import cov_error
from lira.reports import cov_plots
from lira import canary_maps
from lira.reports import provenance
from lira.reports import run_folder
from lira import transforms

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T] and keep.npy [M, N].")
flags.DEFINE_enum("statistic", "logit", list(transforms.STATISTICS), "Per-token statistic the Gaussians model.")
flags.DEFINE_list("shadow_counts", None, "Numbers of shadow models m; default powers of two from 4 up to M, and M.")
cli.check_range("shadow_counts", 2)  # a covariance needs two models
flags.DEFINE_integer("draws", 5, "Random model subsets per shadow count.")
cli.check_range("draws", 1)
flags.DEFINE_integer("max_canaries", 1000, "Canaries analysed at most (random subset; the paper used 1,000).")
cli.check_range("max_canaries", 1)
flags.DEFINE_integer("canary", 0, "Canary whose gold-standard covariance is drawn as a heatmap.")
cli.check_range("canary", 0)  # and below the run's N, checked once the run is read
flags.DEFINE_integer("seed", 0, "Seed for the canary subset, the model subsets and the bootstrap.")
cli.check_range("seed", 0)
flags.DEFINE_integer("n_boot", 1000, "Bootstrap replicates (over canaries and draws) for the differences' 95% intervals.")
cli.check_range("n_boot", 1)
flags.DEFINE_string("out_dir", None, "Output folder; default RUN_DIR/covariance_error.")
flags.DEFINE_bool("progress", True, "Show progress bars.")



def validated_settings(run):
  """Check the flags against the run before any long work; return (shadow_counts, out_dir, note on dropped counts)."""
  M, N, T = run.loss_MxNxT.shape
  # the flags' own ranges (--draws >= 1, --shadow_counts integers >= 2, ...) were checked when they were parsed
  counts = [int(m) for m in FLAGS.shadow_counts] if FLAGS.shadow_counts else cov_error.default_shadow_counts(M)
  counts, note = provenance.clip_counts(sorted(set(counts)), M, "--shadow_counts")
  if not 0 <= FLAGS.canary < N:
    raise app.UsageError(f"--canary={FLAGS.canary} is outside [0, N={N})")
  return counts, FLAGS.out_dir or os.path.join(FLAGS.run_dir, "covariance_error"), note


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


def output_paths(out_dir, settings):
  """Every output's path, named by the settings that change it (the heatmap: statistic and canary only)."""
  named = {k: v for k, v in settings.items() if k != "canary"}
  heatmap = {"statistic": settings["statistic"], "canary": settings["canary"]}
  paths = {f"{stem}.{ext}": provenance.report_path(out_dir, stem, ext, named, cli.flag_defaults(named)) for stem, ext in (
      ("covariance_error", "csv"), ("covariance_error_summary", "csv"), ("covariance_error_differences", "csv"),
      ("covariance_error", "json"),
      ("error_vs_shadow_models", "png"), ("relative_error", "png"))}
  paths["covariance_heatmap.png"] = provenance.report_path(out_dir, "covariance_heatmap", "png", heatmap,
                                                             cli.flag_defaults(heatmap))
  return paths


def write_outputs(paths, header, rows, aggregated, relative, summary, differences, heatmap_fig, subtitle):
  """Write the CSVs, the JSON and the three figures atomically; return their paths."""
  run_folder.save_text(paths["covariance_error.csv"], to_csv(rows))
  run_folder.save_text(paths["covariance_error_summary.csv"], to_csv(summary))
  run_folder.save_text(paths["covariance_error_differences.csv"], to_csv(differences))
  run_folder.save_json(paths["covariance_error.json"], {**header, "rows": rows, "aggregated": aggregated,
                                                        "relative": relative, "differences": differences})
  run_folder.save_figure(paths["error_vs_shadow_models.png"], cov_plots.plot_errors(aggregated, subtitle))
  run_folder.save_figure(paths["relative_error.png"], cov_plots.plot_relative_errors(relative, subtitle))
  run_folder.save_figure(paths["covariance_heatmap.png"], heatmap_fig)
  return list(paths.values())


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  run = run_folder.load_run(FLAGS.run_dir, mmap=True)
  counts, out_dir, note = validated_settings(run)
  n_in = int(run.keep_MxN[:, FLAGS.canary].sum())
  image_shape = canary_maps.image_shape_or_none(run.config)  # a malformed image shape is refused before the work
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  if note:
    print(note)
  M, N, T = run.loss_MxNxT.shape
  settings = {"statistic": FLAGS.statistic,
              "shadow_counts": None if counts == cov_error.default_shadow_counts(M) else counts,
              "draws": FLAGS.draws, "max_canaries": FLAGS.max_canaries, "seed": FLAGS.seed, "n_boot": FLAGS.n_boot,
              "canary": FLAGS.canary}
  recorded = {**settings, "shadow_counts": counts, "num_models": M, "dropped_counts_note": note}
  header = provenance.header("covariance_error", FLAGS.run_dir, run, recorded, "seqlira.covariance_error")
  errors = cov_error.canary_errors(
      run.loss_MxNxT, run.keep_MxN, shadow_counts=counts, draws=FLAGS.draws, statistic=FLAGS.statistic,
      mask_NxT=run.mask_NxT, max_canaries=FLAGS.max_canaries, seed=FLAGS.seed,
      progress=lambda jobs: tqdm.tqdm(jobs, desc="canary blocks", unit="block", disable=not FLAGS.progress))
  rows = cov_error.error_rows(errors)
  aggregated, relative = cov_error.aggregate(rows), cov_error.relative_errors(rows)
  differences = cov_error.paired_differences(errors, n_boot=FLAGS.n_boot, seed=FLAGS.seed)
  summary = summary_rows(aggregated, relative)
  gold_in, gold_out = cov_error.gold_covariance(
      run.loss_MxNxT, run.keep_MxN, FLAGS.canary, statistic=FLAGS.statistic, mask_NxT=run.mask_NxT)
  analysed = len(cov_error.select_canaries(run.keep_MxN, run.mask_NxT, FLAGS.max_canaries, FLAGS.seed))
  shape = provenance.shape_line({"M": M, "N": N, "T": T})
  run_words = provenance.run_description(FLAGS.run_dir, run.config)
  subtitle = (f"{run_words}\n{shape}; statistic={FLAGS.statistic}, {analysed} canaries analysed, {FLAGS.draws} draws "
              f"per m (seed {FLAGS.seed})")
  heatmap = cov_plots.plot_covariance_heatmap(gold_in, gold_out, FLAGS.canary,
                                              subtitle=f"{run_words}\n{shape}; statistic={FLAGS.statistic}",
                                              row_width=image_shape[1] if image_shape else None,
                                              counts={"in": n_in, "out": M - n_in},
                                              unit="nats\u00b2" if FLAGS.statistic == "loss" else "logit\u00b2")
  paths = write_outputs(output_paths(out_dir, settings), header, rows, aggregated, relative, summary, differences,
                        heatmap, subtitle)
  print(f"{subtitle}\n")
  print(table(summary))
  print("\nerror(A) - error(B), mean over draws and canaries (below 0: A closer to the gold standard); 95% interval "
        "of a bootstrap over canaries and draws")
  print(differences_table(differences))
  print(provenance.wrote(paths))
  if image_shape:
    print(f"image run: python -m experiments.image_maps --run_dir={FLAGS.run_dir} draws the per-pixel maps")


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main)
