"""TPR at low FPR against the number of shadow models (Rossi et al. 2025, Figure 5).

python -m experiments.shadow_sweep --run_dir=DIR [--counts=8,16,32] [--draws=3] [--fpr=1e-3] [--reduction=group:4]
--fpr (default 1e-4, the paper's 0.01%) is resolved only with 10,000 OUT scores per subset: on a small run every such
cell is n/r, so pass --fpr=1e-3 or 1e-2. Default counts: 4, 8, 16, ... and M, without 4 where a subset of 4 models
cannot fit every variant (balanced counts, class-wise or offline fits need 6).
Writes shadow_sweep.json, shadow_sweep.csv and shadow_sweep.png into DIR (or --out_dir); settings other than the
defaults are appended to the names (shadow_sweep_reduction-group4.json), so sweeps with other settings are kept.
Counts above the run's M are dropped with a note. --attacks=rmia[,rmia_offline,...] adds RMIA rows, scored on the same
subsets (each target's reference models: the other m - 1), against the run's population_losses.npy.
"""

from absl import app
from absl import flags
import numpy as np

from attacks import rmia_rows
from experiments import cli
from experiments import scoring_flags
from lira import evaluation
from lira import metrics
from lira import rmia
from lira.reports import plots
from lira.reports import provenance
from lira.reports import run_folder
from lira import scoring as scoring_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder with losses.npy [M, N, T] and keep.npy [M, N].")
flags.DEFINE_list("counts", None, "Numbers of models m per subset (larger than M: dropped); default 4, 8, 16, ... and "
                  "M, from 8 where a subset of 4 cannot fit every variant (balanced counts, class-wise, offline).")
