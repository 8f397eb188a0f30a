"""Empirical epsilon lower bounds of DP-trained runs from membership scores (jax-privacy's CanaryScoreAuditor).

python -m experiments.audit --run_dir=DIR[,DIR2,...] [--variants=...] [--attacks=loss] [--method=one_run]
  [--delta=1e-5] [--confidence=0.95] [--threshold_strategy=bonferroni] [scoring flags] [--out_dir=DIR]
python -m experiments.audit --target_scores=DIR --target_keep=KEEP.npy [--target_config=CONFIG.json]
Each run's leave-one-out LiRA scores (computed here, as evaluate computes them) and the --attacks rows (as evaluate's)
are bounded with each model as the audited one (median and max over models) and pooled over all pairs, beside the
accountant's epsilon from the run's config.json ("accountant"; none: no DP). --target_scores reads score_targets'
attack_scores_<variant>.npy [K, N] (and with --attacks the attacks' attack_scores_<attack>.npy) with the targets'
membership --target_keep ([K, N], or [N] for one target).
Writes audit.md, audit.json and audit.png (settings other than the defaults appended to the names) into --out_dir
(default the first run folder, or the --target_scores folder).
"""

import time

from absl import app
from absl import flags

from attacks import shadow
from attacks.catalogue import ATTACKS
from experiments import attack_flags
from experiments import cli
from experiments import option_flags
from experiments import scoring_flags
from lira import dp_audit
from lira.reports import audit_report
from lira.reports import provenance
from lira.reports import target_report

FLAGS = flags.FLAGS
flags.DEFINE_list("run_dir", None, "Run folder(s), comma-separated: losses.npy [M, N, T], keep.npy [M, N], optional "
                  "mask.npy, config.json (its \"accountant\" gives the DP-SGD epsilon).")
flags.DEFINE_list("variants", None, "Subset of variants, e.g. oas-shared,univariate-classwise (default all six; with "
                  "--target_scores, those whose scores the folder holds).")
scoring_flags.define()
attack_flags.define("leave_one_out", "Attacks audited beside LiRA's variants: their leave-one-out scores "
                    "(--run_dir), or with --target_scores the score files score_targets --attacks wrote (the attacks "
                    "that score targets)", "default none")
option_flags.define(dp_audit.AuditOptions, ("method", "delta", "confidence", "threshold_strategy", "seed"))
flags.DEFINE_string("target_scores", None, "Instead of --run_dir: a score_targets --out_dir holding "
                    "attack_scores_<variant>.npy [K, N].")
flags.DEFINE_string("target_keep", None, "With --target_scores: the targets' membership, bool [K, N] (or [N]) .npy.")
flags.DEFINE_string("target_config", None, "With --target_scores: a config.json whose \"accountant\" is the targets' "
                    "(default none: no DP).")
flags.DEFINE_string("out_dir", None, "Where the reports go; default the first run folder (or --target_scores).")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def _check_modes():
  """Exactly one of --run_dir and --target_scores, and only the flags that apply to it."""
  if bool(FLAGS.run_dir) == bool(FLAGS.target_scores):
    raise app.UsageError("give either --run_dir (leave-one-out scores of run folders) or --target_scores (a "
                         "score_targets folder), not both" if FLAGS.run_dir else "--run_dir or --target_scores is "
                         "required")
  if FLAGS.run_dir:
    wrong = [name for name in ("target_keep", "target_config") if FLAGS[name].present]
    if wrong:
      raise app.UsageError(f"--{wrong[0]} applies to --target_scores, not --run_dir")
    return
  if not FLAGS.target_keep:
    raise app.UsageError("--target_scores needs --target_keep (the targets' membership)")
  wrong = [name for name in ("balance_counts", "backend", "precision") if FLAGS[name].present]
  if wrong:
    raise app.UsageError(f"--{wrong[0]} applies to --run_dir (leave-one-out scores), not --target_scores")


def main(argv):
  del argv
  start = time.perf_counter()  # the whole command's work: the attacks' rows too
  options = dp_audit.AuditOptions(**option_flags.values(dp_audit.AuditOptions, dp_audit.defaults()))
  _check_modes()
  scoring = scoring_flags.scoring()
  attacks, settings, given = attack_flags.chosen()
  if FLAGS.target_scores:  # the attacks' score files score_targets wrote beside the variants'
    chosen = ATTACKS.chosen(attacks, "targets")
    settings = ATTACKS.checked_settings(settings, chosen, given, "targets")
    files = {a.label(settings): target_report.attack_scores_path(FLAGS.target_scores, a, settings, scoring,
                                                                 ATTACKS.defaults()) for a in chosen}
    acted = {n: settings[n] for a in chosen for n in a.acting(settings)}
    text, result = audit_report.audit_targets(
        FLAGS.target_scores, FLAGS.target_keep, FLAGS.out_dir, scoring, options, variants=FLAGS.variants,
        target_config=FLAGS.target_config, attack_files=files,
        attack_settings={"attacks": [a.name for a in chosen], **acted} if chosen else {},
        attack_defaults={"attacks": None, **ATTACKS.defaults()})
    out_dir = FLAGS.out_dir or FLAGS.target_scores
  else:
    attack_rows_of = None
    if attacks or given:  # called for every run after its files are checked, before LiRA's long work
      attack_rows_of = lambda run_dir: shadow.shadow_rows(run_dir, attacks, settings, scoring, n_boot=0,  # noqa: E731
                                                          given=given)
    text, result = audit_report.audit_runs(FLAGS.run_dir, FLAGS.out_dir, scoring, options, variants=FLAGS.variants,
                                           attack_rows_of=attack_rows_of, progress=FLAGS.progress)
    out_dir = FLAGS.out_dir or FLAGS.run_dir[0]
  print(text)
  print("\n" + provenance.wrote([f"{out_dir}/{name}" for name in result["files"]], time.perf_counter() - start))


if __name__ == "__main__":
  cli.run(main)
