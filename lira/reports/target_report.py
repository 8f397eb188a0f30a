"""Reports of an attack on separate target models: scores_KxN per variant, and with known membership the table,
intervals and ROC that `evaluate` gives (docs/outputs.md, "attack")."""

import os
import time

import numpy as np

from lira import metrics
from lira.reports import plots
from lira.reports import provenance
from lira.reports import loo_report
import run_folder
from lira import targets
from lira import scoring as scoring_lib
from lira.errors import InputError
from lira.scoring import Scoring
from lira.reports import tables

def load_targets(target_path, keep_path, num_canaries, num_positions=None):
  """Target losses [K, N, T] (an [N, T] file is K = 1) and their membership [K, N] or None, checked against the
  shadow run's N (and T when given): floating-point losses of at least one target, before anything is written."""
  loss = run_folder.load_npy(target_path, mmap=True)
  if not np.issubdtype(loss.dtype, np.floating):
    raise InputError(f"{target_path}: expected floating-point per-token losses, got dtype {loss.dtype} (a "
                     "membership or token-id file given as --target?)")
  shape = list(loss.shape)
  if loss.ndim == 2:
    loss = loss[None]
  T = "T" if num_positions is None else f"T={num_positions}"
  if (loss.ndim != 3 or loss.shape[1] != num_canaries
      or (num_positions is not None and loss.shape[2] != num_positions)):
    raise InputError(f"{target_path}: expected per-token losses [K, N, T] or [N, T] with N={num_canaries} canaries "
                     f"and {T} positions (those of the shadow run), got {shape}")
  if loss.shape[0] == 0:
    raise InputError(f"{target_path}: holds no target model (shape {list(loss.shape)}, K = 0)")
  keep = None
  if keep_path:
    keep = run_folder.load_npy(keep_path)
    if keep.dtype != bool and np.issubdtype(keep.dtype, np.integer) and np.isin(keep, (0, 1)).all():
      keep = keep.astype(bool)
    keep = keep[None] if keep.ndim == 1 else keep
    if keep.dtype != bool or keep.shape != loss.shape[:2]:
      raise InputError(f"{keep_path}: expected the targets' membership as bool [K, N] = {list(loss.shape[:2])}, got "
                       f"{keep.dtype} {list(keep.shape)}")
  return loss, keep


def load_target_population(path, num_targets, pop_shape):
  """The targets' population losses [K, Z, T] (an [Z, T] file is K = 1), checked against the shadow run's [Z, T]."""
  pop = run_folder.load_npy(path, mmap=True)
  if not np.issubdtype(pop.dtype, np.floating):
    raise InputError(f"{path}: expected floating-point per-token losses, got dtype {pop.dtype}")
  shape = list(pop.shape)
  pop = pop[None] if pop.ndim == 2 else pop
  if pop.ndim != 3 or pop.shape != (num_targets,) + tuple(pop_shape):
    raise InputError(f"{path}: expected the population's per-token losses on the {num_targets} target(s), "
                     f"[K, Z, T] = {[num_targets] + list(pop_shape)} (those of the shadow run's population), "
                     f"got {shape}")
  return pop


def attack_scores_path(out_dir, attack, settings, scoring, defaults):
  """Where an attack's [K, N] target scores go: attack_scores_<attack>[_settings].npy, named by the scoring's
  reduction and balance_counts and the attack's settings that acted (`defaults`: the registry's) when not the
  defaults."""
  params = {"reduction": scoring.reduction, "balance_counts": scoring.balance_counts, **attack.params(settings)}
  return provenance.report_path(out_dir, f"attack_scores_{attack.name}", "npy", params,
                                {"reduction": None, "balance_counts": True, **defaults})


