"""Reports of the pretraining-data attacks on a features folder: the table, results.json, results.md and roc.png.

Each attack gives one score per text (higher = member); its row is lira.metrics.summarize on those scores as a
[1, N] array: AUC and TPR at 1% and 5% FPR (largest TPR over every ROC point with fpr <= target, as for LiRA), with
95% percentile intervals from a bootstrap over texts. The official code reads TPR off sklearn's roc_curve with
drop_intermediate=True, at fpr < target (MIMIR's run.py, ReCaLL's and Con-ReCall's eval.py do_plot, EM-MIA's eval.py
evaluate, detect-pretrain-code's src/eval.py do_plot) or fpr <= target (Min-K%++'s run.py get_metrics);
docs/conventions.md says where that differs. An AUC below 0.5 is reported as is, never flipped. A setting picked by
its AUC on the evaluated texts (the best ReCaLL shot count, Con-ReCall's gamma when not given) is labelled "tuned on
the evaluated set" in its row's name and in `tuned`.

The blind baseline (attacks.blind) scores the same texts from their words alone; when its AUC interval excludes 0.5
and its AUC reaches the bootstrap interval of the best model-based row (or, without a bootstrap, that row's AUC), a
warning line gives both AUCs and intervals.

results.json (schema "seqlira.pretrain_attacks", docs/outputs.md): schema, command, argv, features_dir, shape
{N, T}, n_members, n_nonmembers, settings {attacks, requested_attacks, k, gamma, shots, folds, n_boot, seed,
level, fprs, tpr_rule}, skipped [{attack, reason}], rows [{name, attack, params, tuned, summary}], notes,
blind_warning, seconds, files, features (the folder's features.json).
"""

import os
import sys
import time

import numpy as np

from attacks import feature_folder
from attacks.catalogue import ATTACKS, TUNED
from lira import metrics
from lira.reports import plots
from lira.reports import provenance
import run_folder
from lira.errors import InputError
from lira.reports import tables

FPRS = (0.01, 0.05)
LEVEL = 0.95
DEFAULTS = {"attacks": None, **{s.name: s.default for s in ATTACKS.settings_for("texts")}, "n_boot": metrics.N_BOOT,
            "seed": 0}


def style(attack):
  """Colour and line style of an attack's ROC curve (its registry record's)."""
  return ATTACKS.attacks[attack].style


def check_k(k):
  """k is a fraction of each text's tokens: (0, 1]."""
  ATTACKS.settings["k"].check(k)


def choose_attacks(features, attacks=None):
  """(chosen records, skipped [{attack, reason}]): the named attacks, or every registered attack that scores texts
  and whose arrays the folder holds."""
  if attacks:
    return ATTACKS.chosen(attacks, "texts"), []
  chosen, skipped = [], []
  for name in ATTACKS.names("texts"):
    attack = ATTACKS.attacks[name]
    missing = features.available(attack)
    if missing:
      skipped.append({"attack": name, "reason": f"the folder has no {', '.join(missing)}"})
    else:
      chosen.append(attack)
  return chosen, skipped


def check_inputs(features, chosen, settings, skipped=None):
  """Every check before any attack runs: the settings, labels, and each chosen attack's arrays, shapes and own
  checks; returns (labels_N, {attack name: arrays}). With `skipped` (a list: the attacks were not named), an attack
  whose own check fails is left out and added to it with the reason, instead of stopping the others."""
  labels_N = features.known_labels()
  arrays = {attack.name: features.arrays_for(attack) for attack in chosen}
  shots = settings.get("shots")
  if shots is not None and any("shots" in a.uses for a in chosen):
    S = features["cond_lp_shots"].shape[0]
    if not 1 <= shots <= S:
      raise InputError(f"--shots={shots}: {features.path('cond_lp_shots')} holds 1 .. {S} shots")
  for attack in list(chosen):
    if attack.check_texts is not None:
      try:
        attack.check_texts(arrays[attack.name], labels_N, settings)
      except InputError as e:
        if skipped is None:
          raise
        skipped.append({"attack": attack.name, "reason": str(e)})
        chosen.remove(attack)
        del arrays[attack.name]
  return labels_N, arrays


