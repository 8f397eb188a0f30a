"""The offline pretraining-data MIA benchmark: nothing downloaded, runs on a fresh clone.

python -m experiments.pretrain_benchmark [--config=experiments/configs/pretrain_benchmark.py:cpu] --out_dir=DIR
Stages, each skipped when its files are already in DIR (a killed run resumes): splits, tokenizer and JSONL text sets;
the target GPT-NeoX with checkpoints after epochs 1, 2, 4, 8 and the reference model; a features folder and the
attack table for each checkpoint and for the DISTRIBUTION-SHIFT split; then one summary (rows = attacks, columns =
AUC per epoch plus the shift split) printed and written as summary.json, summary.md and auc_vs_epochs.png.
"""

import os
import time

import numpy as np
from absl import app
from absl import flags
from absl import logging

from experiments import cli
from lira.reports import provenance
from lira.reports import run_folder
from training.pretraining import offline_benchmark
from training import run_config

FLAGS = flags.FLAGS
cli.define_config_file("config", os.path.join(os.path.dirname(__file__), "configs", "pretrain_benchmark.py"),
                       "Benchmark config (experiments/configs/pretrain_benchmark.py:cpu or :tiny).")
flags.DEFINE_string("out_dir", None, "Benchmark folder: data, models, features, reports.")
flags.DEFINE_bool("progress", True, "Show progress bars.")

SHIFT = "shift"


def column_names(cfg):
  """{column key: header}: one per checkpoint epoch, then the shift split (labelled as such everywhere)."""
  cols = {f"epoch_{e}": f"epoch {e}" for e in cfg.pretrain.checkpoint_epochs}
  cols[SHIFT] = f"SHIFTED split (epoch {cfg.shift_epoch}; stdlib docstrings as non-members)"
  return cols


# ---- the features folder and the attack table of one column -------------------------------------------------------

def build_features(cfg, features_dir, model_path, texts, labels, tokenizer_path, reference_model):
  """A features folder for `texts` under `model_path` (its finished stages are kept: a killed build resumes)."""
  from training.pretraining import feature_extraction
  from training.pretraining import neighbours
  f = cfg.features
  nbrs = method = None
  if f.neighbours:  # the offline fallback: nothing downloaded (README, "Which neighbours a table used")
    nbrs = neighbours.offline_neighbours(texts, f.neighbours, seed=cfg.seed)
    method = neighbours.OFFLINE
  return feature_extraction.build_features(features_dir, model_path, texts, labels, tokenizer=tokenizer_path,
                                 max_length=f.max_length, batch_size=f.batch_size, prefix_shots=f.prefix_shots,
                                 ensemble=f.ensemble, pairs=f.pairs, reference_model=reference_model,
                                 neighbours=nbrs, neighbour_method=method, seed=cfg.seed, progress=FLAGS.progress)


def evaluate(cfg, features_dir):
  """(table text, result of attacks.report.run_attacks) of the configured attacks on a features folder."""
  from attacks import feature_folder
  from attacks import report
  a = cfg.attacks
  names = a.names
  if names is None:  # every attack the folder supports; with one shot the shot sweep is ReCaLL's row again
    folder = feature_folder.load_features(features_dir)
    names = [n for n in feature_folder.ATTACKS if not folder.available(n)
             and not (n == "recall_shots" and cfg.features.prefix_shots <= 1)]
  table, result = report.run_attacks(features_dir, attacks=names, k=a.k, gamma=a.gamma, folds=a.folds,
                                     n_boot=a.n_boot, seed=cfg.seed, out_dir=features_dir)
  return table, result


# ---- summary -------------------------------------------------------------------------------------------------------

def _auc(row):
  return row["auc"] if "auc" in row else row["summary"]["auc"]


def row_key(row):
  """One summary row per attack across columns: a hyper-parameter tuned on each column's texts (Con-ReCall's gamma)
  is named in the row label, and its value goes into the cell (`tuned`)."""
  if row.get("tuned") and row["attack"] == "con_recall":
    return "Con-ReCall (gamma tuned on the evaluated set)", f"gamma={row['params']['gamma']:g}"
  return row["name"], None


