"""Pretraining-data membership attacks on a features folder: AUC and TPR at 1% and 5% FPR with bootstrap intervals.

python -m experiments.pretrain_attacks --features=DIR [--attacks=loss,zlib,min_k,...,blind] [--k=0.2] [--gamma=0.5]
    [--shots=3] [--folds=5] [--out_dir=DIR] [--n_boot=200] [--seed=0]
Prints the table and writes results.json, results.md and roc.png (log-log, one line per attack) into the features
folder (or --out_dir); settings other than the defaults are appended to the names (results_k-0.1.json). Without
--attacks, every attack whose arrays the folder holds runs, and the table says which were skipped and why; `blind`,
the blind baseline (a text classifier that never looks at the model), needs only texts.json and runs with them.
"""

import os
import time

from absl import app
from absl import flags

from attacks import report
from experiments import attack_flags
from experiments import cli
from lira.reports import provenance

FLAGS = flags.FLAGS
flags.DEFINE_string("features", None, "Features folder (features.json, lp.npy, labels.npy, ...; docs/outputs.md).")
attack_flags.define("texts", "Attacks to run", "default: every attack whose arrays the folder holds")
flags.DEFINE_string("out_dir", None, "Where the reports go; default the features folder.")
flags.DEFINE_integer("n_boot", report.DEFAULTS["n_boot"], "Bootstrap replicates over texts for the 95% intervals "
                     "(0 = none).")
cli.check_range("n_boot", 0)
flags.DEFINE_integer("seed", report.DEFAULTS["seed"], "Seed of the bootstrap and of the blind baseline's folds.")
cli.check_range("seed", 0)
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  start = time.perf_counter()  # the whole command's work: the attacks' rows too
  if not FLAGS.features:
    raise app.UsageError("--features is required")
  attacks, settings, _ = attack_flags.chosen()
  table, result = report.run_attacks(FLAGS.features, attacks or None, n_boot=FLAGS.n_boot, seed=FLAGS.seed,
                                     out_dir=FLAGS.out_dir, progress=FLAGS.progress, **settings)
  print(table)
  out_dir = FLAGS.out_dir or FLAGS.features
  print("\n" + provenance.wrote([os.path.join(out_dir, name) for name in result["files"]], time.perf_counter() - start))


if __name__ == "__main__":
  cli.run(main)