def summarize_row(row, labels_N, n_boot, seed):
  """lira.metrics.summarize of one row's scores as [1, N] (bootstrap over texts); a non-finite score is named."""
  bad = np.flatnonzero(~np.isfinite(row["scores"]))
  if bad.size:
    raise InputError(f"{row['name']}: text {int(bad[0])} has a non-finite score {row['scores'][bad[0]]} "
                     f"({bad.size} such texts)")
  return metrics.summarize(row["scores"][None], labels_N[None], fprs=FPRS, n_boot=n_boot, level=LEVEL, seed=seed)


def blind_warning(rows):
  """The warning line when the blind baseline, which never looks at the model, separates members from non-members
  (its AUC interval excludes 0.5; without a bootstrap, its AUC is above 0.5) and reaches the best model-based row's
  interval (that row's AUC without one); None otherwise, or when either kind of row is missing. It says what the
  numbers show, not why."""
  baselines = {name for name, attack in ATTACKS.attacks.items() if attack.baseline}
  blind_rows = [r for r in rows if r["attack"] in baselines]
  others = [r for r in rows if r["attack"] not in baselines]
  if not blind_rows or not others:
    return None
  auc = blind_rows[0]["summary"]["auc"]
  b_low, b_high = blind_rows[0]["summary"].get("auc_ci") or (None, None)
  b_interval = b_low is not None and b_high is not None
  if (b_low <= 0.5 <= b_high) if b_interval else auc <= 0.5:
    return None
  best = max(others, key=lambda r: r["summary"]["auc"])
  best_auc = best["summary"]["auc"]
  low, high = best["summary"].get("auc_ci") or (None, None)
  interval = low is not None and high is not None
  low, high = (low, high) if interval else (best_auc, best_auc)
  if auc < low:
    return None
  own = (f"{auc:.4f} [{b_low:.4f}, {b_high:.4f}] (its {LEVEL:.0%} interval excludes 0.5)" if b_interval
         else f"{auc:.4f} (no bootstrap interval)")
  where = (f"{'above' if auc > high else 'within'} the {LEVEL:.0%} interval [{low:.4f}, {high:.4f}] of" if interval
           else "at or above the AUC of")
  how = ("better than the attacks do" if interval and auc > high or not interval and auc > best_auc
         else "about as well as the attacks do")
  return (f"WARNING: the blind baseline, a text classifier that never looks at the model, reaches AUC {own}, "
          f"{where} the best attack ({best['name']}, AUC {best_auc:.4f}): the texts alone separate these members "
          f"from these non-members {how}, so the attacks' numbers need not come from what the model memorised.")


def notes_for(rows, skipped):
  """The lines printed under the table (the blind-baseline warning first)."""
  warning = blind_warning(rows)
  notes = [warning] if warning else []
  notes.append("TPR at FPR <= target over every ROC point, as for LiRA (the official pretraining-attack codes read "
               "fewer points, most at fpr < target: docs/conventions.md); an AUC below 0.5 is shown as is, never "
               "flipped.")
  if any(r["tuned"] for r in rows):
    notes.append(f"'{TUNED}': the setting was picked by its AUC on the very texts it is evaluated on, so the row "
                 "is optimistic.")
  notes += [f"skipped {s['attack']}: {s['reason']}." for s in skipped]
  return notes


