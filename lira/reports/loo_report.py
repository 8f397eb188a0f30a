"""Reports of a leave-one-out evaluation: results.json, results.md and the log-log ROC plot.

results.json (schema "seqlira.results", docs/outputs.md): schema {name, version, doc}; command and argv;
run_dir (absolute); shape {M, N, T}; masked; settings {variants, reduction, statistic, offline, fix_variance,
n_boot, seed, level, fprs}; the same settings also at the top level (statistic, reduction, offline,
fix_variance, n_boot, seed, level) and as one readable line `setting`; dropped_variants [{name, reason}];
variants [{name, covariance, shared, summary}] where summary is lira.metrics.summarize's dict (auc, auc_ci,
n_pos, n_neg, n_excluded, n_boot, ci_level, tpr {"0.01": {fpr, tpr, ci, resolved, min_negatives}, ...},
roc {fpr, tpr}); seconds; files (the report's file names); run_config (the run's config.json). Missing values
(an interval without replicates) are null. With attack rows (evaluate --attacks: the registry's attacks that score
leave-one-out, attacks/shadow.py): attacks [{name, attack, params, summary, scores_file}], pooled over the same pairs,
and settings.attacks with the attack settings that acted (settings.k, settings.rmia_gamma, ...); with an attack that
reads the population (RMIA), population_fingerprint (lira.reports.population_files).
"""

import dataclasses
import os
import time

from lira import evaluation
from lira import metrics
from lira import scoring as scoring_lib
from lira.errors import InputError
from lira.reports import plots
from lira.reports import provenance
import run_folder
from lira.reports import tables
from lira.scoring import Scoring

# Settings that change the scores themselves (the bootstrap's n_boot and seed change only the intervals).
SCORE_SETTINGS = ("reduction", "statistic", "offline", "offline_shift", "fix_variance", "balance_counts")
LEVEL = metrics.LEVEL


def defaults():
  """The settings a report's file names leave out: Scoring's defaults, all six variants, the bootstrap's defaults."""
  return {"variants": None, **{k: scoring_lib.defaults()[k] for k in SCORE_SETTINGS}, "n_boot": metrics.N_BOOT,
          "seed": 0}


def choose_variants(variants, scoring, scorer="leave_one_out"):
  """(requested, chosen, dropped [{name, reason}]) for variant names under a Scoring; error if none is left."""
  requested = scoring_lib.select_variants(variants)
  chosen, dropped = scoring_lib.applicable_variants(requested, scoring, scorer)
  dropped = [{"name": name, "reason": reason} for name, reason in dropped]
  if not chosen:
    raise InputError("no variant left to evaluate: " + "; ".join(f"{d['name']}: {d['reason']}" for d in dropped))
  return requested, chosen, dropped


def dropped_notes(dropped):
  """One note per reason naming every variant it dropped; dropped = [{name, reason}]."""
  by_reason = {}
  for d in dropped:
    by_reason.setdefault(d["reason"], []).append(d["name"])
  return [f"not evaluated: {', '.join(names)}: {reason}." for reason, names in by_reason.items()]


def report_settings(chosen, scoring, n_boot, seed):
  """The settings that change the report's numbers, in the order its file names list them."""
  keys = [scoring_lib.variant_key(v) for v in chosen]
  every = [scoring_lib.variant_key(v) for v in scoring_lib.VARIANTS]
  return {"variants": None if sorted(keys) == sorted(every) else keys, "reduction": scoring.reduction,
          "statistic": scoring.statistic, "offline": scoring.offline,
          "offline_shift": scoring.offline_shift if scoring.offline else defaults()["offline_shift"],
          "fix_variance": scoring.fix_variance, "balance_counts": scoring.balance_counts, "n_boot": int(n_boot),
          "seed": int(seed)}


def scoring_words(settings):
  """The scoring settings in words: 'statistic=logit, reduction=none, offline (shift: std), balanced counts'."""
  words = [f"statistic={settings['statistic']}", f"reduction={settings['reduction'] or 'none'}"]
  if settings["offline"]:
    words.append(f"offline (shift: {settings['offline_shift']})")
  words += [w for w, on in (("fixed variance", settings["fix_variance"]),
                            ("balanced counts", settings.get("balance_counts"))) if on]
  return ", ".join(words)


def title(run, shape, settings, attack_rows=None):
  """The ROC's title: the run (provenance.run_description), its shape and every setting that changes the curves
  (the attacks' settings that acted, from attack_rows)."""
  what = "LiRA and attacks" if settings.get("attacks") else "LiRA"
  words = scoring_words(settings) + ("" if attack_rows is None or not attack_rows.words else
                                     f", {attack_rows.words}")
  return f"{run}\n{what} leave-one-out, {provenance.shape_line(shape)}\n{words}"


def scores_path(out_dir, variant, settings):
  """Where a variant's [M, N] scores go: scores_oas-shared[_settings].npy (only settings that change scores)."""
  score_settings = {k: settings[k] for k in SCORE_SETTINGS}
  return provenance.report_path(out_dir, f"scores_{scoring_lib.variant_key(variant)}", "npy", score_settings, defaults())


def _first_process():
  from lira import loo_jax
  return loo_jax.is_first_process()


