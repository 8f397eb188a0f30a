"""Reports of the DP audit: epsilon lower bounds (lira.dp_audit) per model and pooled, beside the accountant's.

audit.json (schema "seqlira.audit", docs/outputs.md): schema, command, argv, settings {variants, reduction,
statistic, offline, offline_shift, fix_variance, balance_counts, attacks, k, method, delta, confidence,
threshold_strategy, seed}, setting (one readable line), sources [{kind ("run" or "targets"), path, shape, masked,
run_config, accountant (null: no DP), accountant_epsilon (null: no DP), rows [{name, attack, pooled, per_model,
per_model_summary {median, max, argmax}, exceeds {pooled, models}}], notes}], dropped_variants, seconds, files. A
bound is lira.dp_audit.Bound's fields; a threshold at which nothing is guessed (inf) is null.
"""

import dataclasses
import math
import os
import sys
import textwrap
import time

import numpy as np

from lira import dp_audit
from lira import gaussian
from lira import scoring as scoring_lib
from lira.checks import check_arrays
from lira.errors import InputError, MissingFileError
from lira.loo import leave_one_out_variants
from lira.reports import audit_plots
from lira.reports import loo_report
from lira.reports import provenance
import run_folder
from lira.scoring import Scoring

METHOD_WORDS = {"one_run": "one run (Steinke, Nasr and Jagielski 2023)", "clopper_pearson": "Clopper-Pearson",
                "gdp": "Gaussian DP (Nasr et al. 2023)"}
SCORE_SETTINGS = ("variants",) + loo_report.SCORE_SETTINGS
ACCOUNTANT_WORDS = (("noise_multiplier", "noise multiplier"), ("clip_norm", "clip norm"),
                    ("sampling_prob", "sampling probability"), ("steps", "steps"))


def _number(value):
  return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def accountant_of(path, config, num_models):
  """A config's "accountant" block (None: a run without DP), its epsilon and delta checked; InputError names the
  file and key."""
  accountant = config.get("accountant") if isinstance(config, dict) else None
  if accountant is None:
    return None
  if not isinstance(accountant, dict):
    raise InputError(f"{path}: accountant must be a JSON object with epsilon and delta, got "
                     f"{type(accountant).__name__}")
  eps, delta = accountant.get("epsilon"), accountant.get("delta")
  if not _number(eps) or eps < 0:
    raise InputError(f"{path}: accountant.epsilon must be a number >= 0, got {eps!r}")
  if not _number(delta) or not 0 < delta < 1:
    raise InputError(f"{path}: accountant.delta must be a number in (0, 1), got {delta!r}")
  per = accountant.get("epsilon_per_model")
  if per is not None and (not isinstance(per, list) or len(per) != num_models or not all(map(_number, per))):
    raise InputError(f"{path}: accountant.epsilon_per_model must list one number per model ({num_models}), got "
                     f"{per!r}")
  return accountant


def check_keep_rows(path, keep_MxN, what="model"):
  """Every model (target) has IN and OUT canaries: a per-model bound needs both."""
  for m, keep_N in enumerate(np.asarray(keep_MxN, bool)):
    if keep_N.all() or not keep_N.any():
      raise InputError(f"{path}: {what} {m} has {'no OUT' if keep_N.all() else 'no IN'} canary; a per-{what} bound "
                       "needs both")


def audit_row(name, llr_MxN, keep_MxN, options, attack=None):
  """One row: each model's bound, the bound pooled over all pairs, and the per-model median and max."""
  per_model = dp_audit.model_bounds(llr_MxN, keep_MxN, options)
  return {"name": name, "attack": attack, "pooled": dp_audit.pooled_bound(llr_MxN, keep_MxN, options),
          "per_model": per_model, "per_model_summary": dp_audit.model_summary(per_model)}


def source(kind, path, shape, masked, config, accountant):
  """A run folder (or a folder of target scores) being audited, its rows added once scored."""
  return {"kind": kind, "path": os.path.abspath(path), "given": path, "name": os.path.basename(os.path.normpath(path)),
          "shape": shape, "masked": masked, "run_config": config, "accountant": accountant, "rows": []}