def summary_table(cols, aucs, tuned=None):
  """Markdown table: rows = attacks (first-seen order), columns = `cols`; '-' where a column lacks the attack;
  a tuned value, if any, in brackets after the AUC."""
  tuned = tuned or {}
  names = list(dict.fromkeys(n for col in aucs.values() for n in col))
  lines = ["| attack | " + " | ".join(cols.values()) + " |", "|---" * (len(cols) + 1) + "|"]
  for n in names:
    cells = [(f"{aucs[c][n]:.3f}" + (f" ({tuned[c][n]})" if n in tuned.get(c, {}) else "")) if n in aucs.get(c, {})
             else "-" for c in cols]
    lines.append(f"| {n} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot(path, cfg, aucs):
  """AUC against epochs (log2 axis), one line per attack; the shift split's AUC as a marker at its epoch."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  epochs = list(cfg.pretrain.checkpoint_epochs)
  fig, ax = plt.subplots(figsize=(7, 4.5))
  lowest = min([v for col in aucs.values() for v in col.values()], default=0.5)
  for i, name in enumerate(aucs[f"epoch_{epochs[0]}"]):
    color = f"C{i % 10}"
    line = "o:" if name.startswith("Blind") else "o-"  # the blind baseline never looks at the model
    ax.plot(epochs, [aucs[f"epoch_{e}"].get(name, np.nan) for e in epochs], line, color=color, label=name)
    if name in aucs.get(SHIFT, {}):
      # Drawn a little left of its epoch, so it does not hide that epoch's point.
      ax.plot([cfg.shift_epoch * 0.92], [aucs[SHIFT][name]], "x", color=color, markersize=9, mew=2)
  ax.plot([], [], "kx", mew=2, label=f"SHIFTED split (epoch {cfg.shift_epoch})")
  ax.axhline(0.5, color="grey", lw=0.8, ls=":")
  ax.set_xscale("log", base=2)
  ax.set_xticks(epochs, [str(e) for e in epochs])
  ax.set(xlabel="pretraining epochs", ylabel="AUC (members vs non-members)", ylim=(min(0.3, lowest - 0.05), 1.02),
         title="Offline chitchat benchmark: AUC per attack against epochs")
  ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
  run_folder.save_figure(path, fig)
  plt.close(fig)


def main(argv):
  del argv
  if not FLAGS["verbosity"].present:  # jax's INFO lines (its TPU probe on every run) are noise here; -v 0 shows them
    logging.set_verbosity(logging.WARNING)
  if not FLAGS.out_dir:
    raise app.UsageError("--out_dir is required")
  cfg, out = FLAGS.config, FLAGS.out_dir
  run_folder.check_writable(out)
  run_config.check_config(cfg, out)
  seconds = {}
  t0 = time.perf_counter()
  sets, tokenizer = offline_benchmark.prepare_data(cfg, out, progress=FLAGS.progress)
  seconds["data"] = time.perf_counter() - t0
  seconds.update({f"pretrain_{k}": v for k, v in
                  offline_benchmark.pretrain_models(cfg, out, sets, tokenizer, progress=FLAGS.progress).items()})
  tok_path, ref = os.path.join(out, "tokenizer.json"), offline_benchmark.reference_checkpoint(cfg, out)
  jobs = {f"epoch_{e}": ("main", e) for e in cfg.pretrain.checkpoint_epochs}
  jobs[SHIFT] = (SHIFT, cfg.shift_epoch)
  aucs, tables, tuned, warnings, blind_ran = {}, {}, {}, {}, False
  for col, (split, epoch) in jobs.items():
    texts, labels = offline_benchmark.read_jsonl(os.path.join(out, offline_benchmark.SPLIT_FILES[split]))
    t0 = time.perf_counter()
    folder = build_features(cfg, os.path.join(out, "features", col), offline_benchmark.target_checkpoint(out, epoch),
                            texts, labels, tok_path, ref)
    seconds[f"features_{col}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tables[col], result = evaluate(cfg, folder)
    seconds[f"attacks_{col}"] = time.perf_counter() - t0
    rows = result["rows"]
    blind_ran = blind_ran or any(r["attack"] == "blind" for r in rows)
    if result.get("blind_warning"):
      warnings[col] = result["blind_warning"]
    keys = [row_key(r) for r in rows]
    aucs[col] = {name: float(_auc(r)) for (name, _), r in zip(keys, rows)}
    tuned[col] = {name: value for name, value in keys if value}
    if FLAGS.progress:
      print(f"{col}: features {seconds[f'features_{col}']:.1f} s, attacks {seconds[f'attacks_{col}']:.1f} s")
  cols = column_names(cfg)
  table = summary_table(cols, aucs, tuned)
  note = (f"AUC of each attack; members: {len(sets['members'])} training conversations, non-members: "
          f"{len(sets['nonmembers'])} held-out conversations of the same corpus. The last column is a DISTRIBUTION-"
          "SHIFT split (same members; non-members are Python standard-library docstrings): a high AUC there shows "
          "the shift, not membership (MIMIR's pitfall, Duan et al. 2024).")
  f = cfg.features
  if f.prefix_shots:
    note += (f" ReCaLL / Con-ReCall: {f.prefix_shots} non-member and {f.prefix_shots} member text(s) per column are "
             "the prefixes and leave the evaluated set.")
  if f.neighbours:
    note += (f" Neighbourhood: {f.neighbours} offline-unigram neighbours per text (words swapped for words drawn "
             "from the texts' own frequencies; weaker than a masked LM's neighbours).")
  if blind_ran:
    note += (" Blind: a text classifier that never looks at the model (bag of n-grams, cross-validated); "
             + (f"it reaches the best attack's AUC interval in: {', '.join(cols[c] for c in warnings)}, where the "
                "split is distribution-shifted." if warnings else "it stays below the best attack's AUC interval in "
                "every column."))
  run_folder.save_text(os.path.join(out, "summary.md"), f"{table}\n\n{note}\n")
  run_folder.save_json(os.path.join(out, "summary.json"), {"columns": cols, "auc": aucs, "seconds": seconds,
                                                           "note": note, "shift_epoch": cfg.shift_epoch, "tuned": tuned,
                                                           "blind_warning": warnings})
  plot(os.path.join(out, "auc_vs_epochs.png"), cfg, aucs)
  print(table + "\n\n" + note)
  print("\nseconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
  print(provenance.wrote([os.path.join(out, n) for n in ("summary.md", "summary.json", "auc_vs_epochs.png")]))


if __name__ == "__main__":
  cli.run(main, resumes=True)
