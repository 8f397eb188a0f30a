"""Reports of the pretraining-data attacks on a features folder: the table, results.json, results.md and roc.png.

Each attack gives one score per text (higher = member); its row is lira.metrics.summarize on those scores as a
[1, N] array: AUC and TPR at 1% and 5% FPR (largest TPR over every ROC point with fpr <= target, as for LiRA), with
95% percentile intervals from a bootstrap over texts. The official code reads TPR off sklearn's roc_curve with
drop_intermediate=True, at fpr < target (MIMIR's run.py, ReCaLL's and Con-ReCall's eval.py do_plot, EM-MIA's eval.py
evaluate, detect-pretrain-code's src/eval.py do_plot) or fpr <= target (Min-K%++'s run.py get_metrics);
docs/conventions.md says where that differs. An AUC below 0.5 is reported as is, never flipped. A setting picked by
its AUC on the evaluated texts (the best ReCaLL shot count, Con-ReCall's gamma when not given) is labelled "tuned on
the evaluated set" in its row's name and in `tuned`.

The blind baseline (attacks.blind) scores the same texts from their words alone; when its AUC reaches the bootstrap
interval of the best model-based row (or, without a bootstrap, that row's AUC), a warning line says the split is
distribution-shifted.

results.json (schema "seqlira.pretrain_attacks", docs/outputs.md): schema, command, argv, features_dir, shape
{N, T}, n_members, n_nonmembers, settings {attacks, requested_attacks, k, gamma, shots, folds, n_boot, seed,
level, fprs, tpr_rule}, skipped [{attack, reason}], rows [{name, attack, params, tuned, summary}], notes,
blind_warning, seconds, files, features (the folder's features.json).
"""

import os
import sys
import time

import numpy as np

import attacks as A
from attacks import blind
from attacks import feature_folder
from attacks.min_k import DEFAULT_K
from lira import metrics
from lira.reports import plots
from lira.reports import provenance
from lira.reports import run_folder
from lira.errors import InputError
from lira.reports import tables

