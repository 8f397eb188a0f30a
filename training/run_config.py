"""A run's config against its run folder: config.json records the config that started the run, and a resumed run
must bring the same one (training/pipeline.py calls these before it loads any data).

A run started with shadow.group_size "auto" or "fastest" records the G it chose and the plan behind it
(training/group_plan.py) in config.json's shadow section before its first group trains; resumed with either rule, it
keeps that G.

`train.compute_dtype` (compute_dtype) is the one compute-dtype field of every family; GPT-NeoX configs once had
`model.dtype`, which is read as its alias: a config or config.json with both must give the same value, and one
without `train.compute_dtype` (a folder written before it) computes in `model.dtype`, or float32.

`shadow.model_seed` (model_seed) seeds the membership (keep.npy) and the training (initialisation, batch order); the
data split, tokenizer, canaries and population follow `shadow.seed` alone, so runs that differ in model_seed alone hold
the same canaries (independent copies of one run). Unset, it is `shadow.seed`; a folder written before the field
resumes with it unset.

Three blocks came after run folders existed, and a folder written before them still resumes: one without `train.dp`
matches a config that leaves DP-SGD off, one without `train.lora` a config that leaves LoRA off (rank 0); one without `population` runs without a population (effective_config) unless
the command line asks for one, which is then recorded (record_population) once drawn.
"""

import json
import os

import ml_collections

from lira.errors import InputError
from models import precision
import run_folder
from training import dp as dp_lib
from training import lora_config as lora_lib


def config_dict(cfg):
  """The config as plain JSON values (what config.json holds)."""
  return json.loads(cfg.to_json_best_effort()) if hasattr(cfg, "to_json_best_effort") else dict(cfg)


def _diff(a, b, prefix=""):
  keys = sorted(set(a) | set(b))
  out = []
  for k in keys:
    va, vb = a.get(k, "<missing>"), b.get(k, "<missing>")
    if isinstance(va, dict) and isinstance(vb, dict):
      out += _diff(va, vb, f"{prefix}{k}.")
    elif va != vb:
      out.append(f"{prefix}{k}: run folder has {va!r}, this command has {vb!r}")
  return out


# Written into config.json by the run itself (the accountant's epsilons), not part of the config compared on resume.
RECORDED = ("accountant",)
# Written into config.json's shadow section by a `group_size=auto` run (training/group_plan.py), not compared either.
GROUP_SIZE_PLAN = "group_size_plan"


def model_seed(cfg):
  """The seed of the run's membership and training: shadow.model_seed, else shadow.seed."""
  seed = cfg.shadow.get("model_seed")
  return cfg.shadow.seed if seed is None else seed


def compute_dtype(cfg):
  """The run's compute dtype: train.compute_dtype, else the alias model.dtype, else "float32"; InputError for any
  other value, or when both are given and differ."""
  train, model = cfg.get("train") or {}, cfg.get("model") or {}
  value = train.get("compute_dtype", model.get("dtype", "float32"))
  precision.check(value, "train.compute_dtype")
  if model.get("dtype", value) != value:
    raise InputError(f"model.dtype={model['dtype']!r} is an alias of train.compute_dtype={value!r} and must equal it; "
                     "set train.compute_dtype alone")
  return value


def _folded_dtype(d):
  """config.json contents with model.dtype folded into train.compute_dtype (what a resume compares)."""
  if not isinstance(d.get("train"), dict):
    return d
  model = {k: v for k, v in d.get("model", {}).items() if k != "dtype"} if isinstance(d.get("model"), dict) else None
  train = {**d["train"], "compute_dtype": compute_dtype(d)}
  return {**d, "train": train, **({} if model is None else {"model": model})}


def without_section(cfg, section):
  """A copy of the config without one top-level section."""
  d = cfg.to_dict()
  d.pop(section, None)
  return ml_collections.ConfigDict(d)