def evaluate_run(run_dir, out_dir=None, scoring=None, *, variants=None, n_boot=metrics.N_BOOT, seed=0, progress=True,
                 save_scores=True, attack_rows=None, **fields):
  """Evaluate a run folder under a lira.Scoring (fields as keywords override it), write the reports (named by their
  settings), and return (table text, result dict).

  With save_scores, each variant's leave-one-out scores llr_MxN (float64, higher = member) are written as
  scores_<variant>[_settings].npy beside the report, for analyses of one's own. attack_rows (attacks.shadow.AttackRows,
  computed beforehand) adds attack rows to the same table, results.json and roc.png. losses.npy is
  memory-mapped and read a block of canaries at a time. With the jax backend in a jax.distributed run every process
  scores its share, and only the first pools the ROCs and writes (the others return (None, None)).
  """
  scoring = Scoring.of(scoring, **fields)
  balance_note = None
  if scoring.balance_counts and scoring.fix_variance:  # LiRA's pooled variance is a plain leave-one-out quantity
    scoring = dataclasses.replace(scoring, balance_counts=False)
    balance_note = ("note: --fix_variance pools one variance over all canaries, which balanced counts do not apply "
                    "to; plain leave-one-out was used (--nobalance_counts)")
  requested, chosen, dropped = choose_variants(variants, scoring)
  run = run_folder.load_run(run_dir, mmap=True)
  out_dir = out_dir or run_dir
  first = scoring.backend != "jax" or _first_process()
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  settings = report_settings(requested, scoring, n_boot, seed)
  names_default = defaults()
  if attack_rows is not None:
    settings, names_default = {**settings, **attack_rows.settings}, {**names_default, **attack_rows.defaults}
  start = time.perf_counter()
  rows, scores = evaluation.evaluate_variants(run.loss_MxNxT, run.keep_MxN, scoring, mask_NxT=run.mask_NxT,
                                              variants=chosen, n_boot=n_boot, seed=seed, progress=progress,
                                              summarize=first)
  seconds = time.perf_counter() - start
  if not first:
    return None, None
  M, N, T = run.loss_MxNxT.shape
  shape = {"M": M, "N": N, "T": T}
  setting = (f"{provenance.shape_line(shape)}; {scoring_words(settings)}; leave-one-out; "
             f"{n_boot} bootstrap replicates over canaries (seed {seed}, {LEVEL:.0%} percentile intervals)")
  paths = {ext: provenance.report_path(out_dir, stem, ext, settings, names_default)
           for stem, ext in (("results", "json"), ("results", "md"), ("roc", "png"))}
  arrays = {}  # path -> scores [M, N], written with the reports
  if save_scores:
    for variant in chosen:
      path = scores_path(out_dir, variant, settings)
      arrays[path] = scores[variant[0]]
      paths[f"scores {variant[0]}"] = path
  extra = [] if attack_rows is None else [dict(r) for r in attack_rows.rows]
  for row in extra:
    if save_scores:
      path = provenance.report_path(out_dir, f"scores_{row['attack']}", "npy", row["params"], names_default)
      arrays[path] = attack_rows.scores[row["attack"]]
      paths[f"scores {row['attack']}"] = path
      row["scores_file"] = os.path.basename(path)
  table_rows = [(r["name"], r["summary"]) for r in rows + extra]
  notes = dropped_notes(dropped) + ([balance_note] if balance_note else [])
  if extra:
    notes += list(attack_rows.notes)
  result = provenance.header("evaluate", run_dir, run, {**settings, "variants": [scoring_lib.variant_key(v) for v in chosen],
                                                        "requested_variants": [scoring_lib.variant_key(v) for v in requested],
                                                        "level": LEVEL, "fprs": list(metrics.DEFAULT_FPRS)},
                             "seqlira.results")
  result.update({"setting": setting, "statistic": scoring.statistic, "reduction": scoring.reduction,
                 "offline": scoring.offline, "offline_shift": scoring.offline_shift,
                 "fix_variance": scoring.fix_variance, "balance_counts": scoring.balance_counts,
                 "n_boot": n_boot, "seed": seed, "level": LEVEL,
                 "dropped_variants": dropped, "seconds": seconds, "variants": rows,
                 **({"attacks": extra, **attack_rows.population} if extra else {}),
                 "files": [os.path.basename(p) for p in paths.values()]})
  md_notes = "".join(f"\n{n}  " for n in notes)
  curves = [plots.summary_curve(r["name"], r["summary"]) for r in rows + extra]
  figure_title = title(provenance.run_description(run_dir, run.config), shape, settings, attack_rows)
  figure = plots.roc_figure(curves, title=figure_title, styles=None if attack_rows is None else attack_rows.styles)
  # The report set is written whole, results.json (which lists the others) last; a Ctrl-C before this point leaves
  # none of it, and one that lands while it is written (the PNG drawn, a second) comes after the work: not a stop.
  with run_folder.ctrl_c_held(deliver=False):
    for path, array in arrays.items():
      run_folder.save_npy(path, array)
    run_folder.save_text(paths["md"], f"# Leave-one-out LiRA\n\n{setting}\n\n{tables.format_markdown(table_rows)}\n"
                                      f"{md_notes}\n")
    run_folder.save_figure(paths["png"], figure)
    run_folder.save_json(paths["json"], result)
  text = "\n".join([setting, "", tables.format_table(table_rows)] + notes)
  return text, result
