"""The first finished models of a shadow run as a run folder of their own, for evaluating a run stopped early.

python -m experiments.partial_run --run_dir=DIR --out_run_dir=NEW [--num_models=K] [--drop_canaries=I,J,...]
Stacks the first K models' canary losses (RUN_DIR/losses/group_*.npy, written as each group finishes) into
NEW/losses.npy [K, N, T] beside keep.npy[:K], the canaries, mask and tokenizer, and a config.json with
shadow.num_models = K and a `partial_of` entry naming the source run (training/partial.py). Default K: every
model of the leading finished groups. A folder with losses.npy and no group files (another partial run) gives its
first K rows, any K from 6 to M. Every command then reads NEW as a K-model run, e.g.
python -m experiments.evaluate --run_dir=NEW. The source run is not touched and can be resumed.
--drop_canaries leaves out those canaries (indices in DIR) from every per-canary array, e.g. to test whether a few
canaries cause a ranking; config.json's partial_of.dropped_canaries lists them.
"""

from absl import app
from absl import flags

from experiments import cli
from lira.reports import provenance
from training import partial

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder of experiments.train_shadows (finished or not), or a partial run.")
flags.DEFINE_string("out_run_dir", None, "New run folder for the first K models.")
flags.DEFINE_integer("num_models", None, "K, a multiple of the run's group size; default all leading finished models.")
flags.DEFINE_list("drop_canaries", [], "Canary indices (of RUN_DIR) to leave out, e.g. 90,1185; default none.")
cli.check_range("num_models", partial.MIN_MODELS)  # what the leave-one-out evaluation needs (training/partial.py)
flags.DEFINE_bool("progress", True, "Show progress bars (this command draws none; accepted as by every command).")


def main(argv):
  del argv
  if not FLAGS.run_dir or not FLAGS.out_run_dir:
    raise app.UsageError("--run_dir and --out_run_dir are required")
  config, paths = partial.write_partial_run(FLAGS.run_dir, FLAGS.out_run_dir, FLAGS.num_models,
                                            FLAGS.drop_canaries)
  source = config["partial_of"]
  dropped = (f", without {len(source['dropped_canaries'])} of its {source['num_canaries']} canaries"
             if source.get("dropped_canaries") else "")
  print(f"the first {config['shadow']['num_models']} of {source['num_models']} models of "
        f"{FLAGS.run_dir}{dropped} as a run folder: {FLAGS.out_run_dir}")
  print(provenance.wrote(paths))


if __name__ == "__main__":
  cli.run(main)
