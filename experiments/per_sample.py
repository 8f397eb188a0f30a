"""Which canaries leak: a per-sample audit of a shadow run (docs/per_sample.md).

python -m experiments.per_sample --run_dir=DIR [--variants=...] [--attacks=rmia,loss,...] [--fprs=0.01,0.001]
    [--folds=2] [--margin=0.1] [--priors=0.5,0.1,0.01,0.001] [--pair=univariate-shared,oas-shared]
    [--compare_run_dir=DIR2] [--nohalves] [--out_dir=DIR]
Scores the run leave-one-out with the LiRA variants (and the registered attacks of --attacks), then per attack: each
canary's AUC and TPR with an exact interval at thresholds calibrated on shadow models (K folds of models, each fold's
threshold set on the others'), the vulnerable set, the precision of a positive at each membership prior, the split
halves' vulnerable sets against each other (each half its own leave-one-out run), two attacks against each other,
and with --compare_run_dir the same attacks on another run with the same canaries. Writes
per_sample[_settings].{json,md,csv} and per_sample_tpr / _pair / _compare[_settings].png (lira/reports).
"""

import dataclasses
import os
import time

import numpy as np
from absl import app
from absl import flags
from tqdm.auto import tqdm

from attacks import shadow
from experiments import attack_flags
from experiments import cli
from experiments import option_flags
from experiments import scoring_flags
from lira import evaluation
from lira import per_canary as ps
from lira import scoring as scoring_lib
from lira.errors import InputError, MissingFileError
from lira.loo import leave_one_out, leave_one_out_variants
from lira.per_canary import PerSampleOptions
from lira.reports import loo_report
from lira.reports import per_sample_plots
from lira.reports import per_sample_report
from lira.reports import provenance
import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "A shadow run folder (losses.npy [M, N, T], keep.npy [M, N]).")
flags.DEFINE_string("compare_run_dir", None, "Another run folder with the same canaries (another model seed): the "
                    "same attacks on it, canary by canary.")
flags.DEFINE_list("variants", None, "LiRA variants, e.g. oas-shared,univariate-shared (default all six).")
scoring_flags.define()
attack_flags.define("leave_one_out", "Attacks to audit beside the variants")
flags.DEFINE_list("fprs", [f"{v:g}" for v in PerSampleOptions.fprs], PerSampleOptions.__dataclass_fields__[
    "fprs"].metadata["help"])
flags.DEFINE_list("priors", [f"{v:g}" for v in PerSampleOptions.priors], PerSampleOptions.__dataclass_fields__[
    "priors"].metadata["help"])
option_flags.define(PerSampleOptions, ("folds", "margin", "n_boot", "seed", "min_models"))
flags.DEFINE_bool("halves", True, "Split the models into two halves, each its own leave-one-out run, and compare their "
                  "vulnerable sets.")
flags.DEFINE_list("pair", None, "Two attacks whose per-canary results are set against each other (variant keys or "
                  "attack names); default univariate-shared,oas-shared where both are audited.")
