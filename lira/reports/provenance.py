"""How a report was made: its file names from its settings, the settings block its JSON carries, and titles.

A report made with the default settings keeps its plain name (results.json); every setting that differs from
its default is appended as `_key-value` (results_reduction-min4_statistic-loss.json), so reports made with
other settings sit beside it instead of replacing it. Re-running with the same settings replaces that report.
"""

import os
import re
import sys

import run_folder
from lira.errors import InputError

SCHEMA_VERSION = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")  # a value keeps its underscores: attacks-wbc_vote+rmia_offline


def _token(value):
  """A setting's value as a filesystem-safe token: 'min:4' -> 'min4', [4, 8] -> '4+8', 1e-3 -> '0.001'."""
  if isinstance(value, (list, tuple)):
    return "+".join(_token(v) for v in value)
  if isinstance(value, float):
    value = f"{value:g}"
  return _UNSAFE.sub("", str(value).replace(" ", "-").lower())


def suffix(settings, defaults):
  """`_key-value` for each setting (in the given order) that differs from its default; '' if none does."""
  parts = []
  for key, value in settings.items():
    if value == defaults.get(key):
      continue
    name = key.replace("_", "")
    if value is True:
      parts.append(name)
    elif value is False:
      parts.append(f"no{name}")
    elif value is None:
      parts.append(f"{name}-none")
    else:
      parts.append(f"{name}-{_token(value)}")
  return "".join(f"_{p}" for p in parts)


def report_path(out_dir, stem, ext, settings, defaults):
  """The path of one report file: out_dir/stem[_key-value...].ext (see the module docstring)."""
  return os.path.join(out_dir, f"{stem}{suffix(settings, defaults)}.{ext}")


def describe(settings, skip=()):
  """Settings as one readable line for titles and tables: 'statistic=logit, reduction=group:4, ...'."""
  words = []
  for key, value in settings.items():
    if key in skip:
      continue
    if isinstance(value, bool):
      words.append(key.replace("_", " ") if value else f"no {key.replace('_', ' ')}")
    elif isinstance(value, (list, tuple)):
      words.append(f"{key}={','.join(str(v) for v in value)}")
    else:
      words.append(f"{key}={'none' if value is None else value}")
  return ", ".join(words)


def run_words(config):
  """A run's model family and canary kind from its config.json: 'lstm, worst-case canaries' ('synthetic losses' for
  make_synthetic's runs; 'model unknown' or 'canary kind unknown' where config.json does not say), the
  accountant's epsilon of a DP-SGD run ('lstm, worst-case canaries, DP-SGD epsilon 4') and the adapters of a LoRA
  run ('gpt2, worst-case canaries, LoRA rank 8 on attention')."""
  config = config or {}
  family = (config.get("model") or {}).get("name")
  kind = (config.get("canaries") or {}).get("kind")
  if family is None and kind is None and config.get("source") == "synthetic":
    return "synthetic losses"
  words = f"{family or 'model unknown'}, {f'{kind}-case canaries' if kind else 'canary kind unknown'}"
  accountant = config.get("accountant") or {}
  if accountant.get("epsilon") is not None:  # a DP-SGD run: what tells it from the same model trained without
    words += f", DP-SGD epsilon {accountant['epsilon']:.3g}"
  lora = ((config.get("train") or {}).get("lora") or {})
  if isinstance(lora.get("rank"), int) and lora["rank"] > 0:  # adapters on a shared base, not whole copies
    words += f", LoRA rank {lora['rank']} on {lora.get('targets', 'attention')}"
  return words


def run_name(run_dir):
  """The run folder's own name: 'rmia_lstm64' for runs/rmia_lstm64/."""
  return os.path.basename(os.path.normpath(os.path.abspath(run_dir)))


def run_description(run_dir, config):
  """The run as every figure's title names it: 'rmia_lstm64 (lstm, worst-case canaries)'."""
  return f"{run_name(run_dir)} ({run_words(config)})"


def runs_description(runs):
  """Several runs [(run_dir, config)] named at once, runs of one family and canary kind grouped:
  'dp_lstm16_eps1, dp_lstm16_none (lstm, worst-case canaries); dp_neox8_eps1 (gpt_neox, worst-case canaries)'."""
  groups = {}
  for run_dir, config in runs:
    groups.setdefault(run_words(config), []).append(run_name(run_dir))
  return "; ".join(f"{', '.join(names)} ({words})" for words, names in groups.items())


def shape_line(shape):
  """'M=32 models, N=2000 canaries, T=32 positions'."""
  return f"M={shape['M']} models, N={shape['N']} canaries, T={shape['T']} positions"


def save_rows(out_dir, command, run_dir, run, rows, settings, defaults, recorded, extra=None):
  """Write a grid report's rows as <command>[_settings].json (header, `extra`, rows) and .csv; returns the paths of
  the .json, .csv and .png (the figure's, named the same way)."""
  paths = [report_path(out_dir, command, ext, settings, defaults) for ext in ("json", "csv", "png")]
  run_folder.save_json(paths[0], {**header(command, run_dir, run, recorded, f"seqlira.{command}"), **(extra or {}),
                                  "rows": rows})
  run_folder.save_csv(paths[1], rows)
  return paths


def header(command, run_dir, run, settings, schema):
  """The block every report's JSON opens with: schema, command line, run folder, shape, settings, run config."""
  M, N, T = run.loss_MxNxT.shape
  return {
      "schema": {"name": schema, "version": SCHEMA_VERSION, "doc": "docs/outputs.md"},
      "command": command,
      "argv": list(sys.argv),
      "run_dir": os.path.abspath(run_dir),
      "shape": {"M": int(M), "N": int(N), "T": int(T)},
      "masked": run.mask_NxT is not None,
      "settings": dict(settings),
      "run_config": run.config,
  }


def clip_counts(counts, num_models, flag):
  """Counts of models above M dropped: (kept, note or None); an error only if none remain."""
  kept = [c for c in counts if c <= num_models]
  dropped = [c for c in counts if c > num_models]
  if not kept:
    raise InputError(f"{flag}: every value {dropped} exceeds M={num_models}, the number of models in the run")
  note = f"note: {flag} values {dropped} exceed M={num_models} models and are dropped" if dropped else None
  return kept, note


def wrote(paths, seconds=None):
  """The lines a command prints about the files it wrote (and how long its work took)."""
  first = "wrote:" if seconds is None else f"done in {seconds:.1f} s; wrote:"
  return "\n".join([first] + [f"  {path}" for path in paths])
