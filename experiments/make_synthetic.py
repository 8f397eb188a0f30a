"""Write a synthetic run folder (correlated Gaussian per-token logits with a known membership shift).

python -m experiments.make_synthetic --run_dir=runs/synthetic [--num_models=32 --num_canaries=2000 --seq_len=32]
See lira/synthetic.py for the generating model. Beside the canaries' losses it writes RMIA's population:
population_losses.npy [M, Z, T] of Z = --population_size sequences OUT for every model (default N // 4).
"""

from absl import flags

from experiments import cli
from lira.reports import synthetic_run

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", "runs/synthetic", "Folder to write losses.npy, keep.npy, population_losses.npy, "
                    "config.json into.")
flags.DEFINE_integer("num_models", 32, "M, number of shadow models (half of them IN for each canary).")
cli.check_range("num_models", 6, even=True)  # leave-one-out needs every canary IN for 3 models and OUT for 3
flags.DEFINE_integer("num_canaries", 2000, "N, number of canaries.")
cli.check_range("num_canaries", 1)
flags.DEFINE_integer("seq_len", 32, "T, positions per canary.")
cli.check_range("seq_len", 1)
flags.DEFINE_float("rho", 0.6, "AR(1) correlation between neighbouring tokens.")
cli.check_range("rho", -1, 1, low_open=True, high_open=True)  # |rho| = 1: a singular correlation matrix
flags.DEFINE_float("shift", 1.0, "Membership shift of the affected tokens' logits, in standard deviations.")
cli.check_range("shift")
flags.DEFINE_float("frac_shifted", 0.25, "Fraction of positions a membership shifts.")
cli.check_range("frac_shifted", 0, 1)
flags.DEFINE_float("frac_canaries", 1.0, "Fraction of canaries whose membership shifts their losses; the others "
                   "carry no signal (config.json's shifted_canaries names the shifted ones when it is below 1).")
cli.check_range("frac_canaries", 0, 1)
flags.DEFINE_enum("shift_units", "std", ["std", "logit"], "The shift in each position's standard deviations or in "
                  "logit units (the same raise at every shifted position).")
flags.DEFINE_integer("population_size", None, "Z, sequences of RMIA's population (OUT for every model) written to "
                     "population_losses.npy; default N // 4 (--num_canaries // 4), 0: none.")
cli.check_range("population_size", 0)
flags.DEFINE_bool("ragged", False, "Canaries (and population sequences) of different lengths (writes mask.npy and "
                  "population_mask.npy).")
flags.DEFINE_integer("seed", 0, "Seed (keep matrix and data).")
cli.check_range("seed", 0)
flags.DEFINE_bool("overwrite", False, "Replace a run already in --run_dir (refused otherwise).")
flags.DEFINE_bool("progress", True, "Show progress bars (this command draws none; accepted as by every command).")


def main(argv):
  del argv
  config = synthetic_run.write_synthetic_run(
      FLAGS.run_dir, num_models=FLAGS.num_models, num_canaries=FLAGS.num_canaries, seq_len=FLAGS.seq_len,
      overwrite=FLAGS.overwrite, rho=FLAGS.rho, shift=FLAGS.shift, shift_units=FLAGS.shift_units,
      frac_shifted=FLAGS.frac_shifted, frac_canaries=FLAGS.frac_canaries, ragged=FLAGS.ragged, seed=FLAGS.seed, population_size=FLAGS.population_size)
  print(f"Wrote synthetic run to {FLAGS.run_dir}: {config}")


if __name__ == "__main__":
  cli.run(main)
