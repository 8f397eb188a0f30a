"""Is each canary's per-position covariance more than its diagonal? A permutation test per canary (Rossi et al.
2025, Figs. 4 and 8: the non-diagonal covariance that the sequence-aware variants model).

python -m experiments.cov_structure --run_dir=DIR [--cov_class=out|in] [--statistic=logit|loss]
    [--max_canaries=N] [--max_positions=64] [--permutations=199] [--seed=0] [--out_dir=DIR/cov_structure]
For each canary: the mean absolute off-diagonal correlation of LiRA's per-position statistic over the models of
one class, against permutations that shuffle every position across the models independently (lira/cov_permutation.py).
Writes cov_structure.{json,csv,png} (lira/reports/cov_structure_report.py): under independence about 1% of canaries have
p <= 0.01; many more say the covariance has off-diagonal structure. Settings other than the defaults are appended to
the names (cov_structure_covclass-in.json).
"""

from absl import app
from absl import flags

from experiments import cli
from lira.reports import cov_structure_report
from lira.reports import provenance
from lira import transforms

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder: losses.npy [M, N, T], keep.npy [M, N], optional mask.npy.")
flags.DEFINE_enum("cov_class", cov_structure_report.DEFAULTS["cov_class"], list(cov_structure_report.COV_CLASSES), "Models of each canary tested: "
                  "OUT (default; the IN models of a memorised canary predict it almost exactly) or IN.")
flags.DEFINE_enum("statistic", cov_structure_report.DEFAULTS["statistic"], list(transforms.STATISTICS), "Per-position statistic (LiRA's: logit).")
flags.DEFINE_integer("max_canaries", cov_structure_report.DEFAULTS["max_canaries"], "Test the first N canaries only; default all.")
cli.check_range("max_canaries", 1)
flags.DEFINE_integer("max_positions", cov_structure_report.DEFAULTS["max_positions"], "Test the first T positions (the paper's Fig. 8: 64).")
cli.check_range("max_positions", 2)  # a correlation between positions needs two
flags.DEFINE_integer("permutations", cov_structure_report.DEFAULTS["permutations"], "Permutations per canary; the smallest p-value is 1 / (permutations + 1).")
cli.check_range("permutations", 1)
flags.DEFINE_integer("seed", cov_structure_report.DEFAULTS["seed"], "Seed of the permutations.")
cli.check_range("seed", 0)  # numpy's generators take non-negative seeds
flags.DEFINE_string("out_dir", None, "Output folder; default RUN_DIR/cov_structure.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  paths, line = cov_structure_report.write_cov_structure(
      FLAGS.run_dir, FLAGS.out_dir, cov_class=FLAGS.cov_class, statistic=FLAGS.statistic,
      max_canaries=FLAGS.max_canaries, max_positions=FLAGS.max_positions, permutations=FLAGS.permutations,
      seed=FLAGS.seed, progress=FLAGS.progress)
  print(line)
  print(provenance.wrote(paths))


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main)
