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

import dataclasses

from absl import app
from absl import flags

from experiments import cli
from experiments import option_flags
from lira.reports import cov_structure_report
from lira.reports import provenance
from lira.reports.cov_structure_report import CovStructureOptions

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder: losses.npy [M, N, T], keep.npy [M, N], optional mask.npy.")
option_flags.define(CovStructureOptions, ("cov_class", "statistic", "max_canaries", "max_positions", "permutations", "seed"))
flags.DEFINE_string("out_dir", None, "Output folder; default RUN_DIR/cov_structure.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  options = CovStructureOptions(**option_flags.values(CovStructureOptions, CovStructureOptions.defaults()))
  paths, line = cov_structure_report.write_cov_structure(FLAGS.run_dir, FLAGS.out_dir, **dataclasses.asdict(options),
                                                         progress=FLAGS.progress)
  print(line)
  print(provenance.wrote(paths))


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main)