FPRS = (0.01, 0.05)
LEVEL = 0.95
# Con-ReCall's sweep: the official grid (run.py of Wang et al. 2024's code), which has no 0.4.
GAMMAS = (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
TUNED = "tuned on the evaluated set"
DEFAULTS = {"attacks": None, "k": DEFAULT_K, "gamma": None, "shots": None, "folds": blind.DEFAULT_FOLDS,
            "n_boot": metrics.N_BOOT, "seed": 0}
NAMES = {"loss": "Loss", "zlib": "Zlib", "min_k": "Min-K%", "min_k_pp": "Min-K%++", "reference": "Reference",
         "neighbourhood": "Neighbourhood", "recall": "ReCaLL", "recall_ensemble": "ReCaLL ensemble",
         "recall_shots": "ReCaLL", "con_recall": "Con-ReCall", "em_mia": "EM-MIA", "blind": "Blind"}
# One colour per attack, dash-dotted, in colours the LiRA variants (blue, orange, green) do not use; the blind
# baseline, which never looks at the model, dotted.
COLORS = {"loss": "tab:red", "zlib": "tab:purple", "min_k": "tab:brown", "min_k_pp": "tab:pink",
          "reference": "tab:gray", "neighbourhood": "tab:olive", "recall": "tab:cyan", "recall_shots": "darkcyan",
          "recall_ensemble": "navy", "con_recall": "goldenrod", "em_mia": "black", "blind": "magenta"}


def style(attack):
  """Colour and line style of an attack's ROC curve."""
  return {"color": COLORS.get(attack, "black"), "ls": ":" if attack == "blind" else "-."}


def check_k(k):
  """k is a fraction of each text's tokens: (0, 1]."""
  if not 0.0 < float(k) <= 1.0:
    raise InputError(f"--k must lie in (0, 1] (a fraction of each text's tokens), got {k}")


def choose_attacks(features, attacks=None):
  """(chosen, skipped [{attack, reason}]): the named attacks, or every attack whose arrays the folder holds."""
  if attacks:
    unknown = [a for a in attacks if a not in feature_folder.NEEDS]
    if unknown:
      raise InputError(f"unknown attack(s) {', '.join(unknown)}; choose from {', '.join(feature_folder.ATTACKS)}")
    return list(dict.fromkeys(attacks)), []
  chosen, skipped = [], []
  for attack in feature_folder.ATTACKS:
    missing = features.available(attack)
    if missing:
      skipped.append({"attack": attack, "reason": f"the folder has no {', '.join(missing)}"})
    else:
      chosen.append(attack)
  return chosen, skipped


def check_inputs(features, chosen, k, gamma, shots, folds=DEFAULTS["folds"]):
  """Every check before any attack runs: k, gamma, shots, folds, labels, and each chosen attack's arrays and
  shapes."""
  check_k(k)
  if gamma is not None and not np.isfinite(gamma):
    raise InputError(f"--gamma must be a finite number, got {gamma}")
  labels_N = features.known_labels()
  arrays = {attack: features.arrays_for(attack) for attack in chosen}
  if shots is not None and any(a in chosen for a in ("recall", "recall_shots")):
    S = features["cond_lp_shots"].shape[0]
    if not 1 <= shots <= S:
      raise InputError(f"--shots={shots}: {features.path('cond_lp_shots')} holds 1 .. {S} shots")
  if "blind" in chosen:
    blind.check_inputs(arrays["blind"]["texts"], labels_N, folds)
  return labels_N, arrays


def _row(attack, name, scores_N, params=None, tuned=False, plotted=True):
  return {"name": name, "attack": attack, "params": params or {}, "tuned": tuned, "plotted": plotted,
          "scores": np.asarray(scores_N, dtype=np.float64)}


def _best(candidates, labels_N):
  """(index, AUCs) of the candidate scores with the highest AUC on the evaluated texts (first on ties)."""
  aucs = [metrics.auc(s, labels_N) for s in candidates]
  return int(np.argmax(aucs)), aucs


def attack_rows(attack, arrays, labels_N, k=DEFAULTS["k"], gamma=None, shots=None, folds=DEFAULTS["folds"],
                seed=DEFAULTS["seed"]):
  """The rows (name, attack, params, tuned, plotted, scores [N]) one attack gives; several for recall_shots. `folds`
  and `seed` are the blind baseline's cross-validation."""
  a = arrays
  if attack == "loss":
    return [_row(attack, "Loss", A.loss(a["lp"]))]
  if attack == "zlib":
    return [_row(attack, "Zlib", A.zlib(a["lp"], a["texts"]))]
  if attack == "min_k":
    return [_row(attack, f"Min-K% (k={k:g})", A.min_k(a["lp"], k), {"k": k})]
  if attack == "min_k_pp":
    return [_row(attack, f"Min-K%++ (k={k:g})", A.min_k_pp(a["lp"], a["mu"], a["sigma"], k), {"k": k})]
  if attack == "reference":
    return [_row(attack, "Reference", A.reference(a["lp"], a["ref_lp"]))]
  if attack == "neighbourhood":
    return [_row(attack, "Neighbourhood", A.neighbourhood(a["lp"], a["neighbour_lp"]),
                 {"neighbours": int(a["neighbour_lp"].shape[1])})]
  if attack == "recall":
    S = a["cond_lp_shots"].shape[0]
    s = shots or S
    return [_row(attack, f"ReCaLL ({s} shot{'s' * (s > 1)})", A.recall(a["lp"], a["cond_lp_shots"][s - 1]),
                 {"shots": s})]
  if attack == "recall_shots":
    scores_SxN = A.recall_shots(a["lp"], a["cond_lp_shots"])
    S = len(scores_SxN)
    rows = [_row(attack, f"ReCaLL, {s + 1} shot{'s' * (s > 0)}", scores_SxN[s], {"shots": s + 1}, plotted=S == 1)
            for s in range(S)]
    if S > 1:
      best, aucs = _best(scores_SxN, labels_N)
      rows.append(_row(attack, f"ReCaLL, best of 1..{S} shots ({best + 1}; {TUNED})", scores_SxN[best],
                       {"shots": best + 1, "auc_by_shots": {str(s + 1): v for s, v in enumerate(aucs)}}, tuned=True))
    return rows
  if attack == "recall_ensemble":
    return [_row(attack, f"ReCaLL ensemble ({a['cond_lp_ensemble'].shape[0]} prefixes)",
                 A.recall_ensemble(a["lp"], a["cond_lp_ensemble"]), {"prefixes": int(a["cond_lp_ensemble"].shape[0])})]
  if attack == "con_recall":
    nonmember, member = a["cond_lp_shots"][-1], a["cond_lp_member"]  # every non-member shot, as the member prefix
    S = int(a["cond_lp_shots"].shape[0])
    if gamma is not None:
      return [_row(attack, f"Con-ReCall (gamma={gamma:g})", A.con_recall(a["lp"], nonmember, member, gamma),
                   {"gamma": gamma, "shots": S})]
    candidates = [A.con_recall(a["lp"], nonmember, member, g) for g in GAMMAS]
    best, aucs = _best(candidates, labels_N)
    return [_row(attack, f"Con-ReCall (gamma={GAMMAS[best]:g}; {TUNED})", candidates[best],
                 {"gamma": GAMMAS[best], "shots": S, "auc_by_gamma": dict(zip((f"{g:g}" for g in GAMMAS), aucs))},
                 tuned=True)]
  if attack == "em_mia":
    init_N = A.min_k_pp(a["lp"], a["mu"], a["sigma"], k)
    membership_N, _ = A.em_mia(a["pair_lp"], a["lp"], init_N)
    return [_row(attack, f"EM-MIA (init Min-K%++ k={k:g})", membership_N, {"init": "min_k_pp", "k": k,
                                                                        "iterations": 10})]
  if attack == "blind":
    scores_N, _ = blind.blind(a["texts"], labels_N, folds, seed)
    return [_row(attack, f"Blind (text n-grams, no model; {folds}-fold)", scores_N,
                 {"folds": int(folds), "seed": int(seed), "features": "tf-idf of word 1-2-grams and char 2-4-grams",
                  "classifier": "logistic regression, out-of-fold decision function"})]
  raise InputError(f"unknown attack {attack!r}; choose from {', '.join(feature_folder.ATTACKS)}")


def summarize_row(row, labels_N, n_boot, seed):
  """lira.metrics.summarize of one row's scores as [1, N] (bootstrap over texts); a non-finite score is named."""
  bad = np.flatnonzero(~np.isfinite(row["scores"]))
  if bad.size:
    raise InputError(f"{row['name']}: text {int(bad[0])} has a non-finite score {row['scores'][bad[0]]} "
                     f"({bad.size} such texts)")
  return metrics.summarize(row["scores"][None], labels_N[None], fprs=FPRS, n_boot=n_boot, level=LEVEL, seed=seed)


def blind_warning(rows):
  """The warning line when the blind row's AUC reaches the bootstrap interval of the best model-based row (that row's
  AUC when there is no interval) or lies above it; None otherwise, or when either kind of row is missing."""
  blind_rows = [r for r in rows if r["attack"] == "blind"]
  others = [r for r in rows if r["attack"] != "blind"]
  if not blind_rows or not others:
    return None
  auc = blind_rows[0]["summary"]["auc"]
  best = max(others, key=lambda r: r["summary"]["auc"])
  best_auc = best["summary"]["auc"]
  low, high = best["summary"].get("auc_ci") or (None, None)
  interval = low is not None and high is not None
  low, high = (low, high) if interval else (best_auc, best_auc)
  if auc < low:
    return None
  where = (f"{'above' if auc > high else 'within'} the {LEVEL:.0%} interval [{low:.4f}, {high:.4f}] of" if interval
           else "at or above the AUC of")
  return (f"WARNING: the blind baseline, which never looks at the model, reaches AUC {auc:.4f}, {where} the best "
          f"attack ({best['name']}, AUC {best_auc:.4f}): members and non-members differ in distribution, so the "
          "attacks' numbers say little about what the model memorised.")


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
                out_dir=None, progress=False):
  """Run the attacks on a features folder, write the reports (named by their settings); returns (text, result).
  `seed` seeds the bootstrap and the blind baseline's folds."""
  check_k(k)
  features = feature_folder.load_features(features_dir)
  chosen, skipped = choose_attacks(features, attacks)
  if not chosen:
    raise InputError(f"no attack can run on {features_dir}: " + "; ".join(f"{s['attack']}: {s['reason']}"
                                                                          for s in skipped))
  labels_N, arrays = check_inputs(features, chosen, k, gamma, shots, folds)
  out_dir = out_dir or features_dir
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  start = time.perf_counter()
  from tqdm import tqdm
  rows = [r for attack in tqdm(chosen, desc="attacks", disable=not progress)
          for r in attack_rows(attack, arrays[attack], labels_N, k, gamma, shots, folds, seed)]
  for row in tqdm(rows, desc="bootstrap", disable=not progress):
    row["summary"] = summarize_row(row, labels_N, n_boot, seed)
  seconds = time.perf_counter() - start
  settings = {"attacks": list(attacks) if attacks else None, "k": float(k), "gamma": gamma, "shots": shots,
              "folds": int(folds), "n_boot": int(n_boot), "seed": int(seed)}
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
      "settings": {**settings, "attacks": chosen, "requested_attacks": settings["attacks"], "level": LEVEL,
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
