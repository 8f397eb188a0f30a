"""A shadow run's group files in its run folder: which groups are done, and the run-wide files stacked from theirs
once every group is (losses.npy, the family's statistics, the population's losses and top-1 correctness)."""

import os
import time
import warnings

import models
import run_folder
from training import group_plan
from training import population as population_lib
from training import preemption


def groups_of(cfg, process_id=0, num_processes=1):
  """(group index, model ids) of this process's share: groups g with g % num_processes == process_id."""
  return run_folder.groups(cfg.shadow.num_models, cfg.shadow.group_size, process_id, num_processes)

def population_files(data, model, losses_path):
  """A group's population files when the run has a population: its losses, and top-1 correctness where the family
  has it."""
  if data.population_ZxT is None:
    return []
  paths = [population_lib.group_path(losses_path)]
  if "top1" in model.stat_names:
    paths.append(run_folder.names.population_group_path(losses_path, "top1"))
  return paths


def missing(paths):
  """The paths that do not exist."""
  return [p for p in paths if not os.path.exists(p)]

def group_done(cfg, run_dir, g):
  """Whether group g is finished: its canary losses and the family's statistics (mu, sigma, top1) exist, and its
  population losses and top-1 correctness when the run has a population."""
  losses_path = run_folder.group_paths(run_dir, g)[1]
  stat_names = models.family(cfg.model.name).stat_names
  paths = [losses_path] + [run_folder.stat_path(losses_path, stat) for stat in stat_names]
  if population_lib.settings(cfg)[0]:
    paths.append(population_lib.group_path(losses_path))
    if "top1" in stat_names:
      paths.append(run_folder.names.population_group_path(losses_path, "top1"))
  return not missing(paths)


def _stack(run_dir, name, parts):
  """Write RUN_DIR/name (losses.npy, ...), the group files `parts` stacked on the model axis, unless it already
  holds them.

  A run folder whose stacked file has the shape the group files make was assembled before: left untouched, so
  re-running a finished run writes nothing (and works on a read-only folder).
  """
  path = os.path.join(run_dir, name)
  shapes = [run_folder.load_npy(p, mmap=True).shape for p in parts]
  want = (sum(s[0] for s in shapes),) + shapes[0][1:]
  if os.path.exists(path) and run_folder.load_npy(path, mmap=True).shape == want:
    return
  run_folder.save_npy(path, run_folder.load_stacked(parts))


def assemble(cfg, run_dir):
  """Stack the per-group losses (and a language model's mu, sigma) into losses.npy [M, N, T], and the population
  losses into population_losses.npy [M, Z, T], once every group is done; False if some group is missing.

  Groups without mu / sigma files (extracted by an older version) leave mu.npy / sigma.npy unwritten, with a
  warning that names the missing files; LiRA needs only losses.npy.
  """
  parts = [run_folder.group_paths(run_dir, g)[1] for g, _ in groups_of(cfg)]
  if not all(os.path.exists(p) for p in parts):
    return False
  for stat in models.family(cfg.model.name).stat_names:
    stat_parts = [run_folder.stat_path(p, stat) for p in parts]
    if missing := [os.path.relpath(p, run_dir) for p in stat_parts if not os.path.exists(p)]:
      warnings.warn(f"{stat}.npy not written: {len(missing)} group(s) have no {stat} file ({', '.join(missing)}); "
                    f"delete those groups' losses files to re-extract them from their checkpoints", stacklevel=2)
    else:
      _stack(run_dir, run_folder.names.stat_file(stat), stat_parts)
  _stack(run_dir, run_folder.names.LOSSES, parts)
  if population_lib.settings(cfg)[0]:
    population_parts = [population_lib.group_path(p) for p in parts]
    if not all(os.path.exists(p) for p in population_parts):
      return False
    _stack(run_dir, run_folder.names.POPULATION_LOSSES, population_parts)
    top1_parts = [run_folder.names.population_group_path(p, "top1") for p in parts]
    if "top1" in models.family(cfg.model.name).stat_names and all(os.path.exists(p) for p in top1_parts):
      _stack(run_dir, run_folder.names.POPULATION_TOP1, top1_parts)
  return True


def is_finished(cfg, run_dir):
  """Whether the run is complete (config.json, every group's losses and losses.npy, and population_losses.npy with
  a population): re-running it then writes nothing into the run folder, which may be read-only. `cfg` as
  run_config.effective_config gives it."""
  if group_plan.planned(cfg.shadow.group_size):  # not planned yet: no group has trained
    return False
  population = population_lib.settings(cfg)[0] == 0 or os.path.exists(
    os.path.join(run_dir, population_lib.LOSSES_FILE))
  return (os.path.exists(run_folder.config_path(run_dir))
          and os.path.exists(os.path.join(run_dir, run_folder.names.LOSSES))
          and population and all(group_done(cfg, run_dir, g) for g, _ in groups_of(cfg)))


def wait_for_groups(cfg, run_dir, poll_s=1.0):
  """Block until every group is done (group_done; written by the other processes of a jax.distributed run);
  a SIGTERM meanwhile raises preemption.Preempted."""
  while not all(group_done(cfg, run_dir, g) for g, _ in groups_of(cfg)):
    preemption.check()
    time.sleep(poll_s)
