"""TPR at low FPR against the number of shadow models (Rossi et al. 2025, Figure 5).

python -m experiments.shadow_sweep --run_dir=DIR [--counts=8,16,32] [--draws=3] [--fpr=1e-3] [--reduction=group:4]
--fpr (default 1e-4, the paper's 0.01%) is resolved only with 10,000 OUT scores per subset: on a small run every such
cell is n/r, so pass --fpr=1e-3 or 1e-2. Default counts: 4, 8, 16, ... and M, without 4 where a subset of 4 models
cannot fit every variant (balanced counts, class-wise or offline fits need 6).
Writes shadow_sweep.json, shadow_sweep.csv and shadow_sweep.png (lira/reports/sweep_report.py) into DIR (or
--out_dir); settings other than the defaults are appended to the names (shadow_sweep_reduction-group4.json), so
sweeps with other settings are kept.
--pairs=oas-shared:univariate-shared,... adds each subset's paired difference of two rows at --pair_fprs (0.1% and
0.01%) with its paired canary-bootstrap interval (--n_boot replicates), printed as a second table.
Counts above the run's M are dropped with a note. --attacks adds rows of the registered attacks that score
leave-one-out (attacks/catalogue.py), scored on the same subsets (each target's reference models: the other m - 1).
Each subset's rows are kept as it finishes (shadow_sweep_cells/ in the output folder), so a sweep stopped part-way
resumes at the first subset it had not finished when the same command runs again (counts added above the largest
reuse every subset already scored).
"""

import os

from absl import app
from absl import flags

from attacks import shadow
from experiments import attack_flags
from experiments import cli
from experiments import scoring_flags
from lira import evaluation
from lira import scoring as scoring_lib
from lira.reports import provenance
from lira.reports import sweep_report
import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T] and keep.npy [M, N].")
flags.DEFINE_list("counts", None, "Numbers of models m per subset (larger than M: dropped); default 4, 8, 16, ... and "
                  "M, from 8 where a subset of 4 cannot fit every variant (balanced counts, class-wise, offline).")
cli.check_range("counts", 4)  # leave-one-out in a subset needs 4 models
flags.DEFINE_integer("draws", 3, "Random subsets per m (m = M has one).")
cli.check_range("draws", 1)
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six).")
scoring_flags.define(("reduction", "statistic", "balance_counts", "backend", "precision"))
attack_flags.define("leave_one_out", "Attacks to add as rows beside the variants")
flags.DEFINE_float("fpr", 1e-4, "Target false positive rate.")
flags.DEFINE_list("pairs", [], "Paired differences per subset, as a:b (e.g. oas-shared:univariate-shared): TPR(a) - "
                  "TPR(b) at each --pair_fprs with its paired canary-bootstrap interval.")