def run_attacks(features_dir, attacks=DEFAULTS["attacks"], k=DEFAULTS["k"], gamma=DEFAULTS["gamma"],
                shots=DEFAULTS["shots"], folds=DEFAULTS["folds"], n_boot=DEFAULTS["n_boot"], seed=DEFAULTS["seed"],
                out_dir=None, progress=False, skip_unfit=False, **more):
  """Run the attacks on a features folder, write the reports (named by their settings); returns (text, result).
  `seed` seeds the bootstrap and the blind baseline's folds; `more`: other registered settings (attacks.catalogue).
  Without `attacks` (or with skip_unfit), an attack whose own check fails on the folder is skipped with its reason."""
  unknown = sorted(set(more) - set(ATTACKS.settings))
  if unknown:
    raise InputError(f"unknown attack setting(s) {', '.join(unknown)}; the registry has {', '.join(ATTACKS.settings)}")
  values = {name: ATTACKS.settings[name].check(v)
            for name, v in {**ATTACKS.defaults(), **more, "k": k, "gamma": gamma, "shots": shots,
                            "folds": folds}.items()}
  values["seed"] = seed
  features = feature_folder.load_features(features_dir)
  chosen, skipped = choose_attacks(features, attacks)
  if not chosen:
    raise InputError(f"no attack can run on {features_dir}: " + "; ".join(f"{s['attack']}: {s['reason']}"
                                                                          for s in skipped))
  labels_N, arrays = check_inputs(features, chosen, values, skipped if skip_unfit or not attacks else None)
  if not chosen:
    raise InputError(f"no attack can run on {features_dir}: " + "; ".join(f"{s['attack']}: {s['reason']}"
                                                                          for s in skipped))
  out_dir = out_dir or features_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  start = time.perf_counter()
  from tqdm import tqdm
  rows = [r for attack in tqdm(chosen, desc="attacks", disable=not progress)
          for r in attack.texts(arrays[attack.name], labels_N, values)]
  for row in tqdm(rows, desc="bootstrap", disable=not progress):
    row["summary"] = summarize_row(row, labels_N, n_boot, seed)
  seconds = time.perf_counter() - start
  settings = {"attacks": list(attacks) if attacks else None, "k": float(k), "gamma": gamma, "shots": shots,
              "folds": int(folds), "n_boot": int(n_boot), "seed": int(seed),
              **{name: values[name] for name in more if name not in ("k", "gamma", "shots", "folds")}}
  paths = {ext: provenance.report_path(out_dir, stem, ext, settings, DEFAULTS)
           for stem, ext in (("results", "json"), ("results", "md"), ("roc", "png"))}
  n_pos = int(labels_N.sum())
  setting = (f"N={features.N} texts ({n_pos} members, {features.N - n_pos} non-members), T={features.T} positions; "
             f"{n_boot} bootstrap replicates over texts (seed {seed}, {LEVEL:.0%} percentile intervals)")
  notes = notes_for(rows, skipped)
  table_rows = [(r["name"], r["summary"]) for r in rows]
  result = {
      "schema": {"name": "seqlira.pretrain_attacks", "version": provenance.SCHEMA_VERSION, "doc": "docs/outputs.md"},
      "command": "pretrain_attacks", "argv": list(sys.argv), "features_dir": os.path.abspath(features_dir),
      "shape": {"N": features.N, "T": features.T}, "n_members": n_pos, "n_nonmembers": features.N - n_pos,
      "settings": {**settings, "attacks": [a.name for a in chosen], "requested_attacks": settings["attacks"], "level": LEVEL,
                   "fprs": list(FPRS), "tpr_rule": "fpr <= target"},
      "setting": setting, "skipped": skipped, "notes": notes, "blind_warning": blind_warning(rows),
      "seconds": seconds,
      "rows": [{k_: r[k_] for k_ in ("name", "attack", "params", "tuned", "summary")} for r in rows],
      "files": [os.path.basename(p) for p in paths.values()], "features": features.meta,
  }
  run_folder.save_json(paths["json"], result)
  md_notes = "".join(f"\n{n}  " for n in notes)
  md_table = tables.format_markdown(table_rows, fprs=FPRS, first="attack", unit="texts")
  run_folder.save_text(paths["md"], f"# Pretraining-data attacks\n\n{os.path.abspath(features_dir)}\n\n{setting}\n\n"
                                    f"{md_table}\n{md_notes}\n")
  plotted = [r for r in rows if r["plotted"]]
  curves = [plots.summary_curve(r["name"], r["summary"]) for r in plotted]
  fig = plots.roc_figure(curves, title=f"Pretraining-data attacks, {setting.split(';')[0]}",
                         styles={r["name"]: style(r["attack"]) for r in plotted}, legend_fpr=FPRS[0])
  run_folder.save_figure(paths["png"], fig)
  text = "\n".join([setting, "", tables.format_table(table_rows, fprs=FPRS, first='attack', unit='texts')] + notes)
  return text, result
