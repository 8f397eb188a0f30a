"""The first finished models of a shadow run as a run folder of their own (experiments/partial_run.py).

A run of M models trains group after group and writes each group's canary losses to RUN_DIR/losses/group_GGGG.npy;
losses.npy [M, N, T] appears only when every group is done. When a run has to stop early, its first K finished
models are still a complete experiment: their losses [K, N, T] and membership keep.npy[:K] are what a K-model run
with that membership would have produced. Membership was drawn for M models (each canary IN for exactly M/2 of
them), so among the first K a canary's IN count varies around K/2; the leave-one-out evaluation handles unequal
counts, and a canary the K models leave with no IN or no OUT model is refused there by name. RMIA's population
losses (losses/group_GGGG_population.npy) and top-1 correctness are stacked the same way, beside a copy of
population.npy. A folder
with losses.npy and no group files (another partial run) gives the first K rows of its stacked arrays instead.

Canaries can be dropped as well (drop_canaries: their indices in the source run): every per-canary array (losses,
keep, the family's statistics, canaries.npy, mask.npy, a fine-tuned run's base_losses.npy and base_top1.npy) loses those rows of its canary axis, and config.json records
the dropped indices, so a question such as "do these canaries cause that ranking?" is answered by evaluating the rest.
"""

import json
import os

import numpy as np

from lira.errors import InputError, MissingFileError
import run_folder
from training import population

COPIED = (run_folder.names.TOKENIZER, run_folder.names.POPULATION)  # depend on neither the models nor the canaries
# [N, ...]: copied without the dropped canaries
PER_CANARY = (run_folder.names.CANARIES, run_folder.names.MASK, run_folder.names.BASE_LOSSES,
              run_folder.names.BASE_TOP1)
MIN_MODELS = 6  # the balanced leave-one-out evaluation: every canary IN for 3 models and OUT for 3


def _losses_path(run_dir, g):
  return run_folder.group_paths(run_dir, g)[1]


def read_config(run_dir):
  """The run's config.json as a dict; MissingFileError / InputError name the file."""
  config = run_folder.load_config(run_dir, "not a run folder of experiments.train_shadows")
  if "shadow" not in config:
    made = (" (it is a synthetic run of experiments.make_synthetic, which has no training groups; make one with "
            "fewer models with make_synthetic --num_models=K)" if config.get("source") == "synthetic" else "")
    raise InputError(f"{run_dir} is not a shadow run of experiments.train_shadows: its config.json has no shadow "
                     f"section{made}; partial_run takes the finished groups of a shadow run")
  shadow = config.get("shadow", {})
  if not all(isinstance(shadow.get(k), int) and shadow[k] > 0 for k in ("num_models", "group_size")):
    raise InputError(f"{run_folder.config_path(run_dir)}: needs shadow.num_models and shadow.group_size (positive "
                     "integers)")
  return config


def stored_statistics(config):
  """The statistics the run's family stores beside losses.npy (assemble() writes them); a config that names no
  known family (a run folder written elsewhere) may hold a language model's mu and sigma, copied when present."""
  import models  # here: the model families import jax and flax (~1.5 s), which partial_run's --help does without
  name = config.get("model", {}).get("name")
  return models.FAMILIES[name].stat_names if name in models.FAMILIES else models.LM_STATS


def finished_models(run_dir, config):
  """Number of models in the leading groups whose losses file exists (groups finish in order in one process)."""
  k = 0
  for g, ids in run_folder.groups(config["shadow"]["num_models"], config["shadow"]["group_size"]):
    if not os.path.exists(_losses_path(run_dir, g)):
      break
    k = ids[-1] + 1
  return k


def _dropped(drop_canaries, N):
  """The canary indices to drop, sorted and checked against N (InputError names the bad entry)."""
  try:
    idx = sorted({int(i) for i in drop_canaries})
  except (TypeError, ValueError):
    raise InputError(f"--drop_canaries: {list(drop_canaries)!r} are not all canary indices (integers)") from None
  if bad := [i for i in idx if not 0 <= i < N]:
    raise InputError(f"--drop_canaries: canary {bad[0]} is out of range (the run has N={N} canaries, 0-{N - 1})")
  if len(idx) >= N:
    raise InputError(f"--drop_canaries drops all {N} canaries")
  return idx