flags.DEFINE_integer("top", 20, "Canaries listed per attack.")
cli.check_range("top", 1)
flags.DEFINE_string("out_dir", None, "Where the reports go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def _texts(run_dir, N, mask_NxT):
  try:
    return shadow.canary_texts(run_dir, N, mask_NxT)
  except (MissingFileError, InputError):
    return None


def _scorers(run, scoring, variants, chosen):
  """[(key, label, score(models, on_undefined) -> [m, N])]: the LiRA variants and the chosen attacks."""
  def lira_scorer(covariance, shared):
    def score(models, on_undefined="raise"):
      return leave_one_out(evaluation.ModelRows(run.loss_MxNxT, models), run.keep_MxN[models],
                           scoring.variant(covariance, shared), mask_NxT=run.mask_NxT, on_undefined=on_undefined,
                           model_ids=models)
    return score
  out = [(scoring_lib.variant_key(v), v[0], lira_scorer(v[1], v[2])) for v in variants]
  if chosen is not None:
    out += [(attack.name, label, scorer) for attack, (label, scorer) in zip(chosen.attacks, chosen.scorers())]
  return out


def _all_scores(run, scoring, variants, chosen, progress, what):
  """{label: score_MxN} of every attack on all of a run's models (the variants in one pass over the losses)."""
  M = run.keep_MxN.shape[0]
  llrs = leave_one_out_variants(run.loss_MxNxT, run.keep_MxN, [scoring.variant(c, s) for _, c, s in variants],
                                mask_NxT=run.mask_NxT, progress=progress)
  scores = {v[0]: llr for v, llr in zip(variants, llrs)}
  if chosen is not None:
    for (label, scorer) in tqdm(chosen.scorers(), desc=f"attacks ({what})", disable=not progress):
      scores[label] = scorer(np.arange(M))
  return scores


def _pair(keys, labels):
  """The two audited attacks' labels set against each other, or None."""
  by_key = dict(zip(keys, labels))
  if FLAGS.pair is None:
    default = ("univariate-shared", "oas-shared")
    return tuple(by_key[k] for k in default) if all(k in by_key for k in default) else None
  if len(FLAGS.pair) != 2:
    raise app.UsageError(f"--pair takes two attacks, got {len(FLAGS.pair)}")
  missing = [k for k in FLAGS.pair if k not in by_key]
  if missing:
    raise app.UsageError(f"--pair: {missing[0]!r} is not audited here; choose from {', '.join(keys)}")
  return tuple(by_key[k] for k in FLAGS.pair)


def main(argv):
  del argv
  start = time.perf_counter()
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  options = PerSampleOptions(fprs=FLAGS.fprs, priors=FLAGS.priors, folds=FLAGS.folds, margin=FLAGS.margin,
                             n_boot=FLAGS.n_boot, seed=FLAGS.seed, min_models=FLAGS.min_models)
  scoring = scoring_flags.scoring()
  if scoring.balance_counts and scoring.fix_variance:  # as evaluate: LiRA's pooled variance is plain leave-one-out
    scoring = dataclasses.replace(scoring, balance_counts=False)
    print("note: --fix_variance pools one variance over all canaries, which balanced counts do not apply to; plain "
          "leave-one-out was used (--nobalance_counts)")
  attacks, attack_settings, given = attack_flags.chosen()
  _, variants, dropped = loo_report.choose_variants(FLAGS.variants, scoring)
  chosen = shadow.choose(FLAGS.run_dir, attacks, attack_settings, scoring, given) if attacks or given else None
  run = run_folder.load_run(FLAGS.run_dir, mmap=True)
  M, N, T = run.loss_MxNxT.shape
  if M < options.folds:
    raise InputError(f"{FLAGS.run_dir}: M = {M} models, fewer than --folds={options.folds}")
  scorers = _scorers(run, scoring, variants, chosen)
  keys, labels = [k for k, _, _ in scorers], [label for _, label, _ in scorers]
  pair = _pair(keys, labels)
  other = other_chosen = None
  if FLAGS.compare_run_dir:
    per_sample_report.check_same_canaries(FLAGS.run_dir, FLAGS.compare_run_dir)
    other_chosen = (shadow.choose(FLAGS.compare_run_dir, attacks, attack_settings, scoring, given)
                    if attacks or given else None)
    other = run_folder.load_run(FLAGS.compare_run_dir, mmap=True)
  halves = ps.split_halves(run.keep_MxN, options.min_models, options.seed) if FLAGS.halves else None
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  for d in dropped:
    print(f"note: not audited: {d['name']}: {d['reason']}")
  if halves is not None and (note := scoring_flags.jax_compile_note(scoring, None, "the split halves have")):
    print(note)

  scores = _all_scores(run, scoring, variants, chosen, FLAGS.progress, "this run")
  audits = {label: ps.audit(scores[label], run.keep_MxN, options)
            for label in tqdm(labels, desc="per-sample audits", disable=not FLAGS.progress)}
  texts = _texts(FLAGS.run_dir, N, run.mask_NxT)
  planted_N = per_sample_report.planted(run.config, N)
  half_records = {}
  if halves is not None:
    for key, label, scorer in tqdm(scorers, desc="split halves", disable=not FLAGS.progress):
      a, b = (ps.audit(scorer(models, on_undefined="nan"), run.keep_MxN[models], options) for models in halves)
      half_records[label] = per_sample_report.halves_record(*halves, a, b)
  other_audits = None
  if other is not None:
    other_scores = _all_scores(other, scoring, variants, other_chosen, FLAGS.progress, "compared run")
    other_audits = {label: ps.audit(other_scores[label], other.keep_MxN, options) for label in labels}

  settings = {"variants": None if len(variants) == len(scoring_lib.VARIANTS) and not FLAGS.variants else
              [scoring_lib.variant_key(v) for v in variants],
              **{k: getattr(scoring, k) for k in loo_report.SCORE_SETTINGS},
              "attacks": attacks or None, **(chosen.acted if chosen else {}),
              "fprs": list(options.fprs), "priors": list(options.priors), "folds": options.folds,
              "margin": options.margin, "n_boot": options.n_boot, "seed": options.seed,
              "min_models": options.min_models, "halves": FLAGS.halves,
              "pair": None if FLAGS.pair is None else list(FLAGS.pair),
              "compare": provenance.run_name(FLAGS.compare_run_dir) if FLAGS.compare_run_dir else None}
  defaults = {**loo_report.defaults(), "attacks": None, **(chosen.defaults if chosen else {}),
              **{k: (list(v) if isinstance(v, tuple) else v) for k, v in PerSampleOptions.defaults().items()},
              "halves": True, "pair": None, "compare": None}
  files = per_sample_report.paths(out_dir, settings, defaults)
  shape = {"M": M, "N": N, "T": T}
  words = loo_report.scoring_words({**settings, "offline_shift": scoring.offline_shift})
  setting = f"{provenance.shape_line(shape)}; {words}; leave-one-out scores"
  report = provenance.header("per_sample", FLAGS.run_dir, run, settings, "seqlira.per_canary")
  report.update({"run": provenance.run_description(FLAGS.run_dir, run.config), "setting": setting,
                 "dropped_variants": dropped,
                 "attacks": [{**per_sample_report.attack_record(label, audits[label], half_records.get(label),
                                                                planted_N),
                              "key": key, "top": per_sample_report.top_record(audits[label], texts, FLAGS.top)}
                             for key, label, _ in scorers]})
  if pair is not None:
    report["pair"] = per_sample_report.pair_record(pair[0], pair[1], audits[pair[0]], audits[pair[1]])
  if other_audits is not None:
    report["compare"] = per_sample_report.compare_record(os.path.abspath(FLAGS.compare_run_dir), audits, other_audits)
  run_title = f"{provenance.run_description(FLAGS.run_dir, run.config)}, {provenance.shape_line(shape)}; {words}"
  fprs_words = ", ".join(f"{100 * f:g}%" for f in options.fprs)
  figures = {"tpr_png": per_sample_plots.tpr_histogram(
      audits, f"{run_title}\nper-canary TPR at thresholds calibrated on shadow models ({options.folds} folds; FPR "
      f"{fprs_words}); vulnerable: exact lower bound > held-out FPR + {options.margin:g}")}
  if pair is not None:
    figures["pair_png"] = per_sample_plots.pair_scatter(
        pair[0], pair[1], audits[pair[0]], audits[pair[1]],
        f"{run_title}\nwhich canaries each attack finds: per-canary TPR, {options.folds}-fold calibrated thresholds")
  if other_audits is not None:
    other_name = provenance.run_name(FLAGS.compare_run_dir)
    figures["compare_png"] = per_sample_plots.compare_scatter(
        audits, other_audits, other_name, report["compare"]["attacks"],
        f"{run_title}\nagainst {provenance.run_description(FLAGS.compare_run_dir, other.config)}: which canaries leak "
        f"in both runs (per-canary TPR, {options.folds}-fold calibrated thresholds)")
  report["seconds"] = time.perf_counter() - start
  report["files"] = [os.path.basename(p) for k, p in files.items() if k in ("json", "md", "csv") or k in figures]
  rows = per_sample_report.csv_rows(audits, texts)
  written = per_sample_report.write(report, rows, files, figures)
  print(per_sample_report.text(report))
  print("\n" + provenance.wrote(written, time.perf_counter() - start))


if __name__ == "__main__":
  cli.run(main)
