"""TPR at low FPR against the number of shadow models (Rossi et al. 2025, Figure 5).

python -m experiments.shadow_sweep --run_dir=DIR [--counts=4,8,16,32,64] [--draws=3] [--fpr=1e-4]
Writes shadow_sweep.json, shadow_sweep.csv and shadow_sweep.png into DIR (or --out_dir).
"""

import os

from absl import app
from absl import flags
import numpy as np

from experiments import cli
from lira import evaluation
from lira import plots
from lira import rundir
from lira import transforms

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T] and keep.npy [M, N].")
flags.DEFINE_list("counts", None, "Numbers of models m per subset; default 4, 8, 16, ... and M.")
flags.DEFINE_integer("draws", 3, "Random subsets per m (m = M has one).")
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six).")
flags.DEFINE_string("reduction", None, "Length reduction: group:K, min:K or max:K (default none).")
flags.DEFINE_enum("statistic", "logit", list(transforms.STATISTICS), "Per-token statistic.")
flags.DEFINE_float("fpr", 1e-4, "Target false positive rate.")
flags.DEFINE_integer("seed", 0, "Seed for the model subsets.")
flags.DEFINE_string("out_dir", None, "Where the outputs go; default the run folder.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  variants = evaluation.select_variants(FLAGS.variants)
  transforms.parse_reduction(FLAGS.reduction)
  run = rundir.load_run(FLAGS.run_dir)
  M = run.keep_MxN.shape[0]
  counts = [int(c) for c in FLAGS.counts] if FLAGS.counts else evaluation.default_shadow_counts(M)
  if min(counts) < 4 or max(counts) > M:
    raise app.UsageError(f"--counts must lie in [4, M={M}], got {counts}")
  rows = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, counts=counts, draws=FLAGS.draws,
                                       variants=variants, mask_NxT=run.mask_NxT, reduction=FLAGS.reduction,
                                       statistic=FLAGS.statistic, fpr=FLAGS.fpr, seed=FLAGS.seed)
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  label = f"TPR @ {100 * FLAGS.fpr:g}% FPR"
  rundir.save_json(os.path.join(out_dir, "shadow_sweep.json"), {"fpr": FLAGS.fpr, "rows": rows})
  rundir.save_csv(os.path.join(out_dir, "shadow_sweep.csv"), rows)
  rundir.save_figure(os.path.join(out_dir, "shadow_sweep.png"), plots.sweep_figure(rows, ylabel=label))
  print(f"{'variant':<24}" + "".join(f"{'m=' + str(m):>10}" for m in counts) + f"   ({label} in %, mean over draws)")
  for name, _, _ in variants:
    cells = []
    for m in counts:
      tprs = [r["tpr"] for r in rows if r["variant"] == name and r["m"] == m and np.isfinite(r["tpr"])]
      cells.append(f"{100 * np.mean(tprs):>10.2f}" if tprs else f"{'n/a':>10}")
    print(f"{name:<24}" + "".join(cells))
  print("n/a: too few models of a class for every canary at that m.")
  print(f"Wrote {out_dir}/shadow_sweep.json, shadow_sweep.csv and shadow_sweep.png")


if __name__ == "__main__":
  cli.run(main)
