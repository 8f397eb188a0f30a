"""A group's stacked parameters on disk: an orbax checkpoint in a one-process run, a folder of one .npy per
parameter in a jax.distributed run (orbax saves from each process only its part of global arrays, not the groups a
process trains alone). Both restore shard by shard onto the devices a target names."""

import os

import jax
import numpy as np
import orbax.checkpoint as ocp

import run_folder
from lira.errors import InputError


def checkpointer():
  """Orbax checkpointer of this process alone (no barrier waits for other processes)."""
  me = jax.process_index()
  return ocp.StandardCheckpointer(multiprocessing_options=ocp.options.MultiprocessingOptions(
    primary_host=me, active_processes={me}))


def npy_name(path):
  """The file name of the parameter at pytree `path` in a .npy folder ("layers.0.kernel.npy")."""
  return "".join(str(getattr(k, "key", k)) + "." for k in path) + "npy"


def save(ckpt, params):
  """Save a group's stacked params (a pure dict). One process: orbax, which writes to a temporary folder and renames
  it when complete. A jax.distributed run: one .npy per parameter in a folder renamed into place when complete."""
  if jax.process_count() == 1:
    orbax = checkpointer()
    orbax.save(ckpt, params)
    orbax.wait_until_finished()
    return
  tmp = f"{ckpt}.tmp-{os.getpid()}"
  for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
    run_folder.save_npy(os.path.join(tmp, npy_name(path)), jax.device_get(x))
  os.replace(tmp, ckpt)


def restore(ckpt, target):
  """A group's params restored into `target` (a pure dict of ShapeDtypeStructs with shardings), each device reading
  only its shards: orbax with the sharded target, or the .npy folder memory-mapped and cut shard by shard."""
  if not os.path.exists(os.path.join(ckpt, "_CHECKPOINT_METADATA")):
    def one(path, t):
      array = run_folder.load_npy(os.path.join(ckpt, npy_name(path)), mmap=True)
      if array.shape != t.shape or array.dtype != t.dtype:
        raise InputError(f"{ckpt}/{npy_name(path)}: {array.dtype} {array.shape}, the model needs {t.dtype} {t.shape}")
      return jax.make_array_from_callback(t.shape, t.sharding, lambda index: np.asarray(array[index]))
    return jax.tree_util.tree_map_with_path(one, target)
  with run_folder.ctrl_c_held():
    return checkpointer().restore(ckpt, target)