def _exceeds(row, accountant, options):
  """Where a bound is above the accountant's epsilon at a delta that makes it a contradiction (audit delta >= the
  accountant's: the run is then also (epsilon, audit delta)-DP)."""
  if accountant is None or options.delta < accountant["delta"]:
    return {"pooled": False, "models": []}
  eps, per = float(accountant["epsilon"]), accountant.get("epsilon_per_model")
  models = [m for m, b in enumerate(row["per_model"]) if b.epsilon > (per[m] if per else eps)]
  return {"pooled": row["pooled"].epsilon > eps, "models": models}


def _source_notes(src, options):
  notes, acc = [], src["accountant"]
  what = "target" if src["kind"] == "targets" else "model"
  if acc is not None and float(acc["delta"]) != options.delta:
    notes.append(f"the accountant's delta {acc['delta']:g} differs from --delta={options.delta:g}: the bounds are at "
                 f"delta={options.delta:g}" + ("; a bound above the accountant's epsilon contradicts it only at a "
                                               "delta >= the accountant's" if options.delta < acc["delta"] else ""))
  for row in src["rows"]:
    over = row["exceeds"]
    if over["pooled"] or over["models"]:
      where = ", ".join((["pooled"] if over["pooled"] else []) + [f"{what} {m}" for m in over["models"][:5]])
      notes.append(f"WARNING: {row['name']}: the bound exceeds the accountant's epsilon ({where}): a bug in the "
                   "training, the accounting or the audit")
  return notes


def _value_words(value):
  """A number as '%g'; a list of numbers (one per model) as its value or its range 'low to high'."""
  if _number(value):
    return f"{value:.4g}"
  if isinstance(value, list) and value and all(map(_number, value)):
    low, high = min(value), max(value)
    return f"{low:.4g}" if low == high else f"{low:.4g} to {high:.4g}"
  return None


def _accountant_words(acc):
  if acc is None:
    return "no DP (no accountant in the config)"
  extra = [f"{words} {_value_words(acc.get(key))}" for key, words in ACCOUNTANT_WORDS if _value_words(acc.get(key))]
  kind = f" ({acc['accountant']})" if isinstance(acc.get("accountant"), str) else ""
  return (f"DP-SGD accountant{kind}: epsilon {acc['epsilon']:.4g} at delta {acc['delta']:g}"
          + (f"; {', '.join(extra)}" if extra else ""))


def _shape_words(src):
  shape = src["shape"]
  if src["kind"] == "targets":
    return f"K={shape['K']} target models, N={shape['N']} canaries"
  return provenance.shape_line(shape)


def _cells(rows, method):
  header = ["variant", "pooled eps", "TPR at FPR (pooled)", "median eps", "max eps (model)"]
  header += ["pooled mu"] if method == "gdp" else []
  body = []
  for row in rows:
    p, s = row["pooled"], row["per_model_summary"]
    # '-' where no threshold gives a bound above 0, whichever the method (the rates of a 0 bound say nothing)
    rates = "-" if p.tp + p.fp == 0 or not p.epsilon > 0 else f"{100 * p.tpr:.2f}% at {100 * p.fpr:.2f}%"
    top = f"{s['max']:.3f}" + (f" ({s['argmax']})" if s["max"] > 0 else "")
    cells = [row["name"], f"{p.epsilon:.3f}", rates, f"{s['median']:.3f}", top]
    body.append(cells + ([f"{p.mu:.3f}"] if method == "gdp" else []))
  return header, body


def format_table(rows, method, markdown=False):
  """The bounds of one source's rows as a fixed-width text or markdown table."""
  header, body = _cells(rows, method)
  if markdown:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
  widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
  lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
           for r in [header] + body]
  lines.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(lines)


def setting_line(options, scores_words):
  strategy = ("Bonferroni over thresholds" if options.threshold_strategy == "bonferroni"
              else f"threshold chosen on half the scores, bound on the other half (seed {options.seed})")
  return (f"Empirical epsilon lower bounds: {METHOD_WORDS[options.method]}, delta={options.delta:g}, "
          f"{100 * options.confidence:g}% confidence, {strategy}; {scores_words}")