cli.check_range("counts", 4)  # leave-one-out in a subset needs 4 models
flags.DEFINE_integer("draws", 3, "Random subsets per m (m = M has one).")
cli.check_range("draws", 1)
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six).")
scoring_flags.define(("reduction", "statistic", "balance_counts", "backend", "precision"))
flags.DEFINE_list("attacks", None, f"RMIA rows beside the variants: {','.join(rmia.ATTACKS)} (default none).")
scoring_flags.define_rmia()
flags.DEFINE_float("fpr", 1e-4, "Target false positive rate.")
cli.check_range("fpr", 0, 1, low_open=True, high_open=True)
flags.DEFINE_integer("seed", 0, "Seed for the model subsets.")
cli.check_range("seed", 0)
flags.DEFINE_string("out_dir", None, "Where the outputs go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def _cell(rows):
  """One table cell: mean TPR (%) over the draws with a value, n/r if a draw's FPR is unresolved, n/a if none."""
  defined = [r for r in rows if r["tpr"] is not None and np.isfinite(r["tpr"])]
  if not defined:
    return "n/a"
  if not all(r["resolved"] for r in defined):
    return "n/r"
  return f"{100 * np.mean([r['tpr'] for r in defined]):.2f}"


def table(rows, names, counts, fpr):
  """The sweep as printed: one line per row name (variant or RMIA), one column per m, with evaluate's n/r mark and
  notes."""
  width = max([24] + [len(n) + 2 for n in names])
  lines = [f"{'variant':<{width}}" + "".join(f"{'m=' + str(m):>10}" for m in counts)]
  cells = {}
  for name in names:
    cells[name] = [_cell([r for r in rows if r["variant"] == name and r["m"] == m]) for m in counts]
    lines.append(f"{name:<{width}}" + "".join(f"{c:>10}" for c in cells[name]))
  lines.append(f"TPR@{100 * fpr:g}% FPR in %, mean over draws.")
  if any("n/a" in c for c in cells.values()):
    lines.append("n/a = too few models of a class for every canary at that m.")
  open_m = [m for i, m in enumerate(counts) if any(c[i] == "n/r" for c in cells.values())]
  if open_m:
    have = ", ".join(f"m={m}: {int(np.mean([r['n_neg'] for r in rows if r['m'] == m and r['n_neg']])):,}"
                     for m in open_m)
    lines.append(f"n/r = not resolved: TPR@{100 * fpr:g}% FPR needs >= {metrics.min_negatives(fpr):,} negatives; "
                 f"available (mean over draws) {have}. A larger --fpr (e.g. --fpr=0.01) is resolved with fewer.")
  return "\n".join(lines)


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  variants = scoring_lib.select_variants(FLAGS.variants)
  scoring = scoring_flags.scoring()
  attacks = list(dict.fromkeys(FLAGS.attacks or []))
  unknown = [a for a in attacks if a not in rmia.ATTACKS]
  if unknown:
    raise app.UsageError(f"--attacks: {', '.join(unknown)} is not an RMIA attack; choose from {', '.join(rmia.ATTACKS)}")
  rmia_options = [rmia_rows.options_for(a, FLAGS.rmia_gamma, FLAGS.rmia_a, scoring.reduction, scoring.balance_counts)
                  for a in attacks]
  run = run_folder.load_run(FLAGS.run_dir, mmap=True)
  pop_MxZxT = pop_mask_ZxT = None
  if rmia_options:
    pop_MxZxT, pop_mask_ZxT = run_folder.load_population(FLAGS.run_dir, mmap=True)
  M, N, T = run.loss_MxNxT.shape
  counts = [int(c) for c in FLAGS.counts] if FLAGS.counts else evaluation.sweep_counts(M, scoring, variants)
  counts, note = provenance.clip_counts(sorted(set(counts)), M, "--counts")  # each >= 4: checked with the flags
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  if note:
    print(note)
  if any(m < M for m in counts) and (note := scoring_flags.jax_compile_note(scoring, None, "model subsets have")):
    print(note)
  keys = [scoring_lib.variant_key(v) for v in variants]
  default = evaluation.sweep_counts(M, scoring, variants)
  settings = {"counts": None if counts == default else counts, "draws": FLAGS.draws,
              "variants": None if sorted(keys) == sorted(map(scoring_lib.variant_key, scoring_lib.VARIANTS)) else keys,
              "reduction": scoring.reduction,
              "statistic": FLAGS.statistic, "fpr": FLAGS.fpr, "seed": FLAGS.seed,
              "balance_counts": FLAGS.balance_counts, "attacks": attacks or None,
              "rmia_gamma": FLAGS.rmia_gamma, "rmia_a": FLAGS.rmia_a}
  rows = evaluation.shadow_count_sweep(run.loss_MxNxT, run.keep_MxN, scoring, counts=counts, draws=FLAGS.draws,
                                       variants=variants, mask_NxT=run.mask_NxT, fpr=FLAGS.fpr, seed=FLAGS.seed,
                                       progress=FLAGS.progress, rmia_options=rmia_options, pop_MxZxT=pop_MxZxT,
                                       pop_mask_ZxT=pop_mask_ZxT)
  paths = [provenance.report_path(out_dir, "shadow_sweep", ext, settings, cli.flag_defaults(settings)) for ext in ("json", "csv", "png")]
  recorded = {**settings, "counts": counts, "variants": keys, "dropped_counts_note": note,
              **({"population": int(pop_MxZxT.shape[1])} if rmia_options else {})}
  run_folder.save_json(paths[0], {**provenance.header("shadow_sweep", FLAGS.run_dir, run, recorded,
                                                  "seqlira.shadow_sweep"), "fpr": FLAGS.fpr, "rows": rows})
  run_folder.save_csv(paths[1], rows)
  shape = provenance.shape_line({"M": M, "N": N, "T": T})
  line = (f"statistic={FLAGS.statistic}, reduction={FLAGS.reduction or 'none'}"
          f"{', balanced counts' if FLAGS.balance_counts else ''}, {FLAGS.draws} draws per m (seed {FLAGS.seed})")
  title = (f"{provenance.run_description(FLAGS.run_dir, run.config)}\n"
           f"Shadow-model sweep (leave-one-out in each subset of m models)\n{shape}\n{line}")
  styles = {o.name: plots.rmia_style(a) for a, o in zip(attacks, rmia_options)}
  run_folder.save_figure(paths[2], plots.sweep_figure(rows, ylabel=f"TPR @ {100 * FLAGS.fpr:g}% FPR", title=title,
                                                      styles=styles))
  print(f"{shape}; {line}\n")
  print(table(rows, [v[0] for v in variants] + [o.name for o in rmia_options], counts, FLAGS.fpr))
  print(provenance.wrote(paths))


if __name__ == "__main__":
  cli.run(main)
