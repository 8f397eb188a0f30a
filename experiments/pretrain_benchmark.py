"""The offline pretraining-data MIA benchmark (issue 11, item 4): nothing downloaded, runs on a fresh clone.

python -m experiments.pretrain_benchmark [--config=experiments/configs/pretrain_benchmark.py:cpu] --out_dir=DIR
Stages, each skipped when its files are already in DIR (a killed run resumes): splits, tokenizer and JSONL text sets;
the target GPT-NeoX with checkpoints after epochs 1, 2, 4, 8 and the reference model; a features folder and the
attack table for each checkpoint and for the DISTRIBUTION-SHIFT split; then one summary (rows = attacks, columns =
AUC per epoch plus the shift split) printed and written as summary.json, summary.md and auc_vs_epochs.png.
"""

import json
import os
import time

import numpy as np
from absl import app
from absl import flags
from ml_collections import config_flags

from experiments import cli
from lira import provenance
from lira import rundir
from training import mia_benchmark
from training import pipeline

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", os.path.join(os.path.dirname(__file__), "configs", "pretrain_benchmark.py"),
                                "Benchmark config (experiments/configs/pretrain_benchmark.py:cpu or :tiny).")
flags.DEFINE_string("out_dir", None, "Benchmark folder: data, models, features, reports.")
flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.DEFINE_bool("fallback_features", False, "TEMPORARY (until training.features and attacks.report are wired): "
                  "lp / mu / sigma / ref_lp only, and Loss, Zlib, Min-K%, Min-K%++, Reference computed here.")

SHIFT = "shift"


def column_names(cfg):
  """{column key: header}: one per checkpoint epoch, then the shift split (labelled as such everywhere)."""
  cols = {f"epoch_{e}": f"epoch {e}" for e in cfg.pretrain.checkpoint_epochs}
  cols[SHIFT] = f"SHIFTED split (epoch {cfg.shift_epoch}; stdlib docstrings as non-members)"
  return cols


# ---- the two calls into the features builder and the attack report -----------------------------------------------
# WIRING POINT: training.features.build_features and attacks.report.evaluate_features (or run_attacks) are written by
# other helpers; until they are in this tree (or with --fallback_features), _fallback_features / _fallback_attacks
# stand in (lp, mu, sigma, ref_lp only; Loss, Zlib, Min-K%, Min-K%++, Reference).

def build_features(cfg, features_dir, model_path, texts, labels, tokenizer_path, reference_model):
  """A features folder for `texts` under `model_path` (skipped when its features.json exists)."""
  if os.path.exists(os.path.join(features_dir, "features.json")):
    return features_dir
  f = cfg.features
  try:
    from training.features import build_features as build
  except ImportError:
    build = None
  if build is None or FLAGS.fallback_features:
    return _fallback_features(features_dir, model_path, texts, labels, tokenizer_path, reference_model, f)
  return build(features_dir, model_path, texts, labels, tokenizer=tokenizer_path, max_length=f.max_length,
               batch_size=f.batch_size, prefix_shots=f.prefix_shots, pairs=f.pairs, reference_model=reference_model,
               neighbours=None, seed=cfg.seed, progress=FLAGS.progress)


def evaluate(cfg, features_dir):
  """(table text, rows [{"name", "auc", ...}]) of every attack the features folder supports."""
  a = cfg.attacks
  try:
    from attacks import report
  except ImportError:
    report = None
  evaluate_features = getattr(report, "evaluate_features", None) or getattr(report, "run_attacks", None)
  if evaluate_features is None or FLAGS.fallback_features:
    return _fallback_attacks(features_dir, a.k, a.n_boot, cfg.seed)
  table, result = evaluate_features(features_dir, attacks=a.names, k=a.k, n_boot=a.n_boot, seed=cfg.seed,
                                    out_dir=features_dir)
  return table, result["rows"]


def _fallback_features(features_dir, model_path, texts, labels, tokenizer_path, reference_model, f):
  from models import hf_convert
  from training import data as data_lib
  from training import extract
  ids_NxT, mask_NxT = extract.encode_batch(data_lib.load_tokenizer(tokenizer_path), texts, f.max_length)
  lp, mu, sigma = extract.causal_lm_statistics(hf_convert.from_pretrained(model_path), ids_NxT, mask_NxT, f.batch_size)
  ref_lp = extract.causal_lm_statistics(hf_convert.from_pretrained(reference_model), ids_NxT, mask_NxT,
                                        f.batch_size)[0]
  arrays = dict(labels=np.asarray(labels, np.int8), ids=ids_NxT, mask=mask_NxT, lp=lp, mu=mu, sigma=sigma, ref_lp=ref_lp)
  for name, array in arrays.items():
    rundir.save_npy(os.path.join(features_dir, f"{name}.npy"), array)
  rundir.save_json(os.path.join(features_dir, "texts.json"), list(texts))
  rundir.save_json(os.path.join(features_dir, "features.json"), {
      "schema": "seqlira.features/1", "model": model_path, "tokenizer": tokenizer_path, "max_length": f.max_length,
      "n_texts": len(texts), "arrays": {k: list(v.shape) for k, v in arrays.items()},
      "reference_model": reference_model, "notes": ["written by experiments.pretrain_benchmark's fallback"]})
  return features_dir


