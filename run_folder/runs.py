"""A run folder's files read and checked (LiRA's inputs, RMIA's population, a shadow run's group files and config),
and a run folder written."""

import dataclasses
import hashlib
import json
import os

import numpy as np

from run_folder import atomic
from run_folder import names
from run_folder.errors import InputError, MissingFileError, UserError


@dataclasses.dataclass(frozen=True)
class Run:
  loss_MxNxT: np.ndarray
  keep_MxN: np.ndarray
  mask_NxT: np.ndarray | None
  config: dict


def load_npy(path, mmap=False):
  """Load an .npy file without pickle; a file that is not .npy, holds Python objects or is truncated is refused with
  its path named and what is wrong with it (npy_problem)."""
  try:
    return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
  except (ValueError, EOFError, OSError) as e:
    if isinstance(e, OSError) and not os.path.isfile(path):
      raise
    raise InputError(f"{path}: {npy_problem(path, e)}") from e


def npy_problem(path, error):
  """What is wrong with an .npy file numpy refused (its own message would say "pickled" of any file without the
  .npy header): not .npy at all, Python objects (object dtype: loading them needs pickle), or fewer bytes than its
  header announces."""
  from numpy.lib import format as npy
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    if f.read(len(npy.MAGIC_PREFIX)) != npy.MAGIC_PREFIX:
      return (f"is not an .npy file (its {size} bytes do not start with the .npy header); save arrays with "
              "numpy.save")
    f.seek(0)
    try:
      version = npy.read_magic(f)
      read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
      shape, _, dtype = read(f)
    except (ValueError, EOFError) as e:
      return f"has a damaged .npy header ({e})"
    offset = f.tell()
  if dtype.hasobject:
    return (f"holds Python objects (dtype {dtype}), which seqlira never loads (that needs pickle); store plain "
            "numeric arrays")
  expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if size - offset < expected:
    return (f"is truncated: its header announces {list(shape)} {dtype} ({expected} bytes), the file holds "
            f"{size - offset}; is it still being written?")
  return f"cannot be read as an .npy array ({error})"


def load_json(path):
  """A JSON file of the run folder (config.json, texts.json); InputError naming it when it is not valid JSON."""
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise InputError(f"{path}: not valid JSON ({e})") from e


def load_stacked(paths):
  """Group files (each [G, ...], as RUN_DIR/losses/group_GGGG.npy) stacked on the model axis, read without pickle."""
  return np.concatenate([load_npy(p) for p in paths])


def load_config(run_dir, missing="not a run folder"):
  """RUN_DIR/config.json as a dict. MissingFileError when the file does not exist (`missing` says what that means
  to the caller), InputError naming the file when it is not valid JSON or not a JSON object."""
  path = names.config_path(run_dir)
  if not os.path.exists(path):
    raise MissingFileError(f"{path} does not exist: {missing}")
  config = load_json(path)
  if not isinstance(config, dict):
    raise InputError(f"{path}: expected a JSON object (the run's config), got {type(config).__name__}")
  return config


def save_config(run_dir, config):
  """Write RUN_DIR/config.json (strict JSON, atomically)."""
  atomic.save_json(names.config_path(run_dir), config)


def load_run(run_dir, mmap=False):
  """Load losses.npy [M, N, T], keep.npy [M, N], optional mask.npy [N, T] and config.json; check shapes."""
  if not os.path.isdir(run_dir):
    raise MissingFileError(f"run folder {run_dir!r} does not exist")
  paths = {k: os.path.join(run_dir, name) for k, name in
           (("losses", names.LOSSES), ("keep", names.KEEP), ("mask", names.MASK))}
  check_complete(run_dir)
  for k in ("losses", "keep"):
    if not os.path.exists(paths[k]):
      raise MissingFileError(f"run folder {run_dir!r} has no {k}.npy (see README, 'Run folder layout')")
  loss = load_npy(paths["losses"], mmap=mmap)
  if loss.ndim != 3:
    raise InputError(f"{paths['losses']}: expected per-token losses shaped [M, N, T], got {loss.shape}")
  if not np.issubdtype(loss.dtype, np.floating):
    raise InputError(f"{paths['losses']}: expected floating-point losses, got dtype {loss.dtype}")
  keep = load_npy(paths["keep"])
  if keep.dtype != bool:
    if np.issubdtype(keep.dtype, np.integer) and np.isin(keep, (0, 1)).all():
      keep = keep.astype(bool)
    else:
      raise InputError(f"{paths['keep']}: expected a bool membership matrix, got dtype {keep.dtype}")
  if keep.shape != loss.shape[:2]:
    raise InputError(f"{paths['keep']}: shape {keep.shape} does not match losses.npy [M, N] = {loss.shape[:2]}")
  mask = None
  if os.path.exists(paths["mask"]):
    mask = load_npy(paths["mask"])
    if mask.shape != loss.shape[1:] or mask.dtype != bool:
      raise InputError(f"{paths['mask']}: expected bool [N, T] = {loss.shape[1:]}, got {mask.dtype} {mask.shape}")
  config = {}
  cfg_path = names.config_path(run_dir)
  if os.path.exists(cfg_path):
    config = load_json(cfg_path)
  return Run(loss, keep, mask, config)


