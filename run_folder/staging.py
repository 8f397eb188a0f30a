"""Some of a run's files replaced as one set: built in a staging folder inside the run folder that stands for the run,
then renamed over the run's own.

The staging folder holds a relative link to every entry of the run folder except the files being replaced (a folder
holding some of them is made in the staging folder, its other entries linked the same way), so code that reads and
writes a run folder works on it unchanged while the run's own files stay as they are. `swap_in` renames the new
files over the run's, a Ctrl-C held until every one is in place, and removes the staging folder. Stopped before that,
the run is as it was, and the staging folder keeps what was built (each file written atomically) for the same work to
resume.
"""

import os
import shutil

from run_folder import atomic


def stage(run_dir, name, replaced):
  """Make RUN_DIR/name afresh (a folder left there is removed first): the run without the `replaced` paths (relative
  to the run folder). Returns its path."""
  folder = os.path.join(run_dir, name)
  remove(folder)
  os.makedirs(folder)
  _link(run_dir, folder, {os.path.normpath(p) for p in replaced} | {name}, "")
  return folder


def _link(source, target, left_out, prefix):
  """Link every entry of `source` into `target` but those in left_out (paths relative to the run, `prefix` that of
  `source`); a folder holding a left-out path is made and its entries linked in turn."""
  for entry in sorted(os.listdir(source)):
    rel = os.path.join(prefix, entry)
    if rel in left_out:
      continue
    path = os.path.join(source, entry)
    if os.path.isdir(path) and not os.path.islink(path) and any(p.startswith(rel + os.sep) for p in left_out):
      os.mkdir(os.path.join(target, entry))
      _link(path, os.path.join(target, entry), left_out, rel)
    else:
      os.symlink(os.path.relpath(path, target), os.path.join(target, entry))


def swap_in(folder, run_dir, paths):
  """Rename `paths` (relative to both folders) from the staging folder over the run's, in order, then remove the
  staging folder; a Ctrl-C meanwhile is held until all of it is done."""
  with atomic.ctrl_c_held():
    for path in paths:
      os.replace(os.path.join(folder, path), os.path.join(run_dir, path))
    remove(folder)


def remove(folder):
  """Remove a staging folder, if there is one: its links, never what they point to."""
  if os.path.lexists(folder):
    shutil.rmtree(folder)
