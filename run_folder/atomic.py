"""Writing files atomically (a temporary name in the same folder, then a rename), with the permissions a plain write
gives and a Ctrl-C held until the file is in place; checks of a folder before long work; removing files by name."""

import contextlib
import csv
import io
import json
import os
import signal
import tempfile
import threading

import numpy as np

from run_folder.errors import InputError


def _umask():
  """The process's file-creation mask (read by setting it and restoring it at once)."""
  mask = os.umask(0)
  os.umask(mask)
  return mask


@contextlib.contextmanager
def ctrl_c_held(deliver=True):
  """Hold a Ctrl-C (SIGINT) that arrives inside the block until the block is done, then deliver it: a write is never
  cut between creating its temporary file and renaming or removing it, and orbax's checkpoint reads are never cut
  (interrupted, orbax closes its event loop under reads still in flight, which then report the closed loop or lose
  the interrupt). deliver=False drops it instead: the block is a command's last work (its report set), and a Ctrl-C
  that lands there comes after the work, so it is not a stop. Only the main thread sets signal handlers."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  held = []
  previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)
    if held and deliver:
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
  with ctrl_c_held():
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


def copy_file(source, destination):
  """Copy a run file (canaries.npy, tokenizer.json, ...) byte for byte, written atomically."""
  with open(source, "rb") as f:
    save_bytes(destination, f.read())


def remove_files(folder, names):
  """Remove folder/name for each name (a path relative to folder, e.g. losses/group_0000_population.npy) that
  exists; returns the paths removed."""
  removed = []
  for name in names:
    path = os.path.join(folder, name)
    if os.path.exists(path):
      os.remove(path)
      removed.append(path)
  return removed


def check_writable(folder, hint="choose another folder with --out_dir"):
  """Refuse, before any long work, a folder the results cannot be written into (created if missing)."""
  try:
    os.makedirs(folder, exist_ok=True)
  except OSError as e:
    raise InputError(f"cannot create the output folder {folder}: {e.strerror}; {hint}") from e
  with ctrl_c_held():  # a Ctrl-C between creating the probe and removing it would leave it behind
    try:
      fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
    except OSError as e:
      raise InputError(f"cannot write into {folder}: {e.strerror}; {hint}") from e
    os.close(fd)
    os.remove(probe)
