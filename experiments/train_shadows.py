"""Train M shadow models with planted canaries, record per-token losses, and run leave-one-out LiRA.

python -m experiments.train_shadows                      # CPU default, minutes on 2 cores
python -m experiments.train_shadows --config=experiments/configs/lstm.py:paper --run_dir=runs/paper
python -m experiments.train_shadows --config=experiments/configs/pythia.py:pythia_tiny   # fine-tuned GPT-NeoX, CPU
python -m experiments.train_shadows --config=experiments/configs/llama.py:tiny --config.train.lora.rank=8  # LoRA copies
python -m experiments.train_shadows --config=experiments/configs/pixelcnn.py:cpu   # PixelCNN++ on digits, CPU

--config=FILE[:VARIANT]; FILE is found as given, in the installed package, or by name (lstm, pythia, gpt2, llama,
pixelcnn):
  lstm.py      cpu (default), paper, tiny, reproduce_worst, reproduce_average  (also pythia, pythia_tiny)
  pythia.py    pythia_tiny (default), pythia, tiny, reproduce_worst, reproduce_average
  gpt2.py      gpt2_tiny (default), gpt2 (GPT-2 small from the hub), tiny
  llama.py     llama_tiny (default), smollm2 (SmolLM2-1.7B from the hub), tiny
  pixelcnn.py  cpu (default), paper, tiny, reproduce_worst, reproduce_average
--config.SECTION.FIELD=VALUE overrides one field of the config, e.g. --config.shadow.num_models=64
  --config.canaries.kind=average --config.train.epochs=3; the fields are those of the config file (sections data,
  tokenizer, canaries, shadow, model, train, ...), recorded in RUN_DIR/config.json (docs/shadow_models.md).
RMIA's population (config.population: Z sequences no model trains on) is scored on every model into
RUN_DIR/population_losses.npy; a run folder from before that block resumes without one unless --config.population.*
is given (experiments.population_losses adds one to a finished run).
--config.shadow.group_size=auto: the largest group that fits the device's memory (training.group_plan); =fastest: the
group that fits and trains the run fastest, timed on the device; either recorded in RUN_DIR/config.json. --plan prints
the plan (memory and FLOPs per group size, the step time, the estimated training time) and exits without training.
Without progress bars (--noprogress) a line is still printed when resuming and for each finished group.
Re-running the same command on the same --run_dir resumes; several hosts share the groups with
--num_processes/--process_id (and --coordinator_address for jax.distributed), or as the cluster describes them:
--cluster=auto (jax.distributed.initialize() finds Slurm under srun, Open MPI under mpirun, a Cloud TPU pod) or
--cluster=slurm_array (each task of `sbatch --array=0-7` trains its share of the groups; the last to finish, or a later
run without --cluster, assembles): experiments/process_flags.py, docs/shadow_models.md "Many processes". SIGTERM keeps
the finished groups and exits with status 143, Ctrl-C (SIGINT) the same with status 130 (training.preemption).
"""

import importlib.util
import os
import sys

from absl import app
from absl import flags
from absl import logging

from experiments import cli
from experiments import process_flags
from lira.reports import loo_report
import run_folder
from lira.errors import InputError, UserError
from training import group_files
from training import group_plan
from training import pipeline
from training import population
from training import preemption
from training import run_config

_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
_DEFAULT_CONFIG = os.path.join(_CONFIG_DIR, "lstm.py")
FLAGS = flags.FLAGS
cli.define_config_file("config", _DEFAULT_CONFIG, "Run config (ml_collections file[:variant]).")
flags.DEFINE_string("run_dir", None, "Run folder; default runs/<model>_<canary kind>.")
flags.DEFINE_string("out_dir", None, "Where the evaluation reports go; default the run folder (e.g. for a read-only "
                    "finished run).")
flags.DEFINE_bool("shard_models", False, "Shard each group's model axis over all local devices (jax.sharding).")
flags.DEFINE_bool("shard_params", False, "FSDP: split every model's parameters and optimiser state, and each batch, "
                  "over all local devices; for models too large for one device per copy (Pythia-1b).")
process_flags.define("the groups", coordinated="every process waits for all groups, process 0 assembles and "
                     "evaluates")
flags.DEFINE_bool("evaluate", True, "Run the six-variant leave-one-out evaluation when all groups are done.")
flags.DEFINE_bool("progress", True, "Show progress bars.")
flags.DEFINE_bool("plan", False, "Print the group plan of the config on the local devices (memory and FLOPs per "
                  "group size, the G shadow.group_size=auto or =fastest chooses, a measured step time, the estimated "
                  "training time) and exit without training or writing anything.")

_GROUP_SIZE = "--config.shadow.group_size"
_group_size_arg = []  # the --config.shadow.group_size value, taken off argv (the config's field is typed int)