def _fallback_attacks(features_dir, k, n_boot, seed):
  import attacks
  from lira import metrics
  load = lambda name: rundir.load_npy(os.path.join(features_dir, f"{name}.npy"))  # noqa: E731
  with open(os.path.join(features_dir, "texts.json")) as fh:
    texts = json.load(fh)
  labels, lp, mu, sigma, ref_lp = (load(n) for n in ("labels", "lp", "mu", "sigma", "ref_lp"))
  scores = {"loss": attacks.loss(lp), "zlib": attacks.zlib(lp, texts), "min_k": attacks.min_k(lp, k),
            "min_k_pp": attacks.min_k_pp(lp, mu, sigma, k), "reference": attacks.reference(lp, ref_lp)}
  rows = []
  for name, s in scores.items():
    summary = metrics.summarize(s[None], labels[None] == 1, n_boot=n_boot, seed=seed)
    rows.append({"name": name, "auc": summary["auc"], "auc_ci": summary["auc_ci"],
                 "tpr": {key: v["tpr"] for key, v in summary["tpr"].items()}})
  table = "\n".join(f"{r['name']:<10} AUC {r['auc']:.3f}" for r in rows)
  return table, rows


# ---- summary -------------------------------------------------------------------------------------------------------

def _auc(row):
  return row["auc"] if "auc" in row else row["summary"]["auc"]


def summary_table(cols, aucs):
  """Markdown table: rows = attacks (first-seen order), columns = `cols`; '-' where a column lacks the attack."""
  names = list(dict.fromkeys(n for col in aucs.values() for n in col))
  lines = ["| attack | " + " | ".join(cols.values()) + " |", "|---" * (len(cols) + 1) + "|"]
  for n in names:
    cells = [f"{aucs[c][n]:.3f}" if n in aucs.get(c, {}) else "-" for c in cols]
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
    ax.plot(epochs, [aucs[f"epoch_{e}"].get(name, np.nan) for e in epochs], "o-", color=color, label=name)
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
  rundir.save_figure(path, fig)
  plt.close(fig)


def main(argv):
  del argv
  if not FLAGS.out_dir:
    raise app.UsageError("--out_dir is required")
  cfg, out = FLAGS.config, FLAGS.out_dir
  rundir.check_writable(out)
  pipeline.check_config(cfg, out)
  seconds = {}
  t0 = time.perf_counter()
  sets, tokenizer = mia_benchmark.prepare_data(cfg, out, progress=FLAGS.progress)
  seconds["data"] = time.perf_counter() - t0
  seconds.update({f"pretrain_{k}": v for k, v in
                  mia_benchmark.pretrain_models(cfg, out, sets, tokenizer, progress=FLAGS.progress).items()})
  tok_path, ref = os.path.join(out, "tokenizer.json"), mia_benchmark.reference_checkpoint(cfg, out)
  jobs = {f"epoch_{e}": ("main", e) for e in cfg.pretrain.checkpoint_epochs}
  jobs[SHIFT] = (SHIFT, cfg.shift_epoch)
  aucs, tables = {}, {}
  for col, (split, epoch) in jobs.items():
    texts, labels = mia_benchmark.read_jsonl(os.path.join(out, mia_benchmark.SPLIT_FILES[split]))
    t0 = time.perf_counter()
    folder = build_features(cfg, os.path.join(out, "features", col), mia_benchmark.target_checkpoint(out, epoch),
                            texts, labels, tok_path, ref)
    seconds[f"features_{col}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tables[col], rows = evaluate(cfg, folder)
    seconds[f"attacks_{col}"] = time.perf_counter() - t0
    aucs[col] = {r["name"]: float(_auc(r)) for r in rows}
    if FLAGS.progress:
      print(f"{col}: features {seconds[f'features_{col}']:.1f} s, attacks {seconds[f'attacks_{col}']:.1f} s")
  cols = column_names(cfg)
  table = summary_table(cols, aucs)
  note = (f"AUC of each attack; members: {len(sets['members'])} training conversations, non-members: "
          f"{len(sets['nonmembers'])} held-out conversations of the same corpus. The last column is a DISTRIBUTION-"
          "SHIFT split (same members; non-members are Python standard-library docstrings): a high AUC there shows "
          "the shift, not membership (MIMIR's pitfall, Duan et al. 2024).")
  rundir.save_text(os.path.join(out, "summary.md"), f"{table}\n\n{note}\n")
  rundir.save_json(os.path.join(out, "summary.json"), {"columns": cols, "auc": aucs, "seconds": seconds, "note": note,
                                                       "shift_epoch": cfg.shift_epoch})
  plot(os.path.join(out, "auc_vs_epochs.png"), cfg, aucs)
  print(table + "\n\n" + note)
  print("\nseconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
  print(provenance.wrote([os.path.join(out, n) for n in ("summary.md", "summary.json", "auc_vs_epochs.png")]))


if __name__ == "__main__":
  cli.run(main)