def report_settings(options, score_settings, attack_settings):
  """Every setting that changes the numbers, in the order the file names list them (the split's seed only with
  split)."""
  audit = {k: getattr(options, k) for k in ("method", "delta", "confidence", "threshold_strategy")}
  audit["seed"] = options.seed if options.threshold_strategy == "split" else dp_audit.defaults()["seed"]
  return {**score_settings, **attack_settings, **audit}


def names_default(attack_defaults):
  """The settings the file names leave out: Scoring's, all variants, no attacks, AuditOptions' defaults."""
  return {**{k: loo_report.defaults()[k] for k in SCORE_SETTINGS}, **attack_defaults, **dp_audit.defaults()}


def write(out_dir, sources, options, settings, defaults, scores_words, dropped, extra_notes, seconds, styles=None):
  """Write audit.md, audit.json, audit.png (named by the settings) and return (text, result)."""
  setting = setting_line(options, scores_words)
  paths = {ext: provenance.report_path(out_dir, stem, ext, settings, defaults)
           for stem, ext in (("audit", "json"), ("audit", "md"), ("audit", "png"))}
  text_blocks, md_blocks = [setting], ["# Empirical epsilon lower bounds", setting]
  what = "target" if sources[0]["kind"] == "targets" else "model"
  legend = (f"pooled: all ({what}, canary) pairs; median / max eps over the {what}s, each the audited one in turn "
            f"(max: the {what} with the largest bound, the largest of several bounds each at the stated confidence, "
            f"so not itself one at it); TPR at FPR '-': no threshold gives a bound above 0")
  for src in sources:
    for row in src["rows"]:
      row["exceeds"] = _exceeds(row, src["accountant"], options)
    src["notes"] = _source_notes(src, options)
    head = f"{src['given']}: {_shape_words(src)}; {_accountant_words(src['accountant'])}"
    text_blocks += ["", head, "", format_table(src["rows"], options.method)] + src["notes"]
    md_blocks += [f"## {src['name']}", head, format_table(src["rows"], options.method, markdown=True)]
    md_blocks += ["  \n".join(src["notes"])] if src["notes"] else []
  notes = loo_report.dropped_notes(dropped) + list(extra_notes) + [legend]
  text_blocks += [""] + notes
  md_blocks.append("  \n".join(notes))
  result = {"schema": {"name": "seqlira.audit", "version": provenance.SCHEMA_VERSION, "doc": "docs/outputs.md"},
            "command": "audit", "argv": list(sys.argv), "settings": settings, "setting": setting,
            "sources": [_source_json(src) for src in sources], "dropped_variants": dropped, "notes": notes,
            "seconds": seconds, "files": [os.path.basename(p) for p in paths.values()]}
  run_folder.save_json(paths["json"], result)
  run_folder.save_text(paths["md"], "\n\n".join(md_blocks) + "\n")
  # Wrapped: several runs' names would run past the figure's edge.
  runs = textwrap.fill(provenance.runs_description([(src["path"], src["run_config"]) for src in sources]), 80,
                       break_on_hyphens=False)
  title = (f"{runs}\n{METHOD_WORDS[options.method]}\n"
           f"delta={options.delta:g}, confidence {100 * options.confidence:g}%, {options.threshold_strategy}")
  run_folder.save_figure(paths["png"], audit_plots.bounds_figure(sources, title, styles))
  return "\n".join(text_blocks), result


def _source_json(src):
  rows = [{"name": r["name"], "attack": r["attack"], "pooled": r["pooled"].as_dict(),
           "per_model": [b.as_dict() for b in r["per_model"]], "per_model_summary": r["per_model_summary"],
           "exceeds": r["exceeds"]} for r in src["rows"]]
  eps = audit_plots.accountant_epsilon(src)
  return {**{k: src[k] for k in ("kind", "path", "shape", "masked", "run_config", "accountant", "notes")},
          "accountant_epsilon": None if math.isinf(eps) else eps, "rows": rows}


def _score_settings(requested, scoring, drop=()):
  settings = loo_report.report_settings(requested, scoring, 0, 0)
  return {k: settings[k] for k in SCORE_SETTINGS if k not in drop}


