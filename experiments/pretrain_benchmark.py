"""The offline pretraining-data MIA benchmark: nothing downloaded, runs on a fresh clone.

python -m experiments.pretrain_benchmark [--config=experiments/configs/pretrain_benchmark.py:cpu] --out_dir=DIR
Stages, each skipped when its files are already in DIR (a killed run resumes): splits, tokenizer and JSONL text sets;
the target GPT-NeoX with checkpoints after epochs 1, 2, 4, 8 and the reference model; a features folder and the
attack table for each checkpoint and for the DISTRIBUTION-SHIFT split; then one summary (rows = attacks, columns =
AUC per epoch plus the shift split, each with its bootstrap interval over texts, under the settings) printed and
written as summary.json, summary.md and auc_vs_epochs.png (attacks/benchmark_plots.py).
"""

import os
import time

from absl import app
from absl import flags
from absl import logging

from attacks import benchmark_plots
from attacks import report as attack_report
from attacks.catalogue import ATTACKS
from experiments import cli
from lira.reports import provenance
import run_folder
from training import data as data_lib
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
    names = [n for n in ATTACKS.names("texts") if not folder.available(ATTACKS.attacks[n])
             and not (n == "recall_shots" and cfg.features.prefix_shots <= 1)]
  table, result = report.run_attacks(features_dir, attacks=names, skip_unfit=a.names is None, k=a.k, gamma=a.gamma,
                                     folds=a.folds, n_boot=a.n_boot, seed=cfg.seed, out_dir=features_dir)
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


def summary_table(cols, aucs, tuned=None, intervals=None):
  """Markdown table: rows = attacks (first-seen order), columns = `cols`; '-' where a column lacks the attack;
  the 95% bootstrap interval, if any, in square brackets, and a tuned value in round ones after the AUC."""
  tuned, intervals = tuned or {}, intervals or {}
  names = list(dict.fromkeys(n for col in aucs.values() for n in col))

  def cell(c, n):
    if n not in aucs.get(c, {}):
      return "-"
    ci = benchmark_plots.interval(intervals.get(c, {}).get(n))
    return (f"{aucs[c][n]:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
            + (f" ({tuned[c][n]})" if n in tuned.get(c, {}) else ""))

  lines = ["| attack | " + " | ".join(cols.values()) + " |", "|---" * (len(cols) + 1) + "|"]
  lines += [f"| {n} | " + " | ".join(cell(c, n) for c in cols) + " |" for n in names]
  return "\n".join(lines)


def setting_lines(cfg, sets, vocab, evaluated):
  """The benchmark's settings in words, for the figure's title and summary.md: model, data sizes, epochs, seed,
  bootstrap; evaluated: {column: (members, non-members) scored}."""
  a, d, arch = cfg.attacks, cfg.data, cfg.model.arch
  n_pos, n_neg = (min(counts[i] for counts in evaluated.values()) for i in (0, 1))
  scored = (f"{n_pos} members vs {n_neg} non-members" if len(set(evaluated.values())) == 1
            else f"at least {n_pos} members and {n_neg} non-members")
  boot = (f"95% bootstrap intervals over texts ({a.n_boot} replicates, seed {cfg.seed})" if a.n_boot
          else "no intervals (attacks.n_boot=0)")
  layers = f"{arch.num_hidden_layers} layer{'s' if arch.num_hidden_layers != 1 else ''}"
  return [f"GPT-NeoX ({layers}, hidden {arch.hidden_size}, vocabulary {vocab:,}) pretrained "
          f"from scratch, seed {cfg.seed}",
          f"target: {len(sets['target_corpus']):,} chitchat conversations in {d.seq_len}-token sequences, checkpoints "
          f"after epochs {', '.join(map(str, cfg.pretrain.checkpoint_epochs))}",
          f"reference model: {len(sets['reference_corpus']):,} other conversations, {cfg.reference.epochs} epochs; "
          f"{scored} evaluated per column",
          boot]


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
  tok_path, ref = os.path.join(out, run_folder.names.TOKENIZER), offline_benchmark.reference_checkpoint(cfg, out)
  jobs = {f"epoch_{e}": ("main", e) for e in cfg.pretrain.checkpoint_epochs}
  jobs[SHIFT] = (SHIFT, cfg.shift_epoch)
  aucs, intervals, evaluated, styles, tables, tuned, warnings = {}, {}, {}, {}, {}, {}, {}
  blind_ran = False
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
    blind_ran = blind_ran or any(ATTACKS.attacks[r["attack"]].baseline for r in rows)
    if result.get("blind_warning"):
      warnings[col] = result["blind_warning"]
    keys = [row_key(r) for r in rows]
    aucs[col] = {name: float(_auc(r)) for (name, _), r in zip(keys, rows)}
    intervals[col] = {name: r["summary"].get("auc_ci") for (name, _), r in zip(keys, rows)}
    evaluated[col] = (rows[0]["summary"]["n_pos"], rows[0]["summary"]["n_neg"])
    styles.update({name: attack_report.style(r["attack"]) for (name, _), r in zip(keys, rows)})
    tuned[col] = {name: value for name, value in keys if value}
    if FLAGS.progress:
      print(f"{col}: features {seconds[f'features_{col}']:.1f} s, attacks {seconds[f'attacks_{col}']:.1f} s")
  cols = column_names(cfg)
  table = summary_table(cols, aucs, tuned, intervals)
  setting = setting_lines(cfg, sets, data_lib.vocab_size(tokenizer), evaluated)
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
  run_folder.save_text(os.path.join(out, "summary.md"), "  \n".join(setting) + f"\n\n{table}\n\n{note}\n")
  run_folder.save_json(os.path.join(out, "summary.json"), {"columns": cols, "setting": setting, "auc": aucs,
                                                           "auc_ci": intervals, "seconds": seconds, "note": note,
                                                           "shift_epoch": cfg.shift_epoch, "tuned": tuned,
                                                           "blind_warning": warnings})
  title = "\n".join(["Offline chitchat benchmark: AUC of each attack against pretraining epochs"] + setting)
  run_folder.save_figure(os.path.join(out, "auc_vs_epochs.png"), benchmark_plots.auc_figure(
      aucs, intervals, list(cfg.pretrain.checkpoint_epochs), cfg.shift_epoch, title, styles, shift=SHIFT))
  print("\n".join(setting) + "\n\n" + table + "\n\n" + note)
  print("\nseconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
  print(provenance.wrote([os.path.join(out, n) for n in ("summary.md", "summary.json", "auc_vs_epochs.png")]))


if __name__ == "__main__":
  cli.run(main, resumes=True)
