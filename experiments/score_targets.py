"""LiRA against target models trained elsewhere: Gaussians from all shadow models of a run folder.

python -m experiments.score_targets --run_dir=SHADOWS --target=LOSSES.npy [--target_keep=KEEP.npy] --out_dir=DIR
LOSSES.npy holds the same canaries' per-token losses on the target model(s): [N, T] for one target or [K, N, T]
for K (the run's mask.npy applies to them too). Writes attack_scores_<variant>.npy ([K, N], higher = member) and
attack.json; with the targets' membership KEEP.npy ([K, N] or [N] bool) also the table with bootstrap intervals
(attack.md) and the log-log ROC (attack_roc.png), as `evaluate` does for leave-one-out.
--attacks adds rows of the registered attacks that score separate targets (attacks/catalogue.py; every shadow a
reference model); those that read a population (RMIA) need the run's population_losses.npy and --target_population,
the same population's per-token losses on the targets ([K, Z, T]).
"""

import time

from absl import flags

from attacks import shadow
from experiments import attack_flags
from experiments import cli
from experiments import scoring_flags
from lira import metrics
from lira.reports import provenance
from lira.reports import target_report

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Shadow run folder: losses.npy [M, N, T], keep.npy [M, N], optional mask.npy.")
flags.DEFINE_string("target", None, "Target models' per-token losses of the run's canaries: [N, T] or [K, N, T] .npy.")
flags.DEFINE_string("target_keep", None, "Optional: the targets' true membership, bool [K, N] (or [N]) .npy.")
flags.DEFINE_string("out_dir", None, "Where the scores and reports go.")
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six).")
scoring_flags.define(("reduction", "statistic", "offline", "offline_shift", "fix_variance"))
attack_flags.define("targets", "Attacks to add as rows beside the variants")
flags.DEFINE_string("target_population", None, "RMIA: the run's population per-token losses on the targets: [Z, T] "
                    "or [K, Z, T] .npy.")
flags.DEFINE_integer("n_boot", metrics.N_BOOT, "Bootstrap replicates over canaries for the 95% intervals (with --target_keep; 0 = none).")
cli.check_range("n_boot", 0)
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
cli.check_range("seed", 0)
flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.mark_flags_as_required(["run_dir", "target", "out_dir"])


def main(argv):
  del argv
  start = time.perf_counter()  # the whole command's work: the attacks' rows too
  scoring = scoring_flags.scoring()
  attacks, settings, given = attack_flags.chosen()
  chosen = shadow.choose(FLAGS.run_dir, attacks, settings, scoring, given, where="targets") \
      if attacks or given else None
  text, result = target_report.attack_run(
      FLAGS.run_dir, FLAGS.target, FLAGS.out_dir, FLAGS.target_keep, scoring, variants=FLAGS.variants,
      n_boot=FLAGS.n_boot, seed=FLAGS.seed, progress=FLAGS.progress, attacks=chosen,
      target_population_path=FLAGS.target_population)
  print(text)
  print("\n" + provenance.wrote([f"{FLAGS.out_dir}/{name}" for name in result["files"]], time.perf_counter() - start))


if __name__ == "__main__":
  cli.run(main)
