"""A population added to a finished shadow run without retraining (experiments/population_losses.py).

The run's config comes back from its config.json, with the `population` block asked for; its data are rebuilt as
train_shadows rebuilds them on resume (the canaries and keep matrix are checked against the saved ones), the
population is drawn as a run trained with it would draw it (training/population.py), and each group is restored from
its checkpoint and scored on the population by the same code a training run uses (pipeline.run_group). So the files
equal those of a run trained with the population on. Resumable: a group whose population losses exist is skipped.
"""

import os

import ml_collections
from tqdm.auto import tqdm

import models
from lira.errors import InputError, MissingFileError, UserError
import run_folder
from run_folder import names
from training import group_files
from training import model_setup
from training import pipeline
from training import population as population_lib
from training import run_config
from training import run_data


def _shadow_config(run_dir):
  """The run's config.json as a dict, refused unless it is a finished shadow run with checkpoints."""
  config = run_folder.load_config(run_dir, "not a run folder of experiments.train_shadows")
  if config.get("source") == "synthetic":
    raise InputError(f"{run_dir} is a synthetic run (experiments.make_synthetic): it has no models to score a "
                     "population on; make it with make_synthetic --population_size=Z")
  if "partial_of" in config:
    raise InputError(f"{run_dir} is a partial run, which keeps no checkpoints: add the population to its source run "
                     f"{config['partial_of'].get('run_dir')} and make the partial run again")
  if "shadow" not in config or "model" not in config:
    raise InputError(f"{run_dir} is not a shadow run of experiments.train_shadows: its config.json has no shadow or "
                     "model section; a run folder of your own losses takes a population_losses.npy of your own "
                     "(docs/own_losses.md)")
  return config


def _recorded(config):
  """(size, source) of the population config.json records, None when it has none (no block, or size 0)."""
  block = config.get("population") or {}
  return (block["size"], block.get("source", "auto")) if block.get("size") else None


def _population_files(config):
  """The run's files that hold its population, relative to the run folder (each group's losses of it included)."""
  shadow = config.get("shadow") or {}
  groups = run_folder.groups(shadow["num_models"], shadow["group_size"]) if "num_models" in shadow else []
  return [names.population_group_path(names.group_losses_file(g), stat) for g, _ in groups for stat in (None, "top1")
          ] + [names.POPULATION, names.POPULATION_LOSSES, names.POPULATION_MASK, names.POPULATION_TOP1]


def _staged(run_dir, config, size, source):
  """The staging folder of a population of (size, source): the one an interrupted --overwrite of these settings left
  (resumed), else made afresh as the run without its population (files, and config.json's block)."""
  folder = os.path.join(run_dir, names.POPULATION_STAGING_DIR)
  if os.path.exists(run_folder.config_path(folder)):
    block = run_folder.load_config(folder).get("population") or {}
    if (block.get("size"), block.get("source")) == (size, source):
      return folder
  folder = run_folder.staging.stage(run_dir, names.POPULATION_STAGING_DIR, _population_files(config) + [names.CONFIG])
  run_folder.save_config(folder, {k: v for k, v in config.items() if k != "population"})
  return folder


def _replace(run_dir, config, size, source, progress):
  """Build the population of (size, source) in the staging folder, then swap it in, config.json last; the paths of
  population.npy and population_losses.npy in the run."""
  folder = _staged(run_dir, config, size, source)
  try:
    _, _, paths = add_population(folder, size, source, progress=progress)
  except Exception as e:  # noqa: BLE001 - a refusal (or a bug): nothing of it is left; a Ctrl-C keeps it to resume
    run_folder.staging.remove(folder)
    if isinstance(e, UserError):  # said of the staging folder: said of the run, which the user named
      raise type(e)(str(e).replace(folder, run_dir)) from e
    raise
  built = [p for p in _population_files(config) if os.path.isfile(os.path.join(folder, p))
           and not os.path.islink(os.path.join(folder, p))]
  run_folder.staging.swap_in(folder, run_dir, built + [names.CONFIG])
  return [os.path.join(run_dir, os.path.relpath(p, folder)) for p in paths]