def resolve_config_path(value):
  """--config=FILE[:variant] found from any directory: as given, else relative to the installed package
  (`experiments/configs/lstm.py`), else by name in experiments/configs (`lstm.py`, `pythia`)."""
  path, sep, variant = value.partition(":")
  if os.path.isfile(path):
    return value
  package_root = os.path.dirname(os.path.dirname(_CONFIG_DIR))
  name = path if path.endswith(".py") else path + ".py"
  for candidate in (os.path.join(package_root, path), os.path.join(_CONFIG_DIR, os.path.basename(name))):
    if os.path.isfile(candidate):
      return candidate + sep + variant
  raise InputError(f"--config={value}: no config file {path!r} here, in the package, or in {_CONFIG_DIR}")


def check_config_arg(value):
  """Load --config's file and variant once up front, so a wrong name is a one-line error, not a flag traceback."""
  path, _, variant = value.partition(":")
  spec = importlib.util.spec_from_file_location("_seqlira_config_check", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module.get_config(*([variant] if variant else []))


def resolved_argv(argv):
  """argv with every --config value resolved (resolve_config_path) and checked (check_config_arg)."""
  out = list(argv)
  for i, arg in enumerate(out):
    at = i if arg.startswith("--config=") else i + 1 if arg == "--config" and i + 1 < len(out) else None
    if at is not None:
      prefix = "--config=" if at == i else ""
      value = resolve_config_path(out[at][len(prefix):])
      check_config_arg(value)
      out[at] = prefix + value
  return out


def take_group_size(argv):
  """argv without --config.shadow.group_size[=]VALUE, and VALUE (None when absent): ml_collections types the
  field by the config's value, so "auto" is applied after parsing (with_group_size)."""
  out, value = [], None
  args = iter(argv)
  for arg in args:
    if arg.startswith(_GROUP_SIZE + "="):
      value = arg[len(_GROUP_SIZE) + 1:]
    elif arg == _GROUP_SIZE:
      value = next(args, "")
    else:
      out.append(arg)
  return out, value


def make_mesh(shard_models, shard_params):
  """A one-axis mesh over the local devices: "models" (the model axis) or "fsdp" (each model's params), or None."""
  import jax
  import numpy as np
  devices = jax.local_devices()
  if len(devices) == 1 or not (shard_models or shard_params):
    return None
  return jax.sharding.Mesh(np.array(devices), ("models",) if shard_models else ("fsdp",))


def _exit_stopped(coordinated, what):
  """Leave on SIGTERM / Ctrl-C with one line, `stopped by <signal><what> (exit status N).`; a jax.distributed
  process leaves the others together (they stop within a second too)."""
  if coordinated:
    import jax
    jax.distributed.shutdown()
  print(f"stopped by {preemption.name()}{what} (exit status {preemption.exit_status()}).", file=sys.stderr)
  sys.exit(preemption.exit_status())


def _stopped_words(stage, run_dir):
  """What a stop during the run kept: nothing trained yet (data preparation), or the finished groups, counted."""
  if stage == "data":
    return " while the data was prepared: no model was trained yet. Re-run the same command to start"
  groups_dir = os.path.join(run_dir, run_folder.names.LOSSES_DIR)
  finished = len(run_folder.finished_groups(run_dir))
  if not finished:
    return (": the first group in flight was abandoned; no group had finished. Re-run the same command to start "
            "again")
  return (f": the group in flight was abandoned; {finished} finished group{'s' * (finished > 1)} kept in "
          f"{groups_dir}. Re-run the same command to resume")


def _initialize(coordinator_address, num_processes, process_id):
  """jax.distributed.initialize with JAX's preemption notifier off: SIGTERM is training.preemption's (it says why)."""
  import jax
  jax.config.update("jax_enable_preemption_service", False)
  jax.distributed.initialize(coordinator_address, num_processes, process_id)


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
  cfg = FLAGS.config
  if _group_size_arg:
    try:
      cfg = run_config.with_group_size(cfg, group_plan.parse(_group_size_arg[0]))
    except ValueError as e:
      raise app.UsageError(f"{_GROUP_SIZE}={_group_size_arg[0]}: {e}") from None
  if FLAGS.shard_models and FLAGS.shard_params:
    raise app.UsageError("--shard_models and --shard_params exclude each other: pick one")
  processes = process_flags.join(process_flags.chosen(), _initialize)
  coordinated = processes.coordinated
  if FLAGS.plan:  # nothing is trained or written
    config_arg = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--config=")), "the default config")
    print(pipeline.plan_table(cfg, make_mesh(FLAGS.shard_models, FLAGS.shard_params), FLAGS.progress,
                              title=f"group plan of {config_arg}"))
    return
  run_dir = FLAGS.run_dir or os.path.join("runs", f"{cfg.model.name}_{cfg.canaries.kind}")
  out_dir = FLAGS.out_dir or run_dir
  if FLAGS.evaluate and cfg.shadow.num_models < 6:  # checked before hours of training, not after
    raise app.UsageError(f"shadow.num_models={cfg.shadow.num_models}: the leave-one-out evaluation needs every "
                         "canary IN for at least 3 models and OUT for at least 3, so at least 6 models; train more "
                         "models or pass --noevaluate")
  pipeline.validate(cfg)
  # a run folder from before the `population` block gets one only when the command line sets it
  population_given = any(arg.startswith("--config.population") for arg in sys.argv[1:])
  cfg = run_config.recorded_group_size(run_config.effective_config(cfg, run_dir, population_given), run_dir)
  finished = group_files.is_finished(cfg, run_dir)
  if not finished:  # training writes the run folder; a finished run re-run writes nothing there (read-only is fine)
    run_folder.check_writable(run_dir, "training writes its groups, checkpoints and losses there; choose another "
                                       "--run_dir")
  if FLAGS.evaluate:
    run_folder.check_writable(out_dir, "the run is finished: pass --out_dir for the reports, or --noevaluate"
                              if finished and not FLAGS.out_dir else "choose another --out_dir for the reports")
  if group_plan.planned(cfg.shadow.group_size) and processes.process_id != 0:
    first = "the array's first task" if processes.array_task is not None else "process 0"
    print(f"{processes.name}: waiting for {first} to plan shadow.group_size={cfg.shadow.group_size} and record it in "
          f"{run_folder.config_path(run_dir)}", flush=True)
  preemption.install()
  try:
    # with a coordinator every process waits for all groups, and process 0 alone assembles losses.npy, once; without
    # one (by hand, or a Slurm array's tasks) whichever process finds every group done assembles (atomic writes of
    # the same arrays: two at once are harmless)
    complete = pipeline.run(cfg, run_dir, process_id=processes.process_id, num_processes=processes.num_processes,
                            mesh=make_mesh(FLAGS.shard_models, FLAGS.shard_params), progress=FLAGS.progress,
                            wait=coordinated, assemble_here=not coordinated, log_groups=True,
                            population_given=population_given)
  except preemption.Preempted as stop:
    _exit_stopped(coordinated, _stopped_words(stop.stage, run_dir))
  if preemption.requested():  # it came while the last group was scored or losses.npy assembled: no group is lost
    if complete and not coordinated:
      kept = f"every group is finished and {run_dir}/losses.npy assembled"
      rest = "the evaluation was not run: re-run the same command to run it" if FLAGS.evaluate else "nothing is lost"
    else:
      kept = f"this process's groups are finished in {run_dir}/losses"
      rest = "re-run the same command to assemble losses.npy" + (" and evaluate" if FLAGS.evaluate else "")
    _exit_stopped(coordinated, f" after the last group: {kept}; {rest}")
  preemption.uninstall()  # the assembly and evaluation write atomically: SIGTERM may end them at once, Ctrl-C too
  if coordinated:
    import jax
    jax.distributed.shutdown()  # every group is done; nothing below needs the other processes
    if processes.process_id != 0:
      print(f"all groups are finished in {run_dir}/losses; process 0 assembles losses.npy and evaluates")
      return
    complete = group_files.assemble(cfg, run_dir)
  if not complete and processes.array_task is not None:
    print(f"{processes.name} (share {processes.process_id} of {processes.num_processes}): its groups are done; other "
          f"groups are still missing in {run_dir}/losses. The last array task to finish assembles losses.npy"
          + (" and evaluates" if FLAGS.evaluate else "") + ", or the same command without --cluster once they are "
          "finished.")
    return
  if not complete:
    print(f"this process's groups are done; other groups are still missing in {run_dir}/losses. Re-run the command "
          "(any process) once they are finished to assemble losses.npy and evaluate.")
    return
  beside = "keep.npy, canaries.npy, config.json" + ("" if pipeline.family(cfg).data_kind == "images" else
                                                    ", tokenizer.json")
  if population.settings(cfg)[0]:
    beside += ", population.npy, population_losses.npy"
  print(f"per-position losses: {run_dir}/losses.npy; {beside} beside it")
  if FLAGS.evaluate:
    table, _ = loo_report.evaluate_run(run_dir, out_dir, progress=FLAGS.progress)
    print(table)
    print(f"\nreport: {out_dir}/results.md, {out_dir}/results.json; ROC plot: {out_dir}/roc.png")


if __name__ == "__main__":
  try:
    sys.argv, group_size = take_group_size(resolved_argv(sys.argv))
    _group_size_arg.extend([] if group_size is None else [group_size])
  except UserError as e:
    sys.exit(cli.report(e))
  cli.run(main, resumes=True)
