"""Covariance-error analysis of a run folder (Rossi et al. 2025, Figs. 2, 3, 6, 8).

python -m experiments.covariance_error --run_dir=DIR [--shadow_counts=4,8,16,32,64] [--draws=5]
Writes into RUN_DIR/covariance_error (or --out_dir) covariance_error.{csv,json}, covariance_error_summary.csv,
covariance_error_differences.csv (each ordering Figs. 2 and 3 are read for, error(A) - error(B) with a 95% interval),
error_vs_shadow_models.png, relative_error.png and covariance_heatmap.png (lira/reports/cov_error_report.py);
settings other than the defaults are appended to the names (covariance_error_draws-3.json), so analyses with other
settings are kept. Shadow counts above the run's M are dropped with a note. On an image run (config.json with an
image shape) the heatmap marks where each image row starts, and the per-pixel maps are left to experiments.image_maps
(seconds, one canary).
"""

import os

from absl import app
from absl import flags
import tqdm

from experiments import cli
from lira import canary_maps
from lira import cov_error
from lira import transforms
from lira.reports import cov_error_report
from lira.reports import provenance
import run_folder

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


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  run = run_folder.load_run(FLAGS.run_dir, mmap=True)
  counts, out_dir, note = validated_settings(run)
  image_shape = canary_maps.image_shape_or_none(run.config)  # a malformed image shape is refused before the work
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  if note:
    print(note)
  M = run.loss_MxNxT.shape[0]
  settings = {"statistic": FLAGS.statistic,
              "shadow_counts": None if counts == cov_error.default_shadow_counts(M) else counts,
              "draws": FLAGS.draws, "max_canaries": FLAGS.max_canaries, "seed": FLAGS.seed, "n_boot": FLAGS.n_boot,
              "canary": FLAGS.canary}
  recorded = {**settings, "shadow_counts": counts, "num_models": M, "dropped_counts_note": note}
  errors = cov_error.canary_errors(
      run.loss_MxNxT, run.keep_MxN, shadow_counts=counts, draws=FLAGS.draws, statistic=FLAGS.statistic,
      mask_NxT=run.mask_NxT, max_canaries=FLAGS.max_canaries, seed=FLAGS.seed,
      progress=lambda jobs: tqdm.tqdm(jobs, desc="canary blocks", unit="block", disable=not FLAGS.progress))
  rows = cov_error.error_rows(errors)
  gold_in_TxT, gold_out_TxT = cov_error.gold_covariance(
      run.loss_MxNxT, run.keep_MxN, FLAGS.canary, statistic=FLAGS.statistic, mask_NxT=run.mask_NxT)
  text, paths = cov_error_report.write(
      out_dir, FLAGS.run_dir, run, settings=settings, defaults=cli.flag_defaults(settings), recorded=recorded,
      rows=rows, aggregated=cov_error.aggregate(rows), relative=cov_error.relative_errors(rows),
      differences=cov_error.paired_differences(errors, n_boot=FLAGS.n_boot, seed=FLAGS.seed),
      cov_in_TxT=gold_in_TxT, cov_out_TxT=gold_out_TxT,
      analysed=len(cov_error.select_canaries(run.keep_MxN, run.mask_NxT, FLAGS.max_canaries, FLAGS.seed)),
      row_width=image_shape[1] if image_shape else None)
  print(text)
  print(provenance.wrote(paths))
  if image_shape:
    print(f"image run: python -m experiments.image_maps --run_dir={FLAGS.run_dir} draws the per-pixel maps")


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main)