def audit_runs(run_dirs, out_dir=None, scoring=None, options=None, *, variants=None, attack_rows_of=None,
               progress=True):
  """Audit run folders: each variant's leave-one-out scores (and the attacks' rows attack_rows_of(run_dir)
  gives, an attacks.shadow.AttackRows) bounded per model and pooled; writes the reports into out_dir (default the
  first run folder) and returns (text, result). Every run's files, accountant, losses and classes are checked, and
  its attack rows made, before any LiRA scoring."""
  options, scoring = dp_audit.AuditOptions.of(options), Scoring.of(scoring)
  notes = []
  if scoring.balance_counts and scoring.fix_variance:  # as evaluate: LiRA's pooled variance is plain leave-one-out's
    scoring = dataclasses.replace(scoring, balance_counts=False)
    notes.append("--fix_variance pools one variance over all canaries, which balanced counts do not apply to; plain "
                 "leave-one-out was used (--nobalance_counts)")
  requested, chosen, dropped = loo_report.choose_variants(variants, scoring)
  scorings = [scoring.variant(covariance, shared) for _, covariance, shared in chosen]
  runs, sources = [], []
  for run_dir in run_dirs:
    run = run_folder.load_run(run_dir, mmap=True)
    M, N, T = run.loss_MxNxT.shape
    accountant = accountant_of(run_folder.config_path(run_dir), run.config, M)
    check_keep_rows(os.path.join(run_dir, run_folder.names.KEEP), run.keep_MxN)
    check_arrays(run.loss_MxNxT, run.keep_MxN, run.mask_NxT, scoring.reduction)
    for s in scorings:
      gaussian.check_counts(run.keep_MxN, s, "leave_one_out")
    runs.append(run)
    sources.append(source("run", run_dir, {"M": M, "N": N, "T": T}, run.mask_NxT is not None, run.config,
                          accountant))
  out_dir = out_dir or run_dirs[0]
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  attack_rows = [attack_rows_of(run_dir) for run_dir in run_dirs] if attack_rows_of else None
  start = time.perf_counter()
  for run, src, attacks in zip(runs, sources, attack_rows or [None] * len(runs)):
    llrs = leave_one_out_variants(run.loss_MxNxT, run.keep_MxN, scorings, mask_NxT=run.mask_NxT, progress=progress)
    src["rows"] = [audit_row(name, llr_MxN, run.keep_MxN, options) for (name, _, _), llr_MxN in zip(chosen, llrs)]
    if attacks is not None:
      src["rows"] += [audit_row(r["name"], attacks.scores[r["attack"]], run.keep_MxN, options, r["attack"])
                      for r in attacks.rows]
  seconds = time.perf_counter() - start
  score_settings = _score_settings(requested, scoring)
  attack_settings, attack_defaults, styles = {}, {}, {}
  if attack_rows:
    attack_settings, attack_defaults, styles = attack_rows[0].settings, attack_rows[0].defaults, attack_rows[0].styles
    notes += list(attack_rows[0].notes)
  settings = report_settings(options, score_settings, attack_settings)
  words = f"leave-one-out LiRA scores ({loo_report.scoring_words(settings)})"
  return write(out_dir, sources, options, settings, names_default(attack_defaults), words, dropped, notes, seconds,
               styles)


def _checked_scores(path, llr_KxN, shape=None):
  """Float scores [K, N] (of `shape` when given), all finite: InputError naming the file otherwise."""
  if llr_KxN.ndim != 2 or not np.issubdtype(llr_KxN.dtype, np.floating) or (shape and llr_KxN.shape != shape):
    raise InputError(f"{path}: expected float scores [K, N]{f' = {list(shape)}' if shape else ''}, got "
                     f"{llr_KxN.dtype} {list(llr_KxN.shape)}")
  if not np.isfinite(llr_KxN).all():
    raise InputError(f"{path}: holds non-finite scores")
  return llr_KxN