def effective_config(cfg, run_dir, population_given=False):
  """The config a run folder is run with: a folder whose config.json predates the `population` block runs without a
  population (it resumes and assembles as it was started) unless `population_given` (the user asked for one: it is
  then recorded, and the finished groups' population losses are computed from their checkpoints; a size of 0 asks
  for none)."""
  if "population" not in cfg or not os.path.exists(run_folder.config_path(run_dir)):
    return cfg
  if population_given and cfg.population.get("size"):
    return cfg
  return cfg if "population" in run_folder.load_config(run_dir) else without_section(cfg, "population")


def check_config(cfg, run_dir):
  """Refuse a run folder written by a different config; otherwise record the config in a new one. A folder written
  before configs had a `train.dp` block matches a config whose block leaves DP-SGD off; one written before the
  `population` block matches any population (effective_config decides whether the run gets one; record_population
  adds it to config.json once it is drawn)."""
  wanted = config_dict(cfg)
  if os.path.exists(run_folder.config_path(run_dir)):
    have = {k: v for k, v in run_folder.load_config(run_dir).items() if k not in RECORDED}
    if isinstance(have.get("shadow"), dict):
      have["shadow"] = {k: v for k, v in have["shadow"].items() if k != GROUP_SIZE_PLAN}
    if isinstance(wanted.get("shadow"), dict):
      wanted["shadow"] = {k: v for k, v in wanted["shadow"].items() if k != GROUP_SIZE_PLAN}
    if (isinstance(have.get("shadow"), dict) and "model_seed" not in have["shadow"]
        and isinstance(wanted.get("shadow"), dict) and wanted["shadow"].get("model_seed") is None):
      wanted["shadow"] = {k: v for k, v in wanted["shadow"].items() if k != "model_seed"}  # written before the field
    if "dp" not in have.get("train", {"dp": None}) and not dp_lib.enabled(cfg.train.get("dp")):
      wanted = {**wanted, "train": {k: v for k, v in wanted["train"].items() if k != "dp"}}
    if "lora" not in have.get("train", {"lora": None}) and not lora_lib.enabled(cfg.train.get("lora")):
      wanted = {**wanted, "train": {k: v for k, v in wanted["train"].items() if k != "lora"}}
    if "population" not in have:
      wanted.pop("population", None)
    have, wanted = _folded_dtype(have), _folded_dtype(wanted)
    diffs = _diff(have, wanted)
    if any(d.startswith("population.") for d in diffs):
      diffs.append(f"(python -m experiments.population_losses --run_dir={run_dir} gives a finished run another "
                   "population)")
    if diffs:
      raise InputError(f"run folder {run_dir} was written by a different config; use another --run_dir or the same "
                       "config:\n  " + "\n  ".join(diffs))
  else:
    run_folder.save_config(run_dir, wanted)


def record_population(cfg, run_dir):
  """Add the config's `population` block to a config.json without one (a folder from before it), once drawn."""
  config = run_folder.load_config(run_dir)
  if "population" in cfg and "population" not in config:
    run_folder.save_config(run_dir, {**config, "population": config_dict(cfg)["population"]})


def with_group_size(cfg, group_size):
  """A copy of the config with shadow.group_size set to `group_size` (an int, "auto" or "fastest", whatever the field
  held)."""
  d = cfg.to_dict()
  d["shadow"] = {**d["shadow"], "group_size": group_size}
  return ml_collections.ConfigDict(d)


def recorded_group_size(cfg, run_dir):
  """The config with shadow.group_size "auto" or "fastest" replaced by the integer the run folder's config.json
  records: a resumed run keeps the G it was started with (and planned). The config itself otherwise."""
  if not isinstance(cfg.shadow.group_size, str) or not os.path.exists(run_folder.config_path(run_dir)):
    return cfg
  G = run_folder.load_config(run_dir).get("shadow", {}).get("group_size")
  return with_group_size(cfg, G) if isinstance(G, int) and not isinstance(G, bool) else cfg


def record_group_size(run_dir, plan_block):
  """Record a `group_size=auto` run's chosen G as config.json's shadow.group_size, its plan beside it."""
  config = run_folder.load_config(run_dir)
  shadow = {**config["shadow"], "group_size": plan_block["chosen"], GROUP_SIZE_PLAN: plan_block}
  run_folder.save_config(run_dir, {**config, "shadow": shadow})
