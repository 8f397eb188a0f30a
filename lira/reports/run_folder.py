"""The run folder: the one module that reads and writes its files (LiRA's inputs, a shadow run's group files,
atomic writes of results).

A shadow run keeps each group's files here (training/pipeline.py writes them, training/partial.py and
training/shadow_model.py read them):
RUN_DIR/checkpoints/group_GGGG  orbax checkpoint of group G's parameters
RUN_DIR/losses/group_GGGG.npy   its canary losses [G, N, T], written last: the group is done when it exists
RUN_DIR/losses/group_GGGG_<stat>.npy  a language model's per-token extras (mu, sigma) beside them
RUN_DIR/losses/group_GGGG_population.npy  its losses of RMIA's population [G, Z, T] (training/population.py)
"""

import contextlib
import csv
import dataclasses
import io
import json
import os
import signal
import tempfile
import threading

import numpy as np

from lira import checks
from lira import synthetic
from lira.errors import InputError, MissingFileError, UserError


@dataclasses.dataclass(frozen=True)
class Run:
  loss_MxNxT: np.ndarray
  keep_MxN: np.ndarray
  mask_NxT: np.ndarray | None
  config: dict


def load_npy(path, mmap=False):
  """Load an .npy file without pickle; a damaged or pickled file is refused with its path named."""
  try:
    return np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
  except ValueError as e:
    if "allow_pickle" in str(e) or "pickle" in str(e).lower():
      raise InputError(f"{path}: holds pickled objects, which seqlira never loads (it cannot load without pickle); "
                       "store plain numeric arrays") from e
    raise InputError(f"{path}: cannot be read as an .npy array ({e}); is the file truncated or still being "
                     "written?") from e
  except (EOFError, OSError) as e:
    raise InputError(f"{path}: cannot be read as an .npy array ({e})") from e


def load_run(run_dir, mmap=False):
  """Load losses.npy [M, N, T], keep.npy [M, N], optional mask.npy [N, T] and config.json; check shapes."""
  if not os.path.isdir(run_dir):
    raise MissingFileError(f"run folder {run_dir!r} does not exist")
  paths = {k: os.path.join(run_dir, f"{k}.npy") for k in ("losses", "keep", "mask")}
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
  cfg_path = config_path(run_dir)
  if os.path.exists(cfg_path):
    config = load_json(cfg_path)
  return Run(loss, keep, mask, config)


POPULATION_FILES = ("population_losses.npy", "population_mask.npy")


def load_population(run_dir, mmap=False):
  """(population_MxZxT, population_mask_ZxT or None): RMIA's population losses beside losses.npy, checked against it
  (same M and T, floating, finite and >= 0 at scored positions; the optional mask bool [Z, T])."""
  path, mask_path = (os.path.join(run_dir, name) for name in POPULATION_FILES)
  if not os.path.exists(path):
    raise MissingFileError(f"{path} does not exist: make it with python -m experiments.population_losses "
                           f"--run_dir={run_dir} (a shadow run), make_synthetic --population_size=Z (a synthetic run), "
                           "or write your own [M, Z, T] (docs/own_losses.md)")
  losses_path = os.path.join(run_dir, "losses.npy")
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
  checks.check_losses(population, mask, item="population sequence", mask_file="population_mask.npy")
  return population, mask


def finished_groups(run_dir):
  """Indices of the groups whose losses file exists in RUN_DIR/losses (each written last: the group is done)."""
  folder = os.path.join(run_dir, "losses")
  if not os.path.isdir(folder):
    return []
  names = (n[len("group_"):-len(".npy")] for n in os.listdir(folder) if n.startswith("group_") and n.endswith(".npy"))
  return sorted(int(g) for g in names if g.isdigit())


def check_complete(run_dir):
  """Refuse a shadow run that experiments.train_shadows has not finished: losses.npy is assembled only when every
  group is done, so group files without it are a run still training or stopped, never read as a run of the
  groups that happen to exist."""
  if os.path.exists(os.path.join(run_dir, "losses.npy")):
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


