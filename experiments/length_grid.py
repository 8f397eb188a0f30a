"""TPR at low FPR against the reduced length for group/min/max reductions (Rossi et al. 2025, Figs. 11-14).

python -m experiments.length_grid --run_dir=DIR [--lengths=1,2,4,8] [--shared] [--fpr=1e-4]
Writes length_grid.json, length_grid.csv and length_grid.png into DIR (or --out_dir).
"""

import os

from absl import app
from absl import flags

from experiments import cli
from lira import evaluation
from lira import plots
from lira import rundir
from lira import transforms

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T] and keep.npy [M, N].")
flags.DEFINE_list("lengths", None, "Reduced lengths K; default 1, 2, 4, ... up to the shortest canary.")
flags.DEFINE_list("strategies", ["group", "min", "max"], "Reduction strategies.")
flags.DEFINE_list("covariances", ["independent", "oas"], "Covariance estimators (paper: independent and OAS).")
flags.DEFINE_bool("shared", True, "Shared IN/OUT covariance (else class-wise).")
flags.DEFINE_enum("statistic", "logit", list(transforms.STATISTICS), "Per-token statistic.")
flags.DEFINE_float("fpr", 1e-4, "Target false positive rate.")
flags.DEFINE_string("out_dir", None, "Where the outputs go; default the run folder.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  bad = [s for s in FLAGS.strategies if s not in ("group", "min", "max")]
  bad += [c for c in FLAGS.covariances if c not in ("univariate", "independent", "oas")]
  if bad:
    raise app.UsageError(f"unknown strategies/covariances: {bad}")
  run = rundir.load_run(FLAGS.run_dir)
  lengths = [int(k) for k in FLAGS.lengths] if FLAGS.lengths else None
  rows = evaluation.length_grid(run.loss_MxNxT, run.keep_MxN, lengths=lengths, strategies=FLAGS.strategies,
                                covariances=FLAGS.covariances, shared=FLAGS.shared, mask_NxT=run.mask_NxT,
                                statistic=FLAGS.statistic, fpr=FLAGS.fpr)
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  label = f"TPR @ {100 * FLAGS.fpr:g}% FPR"
  mode = "shared" if FLAGS.shared else "class-wise"
  rundir.save_json(os.path.join(out_dir, "length_grid.json"), {"fpr": FLAGS.fpr, "rows": rows})
  rundir.save_csv(os.path.join(out_dir, "length_grid.csv"), rows)
  rundir.save_figure(os.path.join(out_dir, "length_grid.png"),
                     plots.length_grid_figure(rows, fpr_label=label, title=f"Length reduction ({mode})"))
  print(f"{'strategy':<8} {'K':>5} {'covariance':<12} {label + ' (%)':>20} {'AUC':>8}")
  for r in rows:
    print(f"{r['strategy']:<8} {r['K']:>5} {r['covariance']:<12} {100 * r['tpr']:>20.2f} {r['auc']:>8.4f}")
  print(f"Wrote {out_dir}/length_grid.json, length_grid.csv and length_grid.png")


if __name__ == "__main__":
  cli.run(main)