def write_partial_run(run_dir, out_dir, num_models=None, drop_canaries=()):
  """Write out_dir as a run folder of the first num_models models of run_dir (default: every leading finished one),
  without the canaries drop_canaries (indices in run_dir; default none).

  Checks everything before writing: out_dir is not run_dir and holds no run, num_models ends a group, every group it
  needs is finished, and every dropped index names a canary. Returns (the new config, the paths written).
  """
  config = read_config(run_dir)
  M, G = config["shadow"]["num_models"], config["shadow"]["group_size"]
  if os.path.abspath(out_dir) == os.path.abspath(run_dir):
    raise InputError("--out_run_dir must differ from --run_dir (the partial run is a new folder)")
  stacked = (not os.path.exists(_losses_path(run_dir, 0))
             and os.path.exists(os.path.join(run_dir, run_folder.names.LOSSES)))  # losses.npy only (a partial run)
  done = M if stacked else finished_models(run_dir, config)
  K = done if num_models is None else int(num_models)
  if K < MIN_MODELS:
    what = f"only {done} leading models are finished" if num_models is None else f"--num_models={K}"
    raise InputError(f"{run_dir}: {what}; the leave-one-out evaluation needs at least {MIN_MODELS} models (every "
                     "canary IN for 3 and OUT for 3, as train_shadows and make_synthetic require)")
  if K > M:
    raise InputError(f"--num_models={K} exceeds the run's {M} models")
  keep_path = os.path.join(run_dir, run_folder.names.KEEP)
  if stacked:  # the first K rows of the stacked arrays
    parts = [os.path.join(run_dir, run_folder.names.LOSSES)]
    expected = [M]
    stat_files = {stat: [os.path.join(run_dir, run_folder.names.stat_file(stat))] for stat in stored_statistics(config)}
    population_parts = [os.path.join(run_dir, run_folder.names.POPULATION_LOSSES)]
    population_top1_parts = [os.path.join(run_dir, run_folder.names.POPULATION_TOP1)]
  else:
    groups = [ids for _, ids in run_folder.groups(M, G) if ids[0] < K]
    if groups[-1][-1] + 1 != K:
      raise InputError(f"--num_models={K} splits group {len(groups) - 1} (models {groups[-1][0]}-{groups[-1][-1]}); "
                       f"use a multiple of shadow.group_size={G}")
    missing = [_losses_path(run_dir, g) for g in range(len(groups)) if not os.path.exists(_losses_path(run_dir, g))]
    if missing:
      raise MissingFileError(f"{missing[0]} does not exist: group {len(groups) - len(missing)} of the first {K} "
                             f"models is not finished ({done} leading models are)")
    parts = [_losses_path(run_dir, g) for g in range(len(groups))]
    expected = [len(ids) for ids in groups]
    stat_files = {stat: [run_folder.stat_path(p, stat) for p in parts] for stat in stored_statistics(config)}
    population_parts = [population.group_path(p) for p in parts]  # RMIA's population, when the run has one
    population_top1_parts = [run_folder.names.population_group_path(p, "top1") for p in parts]
  if not os.path.exists(keep_path):
    raise MissingFileError(f"{keep_path} does not exist")
  keep_MxN = run_folder.load_npy(keep_path)
  if keep_MxN.shape[0] != M:
    raise InputError(f"{keep_path}: {keep_MxN.shape[0]} rows, but config.json says {M} models")
  dropped = _dropped(drop_canaries, keep_MxN.shape[1])
  shapes = [run_folder.load_npy(p, mmap=True).shape for p in parts]
  for p, s, rows in zip(parts, shapes, expected):
    if len(s) != 3 or s[0] != rows or s[1] != keep_MxN.shape[1]:
      raise InputError(f"{p}: shape {s}, expected [{rows}, N={keep_MxN.shape[1]}, T]")

  def stack(paths):  # the first K models' rows
    return run_folder.load_npy(paths[0], mmap=True)[:K] if stacked else run_folder.load_stacked(paths)

  if found := [f for f in run_folder.RUN_FILES if os.path.exists(os.path.join(out_dir, f))]:
    raise InputError(f"{out_dir} already holds a run ({', '.join(found)}); choose another --out_run_dir")
  run_folder.check_writable(out_dir, "choose another --out_run_dir")
  written = []

  def save(name, array, canary_axis=None):  # canary_axis: the axis that loses the dropped canaries
    path = os.path.join(out_dir, name)
    run_folder.save_npy(path, array if canary_axis is None else np.delete(array, dropped, axis=canary_axis))
    written.append(path)

  save(run_folder.names.LOSSES, stack(parts), canary_axis=1)
  save(run_folder.names.KEEP, keep_MxN[:K], canary_axis=1)
  for stat, stat_parts in stat_files.items():  # the family's extras, as assemble() writes them
    if all(os.path.exists(p) for p in stat_parts):
      save(run_folder.names.stat_file(stat), stack(stat_parts), canary_axis=1)
  for name, population_files in ((run_folder.names.POPULATION_LOSSES, population_parts),
                                  (run_folder.names.POPULATION_TOP1, population_top1_parts)):
    if all(os.path.exists(p) for p in population_files):
      save(name, stack(population_files))
  for name in PER_CANARY:
    if os.path.exists(os.path.join(run_dir, name)):
      save(name, run_folder.load_npy(os.path.join(run_dir, name)), canary_axis=0)
  for name in COPIED:
    if os.path.exists(os.path.join(run_dir, name)):
      path = os.path.join(out_dir, name)
      run_folder.copy_file(os.path.join(run_dir, name), path)
      written.append(path)
  new = json.loads(json.dumps(config))
  new["shadow"]["num_models"] = K
  new["partial_of"] = {"run_dir": os.path.abspath(run_dir), "num_models": M, "models": [0, K],
                       "note": f"the first {K} of {M} models; membership drawn for {M} models"}
  if dropped:
    N = keep_MxN.shape[1]
    new["partial_of"].update(num_canaries=N, dropped_canaries=dropped,
                             note=new["partial_of"]["note"] + f"; {len(dropped)} of {N} canaries dropped (indices "
                                  "of the source run in dropped_canaries; the rest keep their order)")
    if isinstance(new.get("canaries"), dict) and "num_canaries" in new["canaries"]:
      new["canaries"]["num_canaries"] = N - len(dropped)
  run_folder.save_config(out_dir, new)
  written.append(run_folder.config_path(out_dir))
  return new, written

