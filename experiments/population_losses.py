"""Add RMIA's population to a finished shadow run without retraining: draw it, score it on every model's checkpoint.

python -m experiments.population_losses --run_dir=DIR [--size=Z] [--source=auto|heldout]
Writes DIR/population.npy (the Z sequences, or images, that no model trains on and that are never canaries) and
DIR/population_losses.npy [M, Z, T] (each model's per-token losses of them, computed as train_shadows computes the
canaries' losses), and records `population` in DIR/config.json; the files equal those of a run trained with the
population on (training/population_run.py). Resumes: a group already scored is skipped. A run that already has
this population is left as it is.
"""

from absl import flags
from absl import logging

from experiments import cli
from lira.reports import provenance
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
                  "otherwise).")
flags.DEFINE_bool("progress", True, "Show a progress bar over the groups.")
flags.mark_flag_as_required("run_dir")


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint restore at INFO
  there, (size, source), paths = population_run.add_population(FLAGS.run_dir, FLAGS.size, FLAGS.source,
                                                               FLAGS.overwrite, FLAGS.progress)
  what = f"a population of {size} (source {source})"
  if there:
    print(f"{FLAGS.run_dir} already has {what}: {paths[1]}; nothing to do")
    return
  print(f"{what} scored on every model of {FLAGS.run_dir}")
  print(provenance.wrote(paths))


if __name__ == "__main__":
  cli.run(main, resumes=True)