def load_target_scores(target_dir, requested, chosen, scoring, explicit):
  """{variant name: scores [K, N]} of a score_targets folder, the files named by the scoring settings; every
  explicitly requested variant's file must be there, else at least one of the chosen."""
  if not os.path.isdir(target_dir):
    raise MissingFileError(f"--target_scores={target_dir}: folder does not exist")
  settings = _score_settings(requested, scoring, drop=("variants", "balance_counts"))
  paths = {name: provenance.report_path(target_dir, f"attack_scores_{scoring_lib.variant_key((name, c, s))}", "npy",
                                        settings, loo_report.defaults()) for name, c, s in chosen}
  missing = [p for p in paths.values() if not os.path.exists(p)]
  if explicit and missing:
    raise MissingFileError(f"{missing[0]} does not exist: python -m experiments.score_targets --out_dir="
                           f"{target_dir} writes it (with the same scoring flags)")
  paths = {name: p for name, p in paths.items() if os.path.exists(p)}
  if not paths:
    pattern = os.path.basename(provenance.report_path(target_dir, "attack_scores_VARIANT", "npy", settings,
                                                      loo_report.defaults()))
    raise MissingFileError(f"--target_scores={target_dir} holds no {pattern} (python -m experiments.score_targets "
                           "--out_dir writes them, with the same scoring flags)")
  scores, shape = {}, None
  for name, path in paths.items():
    llr_KxN = _checked_scores(path, run_folder.load_npy(path), shape)
    scores[name], shape = llr_KxN, llr_KxN.shape
  return scores


def load_target_keep(keep_path, shape):
  """The targets' membership, bool [K, N] ([N] for one target)."""
  keep = run_folder.load_npy(keep_path)
  if keep.dtype != bool and np.issubdtype(keep.dtype, np.integer) and np.isin(keep, (0, 1)).all():
    keep = keep.astype(bool)
  keep = keep[None] if keep.ndim == 1 else keep
  if keep.dtype != bool or keep.shape != tuple(shape):
    raise InputError(f"{keep_path}: expected the targets' membership as bool [K, N] = {list(shape)} (or [N] for one "
                     f"target), got {keep.dtype} {list(run_folder.load_npy(keep_path).shape)}")
  check_keep_rows(keep_path, keep, "target")
  return keep


def audit_targets(target_dir, keep_path, out_dir=None, scoring=None, options=None, *, variants=None,
                  target_config=None, attack_files=None, attack_settings=None, attack_defaults=None):
  """Audit target models scored by score_targets (attack_scores_<variant>.npy [K, N] in target_dir) with their
  membership keep_path; target_config: a config.json whose "accountant" is the targets' (none: no DP);
  attack_files {row name: path}: the attacks' score files of the same folder (each must exist), audited beside the
  variants, with attack_settings (what report names carry, against attack_defaults). Writes the reports into out_dir
  (default target_dir) and returns (text, result)."""
  options, scoring = dp_audit.AuditOptions.of(options), Scoring.of(scoring)
  requested, chosen, dropped = loo_report.choose_variants(variants, scoring, scorer="targets")
  scores = load_target_scores(target_dir, requested, chosen, scoring, explicit=bool(variants))
  for name, path in (attack_files or {}).items():
    if not os.path.exists(path):
      raise MissingFileError(f"{path} does not exist: python -m experiments.score_targets --out_dir={target_dir} "
                             "writes it with the same --attacks and settings")
    scores[name] = _checked_scores(path, run_folder.load_npy(path), next(iter(scores.values())).shape)
  K, N = next(iter(scores.values())).shape
  keep_KxN = load_target_keep(keep_path, (K, N))
  config, accountant = {}, None
  if target_config:
    if not os.path.exists(target_config):
      raise MissingFileError(f"--target_config={target_config}: file does not exist")
    config = run_folder.load_json(target_config)
    accountant = accountant_of(target_config, config, K)
  out_dir = out_dir or target_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  start = time.perf_counter()
  src = source("targets", target_dir, {"K": K, "N": N}, False, config, accountant)
  src["rows"] = [audit_row(name, llr_KxN, keep_KxN, options) for name, llr_KxN in scores.items()]
  seconds = time.perf_counter() - start
  settings = report_settings(options, _score_settings(requested, scoring, drop=("balance_counts",)),
                             attack_settings or {})
  words = f"score_targets scores ({loo_report.scoring_words(settings)}), membership {keep_path}"
  return write(out_dir, [src], options, settings, names_default(attack_defaults or {}), words, dropped, [], seconds)
