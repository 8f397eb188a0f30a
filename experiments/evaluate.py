"""Six-variant leave-one-out LiRA table of a run folder (Rossi et al. 2025, Table II).

python -m experiments.evaluate --run_dir=DIR [--reduction=min:2] [--statistic=logit|loss] [--attacks=loss,zlib,...]
Writes results.json, results.md and roc.png (all variants, log-log) into DIR (or --out_dir); settings other than
the defaults are appended to the names (results_reduction-min2.json), so reports with other settings are kept.
--attacks adds rows for reference-free attacks (loss, zlib, min_k, min_k_pp), each target model scored from its own
losses (and mu.npy, sigma.npy; Zlib decodes canaries.npy with tokenizer.json), and for RMIA (rmia, rmia_offline,
rmia_tokens, rmia_tokens_offline: leave-one-out like LiRA, against population_losses.npy), pooled like the LiRA rows.
--backend=jax [--precision=float32] runs the leave-one-out jitted on the local devices; several hosts share the
canaries with --num_processes/--process_id/--coordinator_address (jax.distributed; process 0 writes the report).
"""

import os

import numpy as np

from absl import app
from absl import flags

from attacks import rmia_rows
from attacks import shadow
from experiments import cli
from experiments import scoring_flags
from lira import metrics
from lira import rmia
from lira.reports import provenance
from lira.reports import loo_report
from lira.reports import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T], keep.npy [M, N], optional mask.npy.")
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six).")
scoring_flags.define()
flags.DEFINE_bool("save_scores", True, "Write each variant's [M, N] leave-one-out scores (scores_<variant>.npy).")
flags.DEFINE_integer("n_boot", metrics.N_BOOT, "Bootstrap replicates over canaries for the 95% intervals (0 = none).")
cli.check_range("n_boot", 0)
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
cli.check_range("seed", 0)
flags.DEFINE_list("attacks", None, f"Attacks to add as rows: reference-free {','.join(shadow.SHADOW_ATTACKS)}; "
                  f"RMIA {','.join(rmia.ATTACKS)} (default none).")
scoring_flags.define_rmia()
flags.DEFINE_float("k", shadow.DEFAULTS["k"], "Min-K% and Min-K%++: the fraction of each canary's lowest tokens averaged.")
cli.check_range("k", 0, 1, low_open=True)
flags.DEFINE_string("out_dir", None, "Where the reports go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.DEFINE_integer("num_processes", 1, "Processes sharing the canaries (multi-host; needs --backend=jax).")
cli.check_range("num_processes", 1)
flags.DEFINE_integer("process_id", 0, "This process's index in [0, num_processes).")
cli.check_range("process_id", 0)  # and below --num_processes, checked in main
flags.DEFINE_string("coordinator_address", None, "host:port of process 0; calls jax.distributed.initialize.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  if FLAGS.num_processes > 1 and (FLAGS.backend != "jax" or not FLAGS.coordinator_address):
    raise app.UsageError("--num_processes > 1 needs --backend=jax and --coordinator_address=host:port")
  if not 0 <= FLAGS.process_id < FLAGS.num_processes:
    raise app.UsageError(f"--process_id={FLAGS.process_id} is outside [0, --num_processes={FLAGS.num_processes})")
  if FLAGS.coordinator_address:
    from lira import loo_jax
    loo_jax.initialize_processes(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  scoring = scoring_flags.scoring()  # checked before the attack rows' and the run's files are read
  attack_rows = None
  reference_free, rmia_attacks = rmia_rows.split(FLAGS.attacks)
  # before LiRA: a missing mu.npy, tokenizer.json or population_losses.npy is reported before the long work
  if reference_free:
    attack_rows = shadow.shadow_rows(FLAGS.run_dir, reference_free, k=FLAGS.k, n_boot=FLAGS.n_boot, seed=FLAGS.seed)
  if rmia_attacks:
    more = rmia_rows.rmia_rows(FLAGS.run_dir, rmia_attacks, gamma=FLAGS.rmia_gamma, a=FLAGS.rmia_a,
                               reduction=scoring.reduction, balance_counts=scoring.balance_counts,
                               n_boot=FLAGS.n_boot, seed=FLAGS.seed)
    attack_rows = more if attack_rows is None else attack_rows + more
  keep_path = os.path.join(FLAGS.run_dir, "keep.npy")
  if scoring.backend == "jax" and os.path.exists(keep_path):  # a missing file is named by evaluate_run
    in_counts = len(np.unique(run_folder.load_npy(keep_path, mmap=True).sum(axis=0)))
    if note := scoring_flags.jax_compile_note(scoring, in_counts, "the run's canaries have"):
      print(note)
  table, result = loo_report.evaluate_run(
      FLAGS.run_dir, FLAGS.out_dir, scoring, variants=FLAGS.variants, n_boot=FLAGS.n_boot, seed=FLAGS.seed,
      progress=FLAGS.progress, save_scores=FLAGS.save_scores, attack_rows=attack_rows)
  if table is None:
    print(f"process {FLAGS.process_id}: scored its share of the canaries; process 0 writes the report.")
    return
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  print(table)
  print(f"\n{result['seconds']:.1f} s.")
  print(provenance.wrote([os.path.join(out_dir, name) for name in result["files"]]))


if __name__ == "__main__":
  cli.run(main)