def _remove_population(run_dir, config):
  """Delete a run's population files and its config.json block (--overwrite)."""
  files = [population_lib.FILE, population_lib.LOSSES_FILE, names.POPULATION_TOP1]
  for g, _ in run_folder.groups(config["shadow"]["num_models"], config["shadow"]["group_size"]):
    files += [names.population_group_path(run_folder.names.group_losses_file(g), s) for s in (None, "top1")]
  run_folder.remove_files(run_dir, files)
  config = {k: v for k, v in config.items() if k != "population"}
  run_folder.save_config(run_dir, config)
  return config


def _config(config, size, source):
  """The run's ConfigDict (without what the run recorded itself) with the population block asked for."""
  cfg = ml_collections.ConfigDict({k: v for k, v in config.items() if k not in run_config.RECORDED + ("population",)})
  cfg.population = population_lib.config_defaults(size)
  cfg.population.source = source
  return cfg


def add_population(run_dir, size=None, source=None, overwrite=False, progress=True):
  """Draw a population for the finished run in run_dir, score it on every model and write population.npy and
  population_losses.npy; record the block in config.json. size / source None: the run's recorded ones, else the
  configs' defaults (population.DEFAULT_SIZE, auto). overwrite: a population of other settings is replaced as one
  set, built in the run's staging folder (run_folder.staging) and swapped in when complete, so until then the run
  keeps its old one and a second call resumes the new one. Returns (whether it was already there, (size, source),
  the paths)."""
  config = _shadow_config(run_dir)
  have = _recorded(config)
  size = size if size is not None else have[0] if have else population_lib.DEFAULT_SIZE
  source = source or (have[1] if have else "auto")
  cfg = _config(config, size, source)
  pipeline.validate(cfg)
  if size < 1:
    raise InputError(f"--size={size}: a population needs at least one sequence")
  paths = [os.path.join(run_dir, population_lib.FILE), os.path.join(run_dir, population_lib.LOSSES_FILE)]
  if have is None and "population" in config:  # a block of size 0: nothing to replace
    config = _remove_population(run_dir, config)
  if have is not None and have != (size, source):
    if not overwrite:
      raise InputError(f"{run_dir} already has a population of {have[0]} (source {have[1]}) in config.json; pass "
                       f"--overwrite to replace it by one of {size} (source {source})")
    return False, (size, source), _replace(run_dir, config, size, source, progress)
  if overwrite:  # an earlier overwrite's unfinished population, no longer asked for
    run_folder.staging.remove(os.path.join(run_dir, names.POPULATION_STAGING_DIR))
  if have == (size, source) and os.path.exists(paths[1]):
    M, Z = cfg.shadow.num_models, size
    shape = run_folder.load_npy(paths[1], mmap=True).shape
    if shape[:2] == (M, Z):
      return True, (size, source), paths
  if not group_files.is_finished(run_config.without_section(cfg, "population"), run_dir):
    raise InputError(f"{run_dir} is not a finished shadow run (no losses.npy, or a group's losses are missing); "
                     f"finish it with train_shadows --run_dir={run_dir} --config.population.size={size}, which "
                     "scores the population too")
  fam = models.family(cfg.model.name)
  base = os.path.join(run_dir, run_folder.names.BASE_MODEL_DIR, run_folder.names.MODEL_CONFIG)
  if fam.fine_tunes and cfg.model.base == "pretrain" and not os.path.exists(base):  # build_model would pretrain one
    raise MissingFileError(f"{base} does not exist: the run's base model was never saved")
  run_config.check_config(cfg, run_dir)
  data = run_data.prepare_data(cfg, run_dir, progress=False)
  run_config.record_population(cfg, run_dir)
  model = model_setup.build_model(cfg, data, run_dir, progress=False)
  todo = [(g, ids) for g, ids in group_files.groups_of(cfg) if not group_files.group_done(cfg, run_dir, g)]
  for g, ids in tqdm(todo, desc="population losses", unit="group", disable=not progress):
    pipeline.run_group(cfg, run_dir, data, model, g, ids, progress=False)
  if not group_files.assemble(cfg, run_dir):
    raise MissingFileError(f"{run_dir}: a group's population losses are missing after scoring every group")
  return False, (size, source), paths