def config_path(run_dir):
  """RUN_DIR/config.json: the config that wrote the run."""
  return os.path.join(run_dir, "config.json")


def load_json(path):
  """A JSON file of the run folder (config.json, texts.json); InputError naming it when it is not valid JSON."""
  with open(path) as f:
    try:
      return json.load(f)
    except json.JSONDecodeError as e:
      raise InputError(f"{path}: not valid JSON ({e})") from e


def load_config(run_dir, missing="not a run folder"):
  """RUN_DIR/config.json as a dict. MissingFileError when the file does not exist (`missing` says what that means
  to the caller), InputError naming the file when it is not valid JSON or not a JSON object."""
  path = config_path(run_dir)
  if not os.path.exists(path):
    raise MissingFileError(f"{path} does not exist: {missing}")
  config = load_json(path)
  if not isinstance(config, dict):
    raise InputError(f"{path}: expected a JSON object (the run's config), got {type(config).__name__}")
  return config


def save_config(run_dir, config):
  """Write RUN_DIR/config.json (strict JSON, atomically)."""
  save_json(config_path(run_dir), config)


def load_stacked(paths):
  """Group files (each [G, ...], as RUN_DIR/losses/group_GGGG.npy) stacked on the model axis, read without pickle."""
  return np.concatenate([load_npy(p) for p in paths])


def copy_file(source, destination):
  """Copy a run file (canaries.npy, tokenizer.json, ...) byte for byte, written atomically."""
  with open(source, "rb") as f:
    save_bytes(destination, f.read())


def _umask():
  """The process's file-creation mask (read by setting it and restoring it at once)."""
  mask = os.umask(0)
  os.umask(mask)
  return mask


