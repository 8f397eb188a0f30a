"""TPR at low FPR against the reduced length for group/min/max reductions (Rossi et al. 2025, Figs. 11-14).

python -m experiments.length_grid --run_dir=DIR [--lengths=1,2,4,8] [--noshared] [--fpr=1e-4] [--n_boot=200]
Default --lengths: the powers of two below the shortest canary's scored length L, then L itself (L = 12: 1, 2, 4, 8,
12), beside the unreduced baseline.
Writes length_grid.json, length_grid.csv and length_grid.png (lira/reports/length_grid_report.py) into DIR (or
--out_dir); settings other than the defaults are appended to the names (length_grid_statistic-loss.json), so grids
with other settings are kept.
"""

from absl import app
from absl import flags

from experiments import cli
from experiments import scoring_flags
from lira import evaluation
from lira import metrics
from lira.reports import length_grid_report
from lira.reports import provenance
import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T] and keep.npy [M, N].")
flags.DEFINE_list("lengths", None, "Reduced lengths K; default the powers of two below the shortest canary's "
                  "scored length L, then L (L = 12: 1, 2, 4, 8, 12).")
cli.check_range("lengths", 1)
flags.DEFINE_list("strategies", ["group", "min", "max"], "Reduction strategies.")
flags.DEFINE_list("covariances", ["independent", "oas"], "Covariance estimators (paper: independent and OAS).")
scoring_flags.define(("shared", "statistic", "balance_counts", "backend", "precision"))
flags.DEFINE_float("fpr", 1e-4, "Target false positive rate.")
cli.check_range("fpr", 0, 1, low_open=True, high_open=True)
flags.DEFINE_integer("n_boot", metrics.N_BOOT, "Bootstrap replicates over canaries for the 95% intervals (0 = none).")
cli.check_range("n_boot", 0)
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
cli.check_range("seed", 0)
flags.DEFINE_string("out_dir", None, "Where the outputs go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  bad = [s for s in FLAGS.strategies if s not in ("group", "min", "max")]
  bad += [c for c in FLAGS.covariances if c not in ("univariate", "independent", "oas")]
  if bad:
    raise app.UsageError(f"unknown strategies/covariances: {bad}")
  scoring = scoring_flags.scoring()
  run = run_folder.load_run(FLAGS.run_dir, mmap=True)
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  T = run.loss_MxNxT.shape[2]
  shortest = T if run.mask_NxT is None else int(run.mask_NxT.sum(axis=1).min())
  lengths = sorted(int(k) for k in FLAGS.lengths) if FLAGS.lengths else evaluation.default_lengths(shortest)
  settings = {"lengths": None if lengths == evaluation.default_lengths(shortest) else lengths,
              "strategies": list(FLAGS.strategies), "covariances": list(FLAGS.covariances), "shared": FLAGS.shared,
              "statistic": FLAGS.statistic, "fpr": FLAGS.fpr, "n_boot": FLAGS.n_boot, "seed": FLAGS.seed,
              "balance_counts": FLAGS.balance_counts}
  rows = evaluation.length_grid(run.loss_MxNxT, run.keep_MxN, scoring, lengths=lengths, strategies=FLAGS.strategies,
                                covariances=FLAGS.covariances, mask_NxT=run.mask_NxT, fpr=FLAGS.fpr,
                                n_boot=FLAGS.n_boot, seed=FLAGS.seed, progress=FLAGS.progress)
  recorded = {**settings, "lengths": lengths, "level": metrics.LEVEL}
  text, paths = length_grid_report.write(out_dir, FLAGS.run_dir, run, rows, settings, cli.flag_defaults(settings),
                                         recorded)
  print(text)
  print(provenance.wrote(paths))


if __name__ == "__main__":
  cli.run(main)