flags.DEFINE_list("pair_fprs", ["0.001", "0.0001"], "FPRs of the paired differences.")
flags.DEFINE_integer("n_boot", 200, "Canary-bootstrap replicates of each paired difference.")
cli.check_range("n_boot", 1)
cli.check_range("fpr", 0, 1, low_open=True, high_open=True)
flags.DEFINE_integer("seed", 0, "Seed for the model subsets.")
cli.check_range("seed", 0)
flags.DEFINE_string("out_dir", None, "Where the outputs go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  variants = scoring_lib.select_variants(FLAGS.variants)
  pairs = [tuple(p.split(":")) for p in FLAGS.pairs]
  if any(len(p) != 2 for p in pairs):
    raise app.UsageError(f"--pairs takes a:b items, got {FLAGS.pairs}")
  names_by_key = {scoring_lib.variant_key(v): v[0] for v in scoring_lib.VARIANTS}
  pairs = [tuple(names_by_key.get(x, x) for x in p) for p in pairs]  # variant keys as the rows' names
  try:
    pair_fprs = [float(f) for f in FLAGS.pair_fprs]
  except ValueError:
    raise app.UsageError(f"--pair_fprs takes numbers, got {FLAGS.pair_fprs}") from None
  if any(not 0 < f < 1 for f in pair_fprs):
    raise app.UsageError(f"--pair_fprs must lie in (0, 1), got {FLAGS.pair_fprs}")
  scoring = scoring_flags.scoring()
  attacks, attack_settings, given = attack_flags.chosen()
  chosen = shadow.choose(FLAGS.run_dir, attacks, attack_settings, scoring, given) if attacks or given else None
  run = run_folder.load_run(FLAGS.run_dir, mmap=True)
  M, N, T = run.loss_MxNxT.shape
  counts = [int(c) for c in FLAGS.counts] if FLAGS.counts else evaluation.sweep_counts(M, scoring, variants)
  counts, note = provenance.clip_counts(sorted(set(counts)), M, "--counts")  # each >= 4: checked with the flags
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  if note:
    print(note)
  if any(m < M for m in counts) and (compile_note := scoring_flags.jax_compile_note(scoring, None,
                                                                                   "model subsets have")):
    print(compile_note)
  keys = [scoring_lib.variant_key(v) for v in variants]
  default = evaluation.sweep_counts(M, scoring, variants)
  settings = {"counts": None if counts == default else counts, "draws": FLAGS.draws,
              "variants": None if sorted(keys) == sorted(map(scoring_lib.variant_key, scoring_lib.VARIANTS)) else keys,
              "reduction": scoring.reduction,
              "statistic": FLAGS.statistic, "fpr": FLAGS.fpr, "seed": FLAGS.seed,
              "balance_counts": FLAGS.balance_counts, "attacks": attacks or None,
              "pairs": FLAGS.pairs,
              **(chosen.acted if chosen else {})}
  defaults = {**cli.flag_defaults(settings), **(chosen.defaults if chosen else {})}  # a list flag's default: strings
  recorded = {**settings, "counts": counts, "variants": keys, "dropped_counts_note": note,
              "pair_fprs": pair_fprs if pairs else None, "n_boot": FLAGS.n_boot if pairs else None,
              **({"population": chosen.population_size()} if chosen and chosen.population_size() else {})}
  # Every subset's rows as it finishes, for a rerun after a stop; which subsets the counts and draws give is checked
  # per subset (its models), so they are not part of the folder's settings.
  cell_settings = {k: v for k, v in recorded.items() if k not in ("counts", "draws", "dropped_counts_note")}
  cell_settings.update(backend=scoring.backend, precision=scoring.precision,
                       population=chosen.population_record() if chosen else None)
  cells = sweep_report.Cells(
      os.path.join(out_dir, "shadow_sweep_cells" + provenance.suffix(
          {k: settings[k] for k in settings if k not in ("counts", "draws")}, defaults)),
      run_folder.run_fingerprint(FLAGS.run_dir), cell_settings)
  rows = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, scoring, counts=counts, draws=FLAGS.draws,
                                       variants=variants, mask_NxT=run.mask_NxT, fpr=FLAGS.fpr, seed=FLAGS.seed,
                                       progress=FLAGS.progress, attack_scorers=chosen.scorers() if chosen else (),
                                       pairs=pairs, pair_fprs=pair_fprs, n_boot=FLAGS.n_boot, cells=cells)
  if cells.resumed:
    print(f"resumed: {cells.resumed} subset(s) read back from {cells.folder}")
  names = [v[0] for v in variants] + [name for name, _ in (chosen.scorers() if chosen else [])]
  text, paths = sweep_report.write(out_dir, FLAGS.run_dir, run, rows, names, settings, defaults, recorded,
                                   styles=chosen.styles() if chosen else None,
                                   extra=chosen.population_record() if chosen else None)
  print(text)
  print(provenance.wrote(paths))


if __name__ == "__main__":
  cli.run(main, resumes=True)