@contextlib.contextmanager
def _ctrl_c_after():
  """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block is done, then deliver it: a write is never
  cut between creating its temporary file and renaming or removing it. Only the main thread sets signal handlers."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  held = []
  previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)
    if held:
      if callable(previous):
        previous(signal.SIGINT, held[0])
      elif previous == signal.SIG_DFL:
        raise KeyboardInterrupt


def _atomic(path, write_fn, mode):
  """Write through a temporary file in the same folder, then rename it over `path`; a Ctrl-C during the write is
  delivered once the file is in place (or the temporary file removed, if the write failed).

  mkstemp creates its file readable by the owner only; the file gets the permissions a plain open() would
  give (0666 minus the umask), so collaborators on a shared file system can read the results.
  """
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with _ctrl_c_after():
    _write_replace(path, write_fn, mode, directory)


def _write_replace(path, write_fn, mode, directory):
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".", suffix=".tmp")
  try:
    os.fchmod(fd, 0o666 & ~_umask())
    with os.fdopen(fd, mode) as f:
      write_fn(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


RUN_FILES = ("losses.npy", "keep.npy", "mask.npy", "config.json")


def check_no_run(run_dir, flag="--overwrite"):
  """Refuse to write a new run into a folder that already holds one (hours of training lost to a typo)."""
  found = [f for f in RUN_FILES if os.path.exists(os.path.join(run_dir, f))]
  if found:
    raise InputError(f"{run_dir} already holds a run ({', '.join(found)}); choose another folder, or pass {flag} "
                     "to replace it")


def check_writable(folder, hint="choose another folder with --out_dir"):
  """Refuse, before any long work, a folder the results cannot be written into (created if missing)."""
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    raise InputError(f"cannot create the output folder {folder}: {e.strerror}; {hint}") from e
  try:
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
  except OSError as e:
    raise InputError(f"cannot write into {folder}: {e.strerror}; {hint}") from e
  os.close(fd)
  os.remove(probe)


def save_npy(path, array):
  """Write an .npy file atomically (temporary name, then rename); never pickled."""
  _atomic(path, lambda f: np.save(f, np.asarray(array), allow_pickle=False), "wb")


def standard_json(obj):
  """A copy of obj that standard JSON can hold: NaN and infinities become None, numpy values plain Python."""
  if isinstance(obj, dict):
    return {k: standard_json(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [standard_json(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return standard_json(obj.tolist())
  if isinstance(obj, np.generic):
    obj = obj.item()
  if isinstance(obj, float) and not np.isfinite(obj):
    return None
  return obj


def save_json(path, obj):
  """Write strict JSON atomically (missing values as null; a bare NaN, which strict parsers reject, never)."""
  text = json.dumps(standard_json(obj), indent=2, sort_keys=True, allow_nan=False)
  _atomic(path, lambda f: f.write(text.encode()), "wb")


def save_text(path, text):
  """Write a text file atomically."""
  save_bytes(path, text.encode())


def save_bytes(path, data):
  """Write bytes atomically."""
  _atomic(path, lambda f: f.write(data), "wb")


def save_figure(path, fig):
  """Save a matplotlib figure atomically as PNG."""
  _atomic(path, lambda f: fig.savefig(f, format="png", dpi=130, bbox_inches="tight"), "wb")


def save_csv(path, rows):
  """Write a list of dicts as CSV atomically (columns from the first row)."""
  buf = io.StringIO()
  writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
  writer.writeheader()
  writer.writerows(rows)
  save_text(path, buf.getvalue())


def write_synthetic_run(run_dir, overwrite=False, population_size=None, **kwargs):
  """Write losses.npy, keep.npy, (mask.npy), population_losses.npy [M, Z, T] (population_mask.npy with ragged
  canaries) and config.json of a synthetic run; returns the config. population_size Z: default N // 4; 0: none.

  A folder that already holds a run is refused unless `overwrite`; then stale mask and population files are removed.
  """
  if not overwrite:
    check_no_run(run_dir)
  check_writable(run_dir, "choose another --run_dir")
  loss_MxNxT, keep_MxN, mask_NxT = synthetic.synthetic_losses(**kwargs)
  M, N, T = loss_MxNxT.shape
  Z = N // 4 if population_size is None else int(population_size)
  population = None
  if Z:
    population = synthetic.synthetic_population(M, Z, T, **{k: kwargs[k] for k in ("rho", "ragged", "seed")
                                                            if k in kwargs})
  config = {"source": "synthetic", "generator": "lira.synthetic.synthetic_losses", "num_models": M,
            "num_canaries": N, "seq_len": T, "population_size": Z,
            **{k: v for k, v in kwargs.items() if k not in ("num_models", "num_canaries", "seq_len")}}
  arrays = {"losses": loss_MxNxT, "keep": keep_MxN, "mask": mask_NxT,
            "population_losses": None if population is None else population[0],
            "population_mask": None if population is None else population[1]}
  for name, array in arrays.items():
    path = f"{run_dir}/{name}.npy"
    if array is not None:
      save_npy(path, array)
    elif os.path.exists(path):  # a replaced run's mask or population would apply to the new losses
      os.remove(path)
  save_json(f"{run_dir}/config.json", config)
  return config


# A shadow run's groups: pure path arithmetic, no model code.
def groups(num_models, group_size, process_id=0, num_processes=1):
  """(group index, model ids) of a process's share: groups g with g % num_processes == process_id."""
  starts = range(0, num_models, group_size)
  every = [(g, list(range(s, min(s + group_size, num_models)))) for g, s in enumerate(starts)]
  return [(g, ids) for g, ids in every if g % num_processes == process_id]


def group_paths(run_dir, g):
  """Checkpoint folder and losses file of group g; the losses file is written last and marks the group done."""
  return (os.path.abspath(os.path.join(run_dir, "checkpoints", f"group_{g:04d}")),
          os.path.join(run_dir, "losses", f"group_{g:04d}.npy"))


def stat_path(losses_path, stat):
  """mu / sigma of a group, beside its losses file."""
  return losses_path[:-len(".npy")] + f"_{stat}.npy"
