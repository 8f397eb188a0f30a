"""Six-variant leave-one-out LiRA table of a run folder (Rossi et al. 2025, Table II).

python -m experiments.evaluate --run_dir=DIR [--reduction=min:2] [--statistic=logit|loss] [--attacks=loss,zlib,...]
Writes results.json, results.md and roc.png (all variants, log-log) into DIR (or --out_dir); settings other than
the defaults are appended to the names (results_reduction-min2.json), so reports with other settings are kept.
--attacks adds rows for the registered attacks that score a shadow run leave-one-out (attacks/catalogue.py lists them;
`--help` names them), pooled like the LiRA rows; their settings' flags come from the registry.
--backend=jax [--precision=float32] runs the leave-one-out jitted on the local GPUs or TPUs (on CPUs float64 scores
with the numpy backend, the faster there; docs/statistics.md, "Backends"); several hosts share the
canaries with --num_processes/--process_id/--coordinator_address (jax.distributed; process 0 writes the report), or
with --cluster=auto under srun or mpirun (jax.distributed.initialize() finds them: experiments/process_flags.py).
Reports in the report and run folders made from a population the run no longer has (their RMIA rows stale) are named
in a note (lira.reports.population_files).
"""

import os
import time

import numpy as np

from absl import app
from absl import flags

from attacks import shadow
from experiments import attack_flags
from experiments import cli
from experiments import process_flags
from experiments import scoring_flags
from lira import metrics
from lira.reports import provenance
from lira.reports import loo_report
from lira.reports import population_files
import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T], keep.npy [M, N], optional mask.npy.")
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six).")
scoring_flags.define()
flags.DEFINE_bool("save_scores", True, "Write each variant's [M, N] leave-one-out scores (scores_<variant>.npy).")
flags.DEFINE_integer("n_boot", metrics.N_BOOT, "Bootstrap replicates over canaries for the 95% intervals (0 = none).")
cli.check_range("n_boot", 0)
flags.DEFINE_integer("seed", 0, "Bootstrap seed.")
cli.check_range("seed", 0)
attack_flags.define("leave_one_out")
flags.DEFINE_string("out_dir", None, "Where the reports go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars.")
process_flags.define("the canaries", array=False, needs="--backend=jax")


def main(argv):
  del argv
  start = time.perf_counter()  # the whole command's work: the attacks' rows too
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  processes = process_flags.chosen()
  if processes.cluster == "auto" and FLAGS.backend != "jax":
    raise app.UsageError("--cluster=auto shares the canaries among jax.distributed processes: it needs --backend=jax")
  if processes.cluster == "none" and FLAGS.num_processes > 1 and (FLAGS.backend != "jax" or
                                                                  not FLAGS.coordinator_address):
    raise app.UsageError("--num_processes > 1 needs --backend=jax and --coordinator_address=host:port")
  if processes.coordinated:
    from lira import loo_jax
    processes = process_flags.join(processes, loo_jax.initialize_processes)
  scoring = scoring_flags.scoring()  # checked before the attack rows' and the run's files are read
  attack_rows = None
  attacks, settings, given = attack_flags.chosen()
  # before LiRA: a missing mu.npy, tokenizer.json or population_losses.npy is reported before the long work
  if attacks or given:
    attack_rows = shadow.shadow_rows(FLAGS.run_dir, attacks, settings, scoring, n_boot=FLAGS.n_boot, seed=FLAGS.seed,
                                     given=given)
  keep_path = os.path.join(FLAGS.run_dir, run_folder.names.KEEP)
  if scoring.backend == "jax" and os.path.exists(keep_path):  # a missing file is named by evaluate_run
    in_counts = len(np.unique(run_folder.load_npy(keep_path, mmap=True).sum(axis=0)))
    if note := scoring_flags.jax_compile_note(scoring, in_counts, "the run's canaries have"):
      print(note)
  table, result = loo_report.evaluate_run(
      FLAGS.run_dir, FLAGS.out_dir, scoring, variants=FLAGS.variants, n_boot=FLAGS.n_boot, seed=FLAGS.seed,
      progress=FLAGS.progress, save_scores=FLAGS.save_scores, attack_rows=attack_rows)
  if table is None:
    print(f"process {processes.process_id}: scored its share of the canaries; process 0 writes the report.")
    return
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  print(table)
  print("\n" + provenance.wrote([os.path.join(out_dir, name) for name in result["files"]], time.perf_counter() - start))
  if note := population_files.stale_note([out_dir, FLAGS.run_dir], FLAGS.run_dir):
    print(note)


if __name__ == "__main__":
  cli.run(main)