def attack_run(run_dir, target_path, out_dir, target_keep_path=None, scoring=None, *, variants=None,
               n_boot=metrics.N_BOOT, seed=0, progress=True, attacks=None, target_population_path=None, **fields):
  """Score target models' canary losses with Gaussians fitted on all shadows of run_dir; write and return reports.

  Writes attack_scores_<variant>[_settings].npy ([K, N] float64, higher = member) and attack[_settings].json; with
  the targets' membership also attack[_settings].md (the evaluate table) and attack_roc[_settings].png.
  attacks (attacks.shadow.Chosen: registered attacks that score targets, checked on this run) add their rows, every
  shadow a reference model; those that read the population need the targets' (target_population_path).
  Returns (text to print, result dict).
  """
  scoring = Scoring.of(scoring, **fields)
  requested, chosen_variants, dropped = loo_report.choose_variants(variants, scoring, scorer="targets")
  run = run_folder.load_run(run_dir, mmap=True)
  target_loss, target_keep = load_targets(target_path, target_keep_path, *run.loss_MxNxT.shape[1:])
  chosen = [] if attacks is None else attacks.attacks
  target_pop = None
  readers = [a.name for a in chosen if "population" in a.needs]
  if readers:
    if not target_population_path:
      raise InputError(f"{', '.join(readers)} on target models need(s) the population's per-token losses on the "
                       "targets: --target_population=POP.npy ([K, Z, T])")
    target_pop = load_target_population(target_population_path, target_loss.shape[0],
                                        attacks.run.population()[0].shape[1:])
  elif target_population_path:
    raise InputError("--target_population is read by the attacks that use a population, and none is in --attacks")
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  settings = loo_report.report_settings(requested, scoring, n_boot, seed)
  del settings["balance_counts"]  # every target is scored from all M shadows: nothing to balance
  start = time.perf_counter()
  scores, rows = {}, []
  for variant in chosen_variants:
    name, covariance, shared = variant
    scores[name] = targets.score_targets(run.loss_MxNxT, run.keep_MxN, target_loss, scoring.variant(covariance, shared),
                                         mask_NxT=run.mask_NxT, progress=progress)
    row = {"name": name, "covariance": covariance, "shared": shared}
    if target_keep is not None:
      row["summary"] = metrics.summarize(scores[name], target_keep, n_boot=n_boot, seed=seed)
    rows.append(row)
  for attack in chosen:
    name = attack.label(attacks.settings)
    scores[name] = attack.targets(attacks.run, target_loss, target_pop, attacks.settings)
    row = {"name": name, "attack": attack.name, "params": attack.params(attacks.settings)}
    if target_keep is not None:
      row["summary"] = metrics.summarize(scores[name], target_keep, n_boot=n_boot, seed=seed)
    rows.append(row)
  seconds = time.perf_counter() - start
  K = target_loss.shape[0]
  M, N, T = run.loss_MxNxT.shape
  setting = (f"{K} target model(s) scored with Gaussians from {M} shadow models, N={N} canaries, T={T} positions; "
             f"{loo_report.scoring_words(settings)}")
  paths = {}
  for variant in chosen_variants:
    score_settings = {k: settings[k] for k in loo_report.SCORE_SETTINGS if k in settings}
    paths[variant[0]] = provenance.report_path(out_dir, f"attack_scores_{scoring_lib.variant_key(variant)}", "npy",
                                               score_settings, loo_report.defaults())
    run_folder.save_npy(paths[variant[0]], scores[variant[0]])
  for attack in chosen:
    name = attack.label(attacks.settings)
    paths[name] = attack_scores_path(out_dir, attack, attacks.settings, scoring, attacks.defaults)
    run_folder.save_npy(paths[name], scores[name])
  # the report's names carry the attacks and their settings that acted, as evaluate's do
  named = {**settings, "attacks": [a.name for a in chosen] or None, **(attacks.acted if chosen else {})}
  named_defaults = {**loo_report.defaults(), "attacks": None, **(attacks.defaults if chosen else {})}
  for stem, ext in (("attack", "json"),) + ((("attack", "md"), ("attack_roc", "png")) if target_keep is not None
                                            else ()):
    paths[ext] = provenance.report_path(out_dir, stem, ext, named, named_defaults)
  notes = loo_report.dropped_notes(dropped)
  if target_keep is None:
    text = "\n".join([setting, "", _score_table(scores, {v[0] for v in chosen_variants})] + notes)
  else:
    table_rows = [(r["name"], r["summary"]) for r in rows]
    text = "\n".join([setting, "", tables.format_table(table_rows)] + notes)
    md_notes = "".join(f"\n{n}  " for n in notes)
    run_folder.save_text(paths["md"], f"# LiRA on target models\n\n{setting}\n\n{tables.format_markdown(table_rows)}\n"
                                  f"{md_notes}\n")
    curves = [plots.summary_curve(r["name"], r["summary"]) for r in rows]
    title = (f"shadow run {provenance.run_description(run_dir, run.config)}\nLiRA on {K} target model(s), {M} shadow "
             f"models, N={N}, T={T}\n{loo_report.scoring_words(settings)}"
             f"{', ' + attacks.words if chosen and attacks.words else ''}")
    styles = attacks.styles() if chosen else {}
    run_folder.save_figure(paths["png"], plots.roc_figure(curves, title=title, styles=styles or None))
  result = provenance.header("score_targets", run_dir, run,
                             {**settings, "variants": [scoring_lib.variant_key(v) for v in chosen_variants],
                              **({"attacks": [a.name for a in chosen], **attacks.acted} if chosen else {})}, "seqlira.attack")
  result.update({"target": os.path.abspath(target_path), "target_keep": target_keep_path and os.path.abspath(
      target_keep_path), "num_targets": K, "setting": setting, "dropped_variants": dropped, "seconds": seconds,
      "variants": [{**r, "scores_file": os.path.basename(paths[r["name"]])} for r in rows],
      "files": [os.path.basename(p) for p in paths.values()], **(attacks.population_record() if chosen else {})})
  run_folder.save_json(paths["json"], result)
  return text, result


def _score_table(scores, variant_names):
  """Without known membership: per row, the spread of the scores and, for the LiRA variants, how many favour
  membership."""
  lines = [f"{'variant':<24} {'min':>9} {'median':>9} {'max':>9} {'score > 0':>10}"]
  for name, llr_KxN in scores.items():
    q = np.quantile(llr_KxN, [0.0, 0.5, 1.0])
    above = f"{np.mean(llr_KxN > 0):.1%}" if name in variant_names else "-"
    lines.append(f"{name:<24} {q[0]:>9.3g} {q[1]:>9.3g} {q[2]:>9.3g} {above:>10}")
  lines.append("score > 0: the IN Gaussian is the likelier (online) or the target sits above the OUT mean (offline); "
               "the attacks' scores are on their own scales (RMIA's: fractions of the population in [0, 1]).")
  return "\n".join(lines)