def load_population(run_dir, mmap=False):
  """(population_MxZxT, population_mask_ZxT or None): RMIA's population losses beside losses.npy, checked against it
  (same M and T, floating, Z > 0; the optional mask bool [Z, T]). The losses' values are not checked here (that
  needs lira: lira.reports.population_files.load_population checks them too)."""
  path, mask_path = (os.path.join(run_dir, name) for name in names.POPULATION_FILES)
  if not os.path.exists(path):
    raise MissingFileError(f"{path} does not exist: make it with python -m experiments.population_losses "
                           f"--run_dir={run_dir} (a shadow run), make_synthetic --population_size=Z (a synthetic run), "
                           "or write your own [M, Z, T] (docs/own_losses.md)")
  losses_path = os.path.join(run_dir, names.LOSSES)
  if not os.path.exists(losses_path):
    raise MissingFileError(f"run folder {run_dir!r} has no losses.npy (see README, 'Run folder layout')")
  loss_shape = load_npy(losses_path, mmap=True).shape
  population = load_npy(path, mmap=mmap)
  if not np.issubdtype(population.dtype, np.floating):
    raise InputError(f"{path}: expected floating-point losses, got dtype {population.dtype}")
  if population.ndim != 3 or len(loss_shape) != 3 or (population.shape[0], population.shape[2]) != (
      loss_shape[0], loss_shape[2]):
    raise InputError(f"{path}: expected [M, Z, T] with M and T of losses.npy {tuple(loss_shape)}, got "
                     f"{population.shape}")
  if population.shape[1] == 0:
    raise InputError(f"{path}: holds no population sequence (Z = 0)")
  mask = None
  if os.path.exists(mask_path):
    mask = load_npy(mask_path)
    if mask.shape != population.shape[1:] or mask.dtype != bool:
      raise InputError(f"{mask_path}: expected bool [Z, T] = {population.shape[1:]}, got {mask.dtype} {mask.shape}")
  return population, mask


def population_fingerprint(run_dir):
  """Which population a report was made from: the first 16 hex digits of the SHA-256 of RUN_DIR/population_losses.npy
  (and population_mask.npy, where present); None for a run without one."""
  paths = [os.path.join(run_dir, name) for name in names.POPULATION_FILES]
  if not os.path.exists(paths[0]):
    return None
  return _sha256(paths)


def run_fingerprint(run_dir):
  """Which arrays a result was computed from: the first 16 hex digits of the SHA-256 of RUN_DIR/losses.npy, keep.npy
  and mask.npy (where present), in that order (one read of each file)."""
  return _sha256([os.path.join(run_dir, name) for name in (names.LOSSES, names.KEEP, names.MASK)])


def _sha256(paths):
  """The first 16 hex digits of the SHA-256 of the files that exist among `paths`, read in order."""
  digest = hashlib.sha256()
  for path in filter(os.path.exists, paths):
    with open(path, "rb") as f:
      for chunk in iter(lambda: f.read(1 << 24), b""):
        digest.update(chunk)
  return digest.hexdigest()[:16]


def finished_groups(run_dir):
  """Indices of the groups whose losses file exists in RUN_DIR/losses (each written last: the group is done)."""
  folder = os.path.join(run_dir, names.LOSSES_DIR)
  if not os.path.isdir(folder):
    return []
  return sorted(g for g in map(names.group_index, os.listdir(folder)) if g is not None)


def check_complete(run_dir):
  """Refuse a shadow run that experiments.train_shadows has not finished: losses.npy is assembled only when every
  group is done, so group files without it are a run still training or stopped, never read as a run of the
  groups that happen to exist."""
  if os.path.exists(os.path.join(run_dir, names.LOSSES)):
    return
  done = finished_groups(run_dir)
  if not done:
    return
  try:
    shadow = load_config(run_dir).get("shadow", {})
    total = -(-int(shadow["num_models"]) // int(shadow["group_size"]))
    of = f"groups done: {len(done)} of {total}"
  except (UserError, KeyError, TypeError, ValueError, ZeroDivisionError):
    of = f"groups done: {len(done)}"
  raise InputError(f"run folder {run_dir} is an unfinished shadow run: it has no losses.npy, which "
                   f"experiments.train_shadows assembles once every group is done ({of} in {run_dir}/losses); "
                   f"resume it with the same train_shadows command (--run_dir={run_dir}), or take its finished "
                   f"models as a run of their own with python -m experiments.partial_run --run_dir={run_dir} "
                   "--out_run_dir=NEW")


def check_no_run(run_dir, flag="--overwrite"):
  """Refuse to write a new run into a folder that already holds one (hours of training lost to a typo)."""
  found = [f for f in names.RUN_FILES if os.path.exists(os.path.join(run_dir, f))]
  if found:
    raise InputError(f"{run_dir} already holds a run ({', '.join(found)}); choose another folder, or pass {flag} "
                     "to replace it")


def save_run(run_dir, arrays, config):
  """Write a run folder: `arrays` {file name (run_folder.names): array or None} and config.json, losses.npy last
  (a folder without it is no run). The file of a None array is removed: a replaced run's mask, membership or
  population would apply to the new losses. Returns the paths written."""
  if arrays.get(names.LOSSES) is None:
    raise ValueError("save_run needs the run's losses.npy")
  written = []
  for name in sorted(arrays, key=lambda n: n == names.LOSSES):
    if name == names.LOSSES:
      atomic.save_json(names.config_path(run_dir), config)
      written.append(names.config_path(run_dir))
    path = os.path.join(run_dir, name)
    if arrays[name] is None:
      atomic.remove_files(run_dir, [name])
    else:
      atomic.save_npy(path, arrays[name])
      written.append(path)
  return written
