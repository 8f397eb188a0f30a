"""Add RMIA's population to a finished shadow run without retraining: draw it, score it on every model's checkpoint.

python -m experiments.population_losses --run_dir=DIR [--size=Z] [--source=auto|heldout] [--overwrite]
Writes DIR/population.npy (the Z sequences, or images, that no model trains on and that are never canaries) and
DIR/population_losses.npy [M, Z, T] (each model's per-token losses of them, computed as train_shadows computes the
canaries' losses), and records `population` in DIR/config.json; the files equal those of a run trained with the
population on (training/population_run.py). Resumes: a group already scored is skipped. A run that already has
this population is left as it is.

--overwrite replaces a population of other settings as one set (training.population_run.add_population): the new one
is built in DIR/population_overwrite/, which stands for the run (run_folder.staging), and renamed over the old files
and config.json only once complete. Stopped before, the run keeps its old population and the same command resumes the
new one. The reports made from the replaced population are named (lira.reports.population_files).
"""


from absl import flags
from absl import logging

from experiments import cli
from lira.reports import population_files
from lira.reports import provenance
import run_folder
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


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint restore at INFO
  run_dir = FLAGS.run_dir
  config = run_folder.load_config(run_dir, "not a run folder of experiments.train_shadows")
  replacement = _replacement(config) if FLAGS.overwrite else None
  there, (size, source), paths = population_run.add_population(run_dir, FLAGS.size, FLAGS.source, FLAGS.overwrite,
                                                               FLAGS.progress)
  replaced = "" if replacement is None else ", in place of its population of {} (source {})".format(*replacement[0])
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
