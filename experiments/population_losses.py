"""Add RMIA's population to a finished shadow run without retraining: draw it, score it on every model's checkpoint.

python -m experiments.population_losses --run_dir=DIR [--size=Z] [--source=auto|heldout] [--overwrite]
Writes DIR/population.npy (the Z sequences, or images, that no model trains on and that are never canaries) and
DIR/population_losses.npy [M, Z, T] (each model's per-token losses of them, computed as train_shadows computes the
canaries' losses), and records `population` in DIR/config.json; the files equal those of a run trained with the
population on (training/population_run.py). Resumes: a group already scored is skipped. A run that already has
this population is left as it is.

--overwrite replaces a population of other settings as one set: the new one is built in
DIR/population_overwrite/, which stands for the run (run_folder.staging), and renamed over the old files and
config.json only once complete. Stopped before, the run keeps its old population and the same command resumes the new
one. The reports made from the replaced population are named (lira.reports.population_files).
"""

import os

from absl import flags
from absl import logging

from experiments import cli
from lira.errors import UserError
from lira.reports import population_files
from lira.reports import provenance
import run_folder
from run_folder import names
from training import population
from training import population_run

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "A finished run folder of experiments.train_shadows (with its checkpoints).")
flags.DEFINE_integer("size", None, f"Z, the population's size; default the run's recorded one, else "
                     f"{population.DEFAULT_SIZE}.")
cli.check_range("size", 1)
flags.DEFINE_enum("source", None, list(population.SOURCES), "auto: the canaries' own distribution (worst-case: fresh "
                  "random sequences; average-case: held-out sequences not chosen as canaries); heldout: held-out "
                  "sequences that are not canaries. Default the run's recorded one, else auto.")
flags.DEFINE_bool("overwrite", False, "Replace a population the run already has with other settings (refused "
                  "otherwise); the old one stays until the new one is complete.")
flags.DEFINE_bool("progress", True, "Show a progress bar over the groups.")
flags.mark_flag_as_required("run_dir")


def _replacement(config):
  """((size, source) the run has, (size, source) asked) when the flags ask for another population than the one the
  run's config records; None when it records none, or this one."""
  block = config.get("population") or {}
  if not block.get("size"):
    return None
  have = (block["size"], block.get("source", "auto"))
  asked = (FLAGS.size if FLAGS.size is not None else have[0], FLAGS.source or have[1])
  return None if asked == have else (have, asked)


def _population_files(config):
  """The run's files that hold its population, relative to the run folder (each group's losses of it included)."""
  shadow = config.get("shadow") or {}
  groups = run_folder.groups(shadow["num_models"], shadow["group_size"]) if "num_models" in shadow else []
  return [names.population_group_path(names.group_losses_file(g)) for g, _ in groups] + [
      names.POPULATION, names.POPULATION_LOSSES, names.POPULATION_MASK]


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


def _replace(run_dir, config, size, source):
  """Build the population of (size, source) in the staging folder, then swap it in, config.json last; the paths of
  population.npy and population_losses.npy in the run."""
  folder = _staged(run_dir, config, size, source)
  try:
    _, _, paths = population_run.add_population(folder, size, source, progress=FLAGS.progress)
  except Exception as e:  # noqa: BLE001 - a refusal (or a bug): nothing of it is left; a Ctrl-C keeps it to resume
    run_folder.staging.remove(folder)
    if isinstance(e, UserError):  # said of the staging folder: said of the run, which the user named
      raise type(e)(str(e).replace(folder, run_dir)) from e
    raise
  built = [p for p in _population_files(config) if os.path.isfile(os.path.join(folder, p))
           and not os.path.islink(os.path.join(folder, p))]
  run_folder.staging.swap_in(folder, run_dir, built + [names.CONFIG])
  return [os.path.join(run_dir, os.path.relpath(p, folder)) for p in paths]


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint restore at INFO
  run_dir = FLAGS.run_dir
  config = run_folder.load_config(run_dir, "not a run folder of experiments.train_shadows")
  replacement = _replacement(config) if FLAGS.overwrite else None
  if replacement is None:
    if FLAGS.overwrite:  # an earlier --overwrite's unfinished population, no longer asked for
      run_folder.staging.remove(os.path.join(run_dir, names.POPULATION_STAGING_DIR))
    there, (size, source), paths = population_run.add_population(run_dir, FLAGS.size, FLAGS.source, FLAGS.overwrite,
                                                                 FLAGS.progress)
    replaced = ""
  else:
    (old_size, old_source), (size, source) = replacement
    paths, there = _replace(run_dir, config, size, source), False
    replaced = f", in place of its population of {old_size} (source {old_source})"
  what = f"a population of {size} (source {source})"
  if there:
    print(f"{run_dir} already has {what}: {paths[1]}; nothing to do")
    return
  print(f"{what} scored on every model of {run_dir}{replaced}")
  print(provenance.wrote(paths))
  if note := population_files.stale_note([run_dir], run_dir):
    print(note)


if __name__ == "__main__":
  cli.run(main, resumes=True)
