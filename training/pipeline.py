"""The shadow-model run: the run's data (training/run_data.py), the model (training/model_setup.py), grouped training,
checkpoints (training/checkpoints.py) and per-token losses, in one run folder (training/group_files.py stacks the
groups' files).

Stages hand over through files in the run folder (LiRA reference code style), so a killed run resumes
where it stopped: finished groups are skipped, a group whose checkpoint exists is only re-extracted,
and at most the group in flight is lost.
"""

import os
import tempfile
import time

import jax
import numpy as np
from flax import nnx

import models
import run_folder
from training import canaries as canaries_lib
from training import checkpoints
from training import dp as dp_lib
from training import group_files
from training import group_plan
from training import plan_table as plan_table_lib
from training import images as images_lib
from training import lora_config as lora_lib
from training import model_setup
from training import population as population_lib
from training import preemption
from training import run_config
from training import run_data
from training import trainer
from lira.errors import InputError, MissingFileError


def family(cfg):
  """The model family of the config (model.name); InputError for an unknown name."""
  return models.family(cfg.model.name)


def validate(cfg):
  """Checks that need no data, before anything is loaded."""
  M, G = cfg.shadow.num_models, cfg.shadow.group_size
  if M < 2 or M % 2:
    raise InputError(f"shadow.num_models must be even and >= 2 (every canary IN for exactly M/2 models), got {M}")
  if not group_plan.planned(G) and (isinstance(G, bool) or not isinstance(G, int) or G < 1):
    raise InputError(group_plan.BAD_VALUE.format(G))
  images = family(cfg).data_kind == "images"
  if not images and cfg.data.seq_len < 2:
    raise InputError(f"data.seq_len must be >= 2, got {cfg.data.seq_len}")
  if images and cfg.data.source not in images_lib.SOURCES:
    raise InputError(f"data.source must be one of {', '.join(images_lib.SOURCES)}, got {cfg.data.source!r}")
  if cfg.canaries.kind not in ("worst", "average"):
    raise InputError(f"canaries.kind must be 'worst' or 'average', got {cfg.canaries.kind!r}")
  if cfg.canaries.num_canaries < 1:
    raise InputError(f"canaries.num_canaries must be >= 1, got {cfg.canaries.num_canaries}")
  if cfg.train.get("dp") is not None:  # DP off: a field set away from its default is refused, not ignored
    dp_lib.validate(cfg.train.dp, cfg.train.batch_size)
  lora_lib.settings(cfg.train.get("lora"), family(cfg).fine_tunes)
  population_lib.validate(cfg)
  run_config.compute_dtype(cfg)


def training_length(data):
  """The run-wide number of examples of the model with the most (every model takes this many slots per epoch)."""
  return data.num_train + int(data.keep_MxN.sum(axis=1).max())


def dp_setup(cfg, run_dir, data):
  """The run's DP-SGD settings (None with DP off), its noise multiplier calibrated to train.dp.epsilon if given;
  each model's epsilon is recorded in config.json ("accountant")."""
  steps = cfg.train.epochs * -(-training_length(data) // cfg.train.batch_size)
  num_samples_M = data.num_train + data.keep_MxN.sum(axis=1)
  config = run_folder.load_config(run_dir)
  dp_cfg = cfg.train.get("dp")
  if dp_lib.enabled(dp_cfg) and dp_cfg.get("epsilon") is not None and not config.get("accountant"):
    print(f"DP-SGD: calibrating the noise multiplier to epsilon={dp_cfg.epsilon:g} at delta={dp_cfg.delta:g} "
          f"({steps} steps; up to a minute)...", flush=True)
  with preemption.interruptible():  # the accountant writes nothing: Ctrl-C stops it at once
    dp, record = dp_lib.from_config(dp_cfg, cfg.train.batch_size, steps, num_samples_M,
                                    previous=config.get("accountant"))
  if record is not None:
    if config.get("accountant") != record:  # config.json read again: process 0 may have recorded the group size since
      run_folder.save_config(run_dir, {**run_folder.load_config(run_dir), "accountant": record})
  return dp


def plan_shapes(cfg, data, dp=None):
  """What the group plan compiles the step and the extraction for (training/group_plan.py)."""
  return group_plan.Shapes(tuple(data.examples_ExT.shape[1:]), str(data.examples_ExT.dtype), cfg.train.batch_size,
                           cfg.train.get("eval_batch_size", 256), cfg.train.learning_rate, cfg.train.weight_decay,
                           data.bos_id, dp, run_config.compute_dtype(cfg))


def extraction_rows(data):
  """The most rows one per-token extraction batch may hold: the canaries, or the population when larger."""
  return max(len(data.canaries_NxT), 0 if data.population_ZxT is None else len(data.population_ZxT))


def steps_per_epoch(cfg, data):
  return -(-training_length(data) // cfg.train.batch_size)


def plan_group_size(cfg, run_dir, data, model, dp, mesh=None, process_id=0, log=True, poll_s=1.0):
  """The config with shadow.group_size "auto" or "fastest" resolved: process 0 plans (group_plan.make_plan; for
  "fastest" timing the step on the run's training rows) and records the chosen G and the plan in config.json; the
  other processes wait for that record."""
  if process_id != 0:
    while group_plan.planned((resolved := run_config.recorded_group_size(cfg, run_dir)).shadow.group_size):
      preemption.check()
      time.sleep(poll_s)
    return resolved
  plan = group_plan.make_plan(model, cfg.shadow.num_models, plan_shapes(cfg, data, dp), extraction_rows(data), mesh,
                              examples_ExT=_timing_rows(cfg, data))
  run_config.record_group_size(run_dir, plan.record())
  if log:
    c = plan.candidate(plan.chosen)
    timed = (f", step {plan_table_lib.seconds_text(c.step_seconds)} measured" if c.step_seconds else "")
    print(f"group size: {plan.rule} chose G = {plan.chosen} of {', '.join(str(c.G) for c in plan.candidates)} "
          f"({plan_table_lib.size_text(c.bytes)} per device of a {plan_table_lib.size_text(plan.budget_bytes)} "
          f"budget on {plan.device}{timed}; recorded in config.json)", flush=True)
  return run_config.with_group_size(cfg, plan.chosen)


def plan_table(cfg, mesh=None, progress=True, title="plan"):
  """train_shadows --plan: the group plan of the config on the local devices as a table, with the step time measured
  at the G the run would use (the config's, or auto's choice). The data is prepared in a temporary folder, so
  nothing is written anywhere; a base that `model.base=pretrain` would pretrain is planned as a fresh model of its
  architecture (the same shapes)."""
  validate(cfg)
  with tempfile.TemporaryDirectory() as tmp:
    run_config.check_config(cfg, tmp)
    data = run_data.prepare_data(cfg, tmp, progress)
    if family(cfg).fine_tunes and cfg.model.base == "pretrain":
      model = model_setup.base_architecture(cfg, data)
    else:
      model = model_setup.build_model(cfg, data, tmp, progress)
    dp = dp_setup(cfg, tmp, data)
  shapes, rows, M = plan_shapes(cfg, data, dp), extraction_rows(data), cfg.shadow.num_models
  plan = group_plan.make_plan(model, M, shapes, rows, mesh, examples_ExT=_timing_rows(cfg, data))
  auto = group_plan.planned(cfg.shadow.group_size)
  # the G the run trains with: a configured G above M trains every model in one group of M
  G = plan.chosen if auto else min(int(cfg.shadow.group_size), M)

  def measured(plan, G):
    plan = group_plan.with_candidate(plan, model, G, shapes, rows, mesh)
    seconds = plan.candidate(G).step_seconds or group_plan.measure_step(
        model, G, shapes, data.examples_ExT, compiled=plan.compiled.get(G), mesh=mesh)
    return group_plan.timed(plan, G, seconds), seconds

  plan, seconds = measured(plan, G)
  one = plan.candidate(1)
  if auto and G != 1 and not (one is not None and one.step_seconds):
    plan, _ = measured(plan, 1)  # the largest G that fits is not always the fastest (CPUs): one model per group beside
  extraction = group_plan.extraction_batch(model, G, shapes.example_shape, shapes.eval_batch_size, mesh)
  return plan_table_lib.table(plan, num_models=M, G=G, auto=auto, steps_per_epoch=steps_per_epoch(cfg, data),
                          epochs=cfg.train.epochs, step_seconds=seconds, configured=cfg.shadow.group_size,
                          extraction=(extraction, shapes.eval_batch_size),
                          title=f"{title} on {plan.device}: M = {M} models, batch {cfg.train.batch_size} of "
                                f"{' x '.join(map(str, shapes.example_shape))} {shapes.example_dtype}, computing in "
                                f"{shapes.compute_dtype}")


def _timing_rows(cfg, data):
  """The training rows "fastest" times the step on (None for the other rules)."""
  return data.examples_ExT if cfg.shadow.group_size == "fastest" else None


def run_group(cfg, run_dir, data, model, g, model_ids, mesh=None, progress=True, dp=None):
  """Train (or restore) one group, checkpoint it, and write its population losses [G, Z, T] and top-1 correctness
  (with a population), the family's stats and its canary losses [G, N, T], that last. A finished group (its canary
  losses written) that lacks some of these files (its population's, or a statistic written by a later version:
  top1) is only restored from its checkpoint and scored for them; the files it has are kept.
  dp: the run's DP-SGD settings (dp_setup)."""
  ckpt, losses_path = run_folder.group_paths(run_dir, g)
  finished = os.path.exists(losses_path)
  stat_paths = [run_folder.stat_path(losses_path, stat) for stat in model.stat_names]
  # the group's params, shard by shard on the devices it is scored on (the first local one without a mesh)
  target = nnx.to_pure_dict(trainer.abstract_stack(model, len(model_ids), mesh))
  if os.path.exists(ckpt):  # trained before a kill that came before its losses were written
    params = checkpoints.restore(ckpt, target)
  elif finished:
    missing = [os.path.relpath(p, run_dir)
               for p in group_files.missing(stat_paths + group_files.population_files(data, model, losses_path))]
    raise MissingFileError(f"{ckpt} does not exist: group {g} (models {model_ids[0]}-{model_ids[-1]}) is finished but "
                           f"its checkpoint is gone, so {', '.join(missing)} cannot be computed")
  else:
    tcfg = trainer.TrainConfig(cfg.train.epochs, cfg.train.batch_size, cfg.train.learning_rate,
                               cfg.train.weight_decay, run_config.model_seed(cfg), dp, run_config.compute_dtype(cfg))
    example_ids = [canaries_lib.training_indices(data.num_train, data.keep_MxN, m) for m in model_ids]
    length = training_length(data)
    state, _ = trainer.train_group(model, data.examples_ExT, example_ids, model_ids, tcfg, bos_id=data.bos_id,
                                   length=length, mesh=mesh, progress=progress)
    params = nnx.to_pure_dict(state)
    checkpoints.save(ckpt, params)
  state = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), len(model_ids))))
  nnx.replace_by_pure_dict(state, params)
  eval_batch = cfg.train.get("eval_batch_size", 256)
  batch_size = group_plan.extraction_batch(model, len(model_ids), data.canaries_NxT.shape[1:], eval_batch, mesh)
  if progress and batch_size < eval_batch:
    print(f"group {g}: per-token extraction in batches of {batch_size} sequences (train.eval_batch_size = "
          f"{eval_batch}: the group's logits over the vocabulary would not fit the device's memory)", flush=True)
  population_paths = group_files.population_files(data, model, losses_path)
  if group_files.missing(population_paths):
    # the canaries' per-token functions, on the population: its losses, and top1 where the family has it
    loss_GxZxT, *stats = trainer.canary_statistics(model, state, data.population_ZxT, bos_id=data.bos_id,
                                                   batch_size=batch_size, mesh=mesh)
    top1 = dict(zip(model.stat_names, stats)).get("top1")
    for path, array_GxZxT in zip(population_paths, (loss_GxZxT, top1)):
      if array_GxZxT is not None and not os.path.exists(path):
        run_folder.save_npy(path, array_GxZxT)
  if finished and not group_files.missing(stat_paths):
    return run_folder.load_npy(losses_path)
  loss_GxNxT, *stats = trainer.canary_statistics(model, state, data.canaries_NxT, bos_id=data.bos_id,
                                                 batch_size=batch_size, mesh=mesh)
  for path, array_GxNxT in zip(stat_paths, stats):
    if not (finished and os.path.exists(path)):
      run_folder.save_npy(path, array_GxNxT)
  if finished:  # its losses stay as they were written
    return run_folder.load_npy(losses_path)
  run_folder.save_npy(losses_path, loss_GxNxT)
  return loss_GxNxT


def write_base_losses(cfg, run_dir, data, model, mesh=None):
  """RUN_DIR/base_losses.npy and base_top1.npy [N, T]: the canaries' per-token losses on the base model every copy is
  fine-tuned from (what WBC and EZ-MIA compare each fine-tuned model with) and its top-1 correctness, once each;
  nothing for families trained from scratch, or when both files exist."""
  paths = [os.path.join(run_dir, n) for n in (run_folder.names.BASE_LOSSES, run_folder.names.BASE_TOP1)]
  if not model.fine_tuned or not group_files.missing(paths):
    return
  base = trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), 1), mesh)  # the base, as a stack of one
  loss_1xNxT, *stats = trainer.canary_statistics(model, base, data.canaries_NxT, bos_id=data.bos_id,
                                                 batch_size=group_plan.extraction_batch(
                                                     model, 1, data.canaries_NxT.shape[1:],
                                                     cfg.train.get("eval_batch_size", 256), mesh), mesh=mesh)
  arrays = (loss_1xNxT, dict(zip(model.stat_names, stats)).get("top1"))
  for path, array_1xNxT in zip(paths, arrays):
    if array_1xNxT is not None and not os.path.exists(path):
      run_folder.save_npy(path, np.asarray(array_1xNxT[0]))


def run(cfg, run_dir, *, process_id=0, num_processes=1, mesh=None, progress=True, wait=False, assemble_here=True,
        log_groups=None, population_given=False):
  """Prepare, train every group of this process that is not done yet, and assemble losses.npy (and
  population_losses.npy).

  `wait` (a jax.distributed run) blocks until the other processes' groups exist too; `assemble_here=False` leaves
  the assembly to another process (process 0 of a jax.distributed run), so it happens once, after every group.
  `log_groups` (default: `progress`) prints a line when resuming and one per finished group, with or without the
  progress bars. `population_given`: the user set the population on the command line, so a run folder from before
  the `population` block gets one (run_config.effective_config). Returns whether every group is done (and, with
  assemble_here, losses.npy written).
  """
  log_groups = progress if log_groups is None else log_groups
  validate(cfg)
  os.makedirs(run_dir, exist_ok=True)
  cfg = run_config.effective_config(cfg, run_dir, population_given)
  cfg = run_config.recorded_group_size(cfg, run_dir)
  run_config.check_config(cfg, run_dir)
  with preemption.stage("data"):  # checked between its parts and the encoding's chunks
    data = run_data.prepare_data(cfg, run_dir, progress)
  run_config.record_population(cfg, run_dir)
  model = model_setup.build_model(cfg, data, run_dir, progress)
  dp = dp_setup(cfg, run_dir, data)
  if group_plan.planned(cfg.shadow.group_size):  # planned once, before the first group; a resume keeps the record
    cfg = plan_group_size(cfg, run_dir, data, model, dp, mesh, process_id, log_groups)
  if process_id == 0:  # only what is missing: a finished run's folder is left untouched (read-only)
    write_base_losses(cfg, run_dir, data, model, mesh)
  if log_groups and dp is not None:
    record = run_folder.load_config(run_dir)["accountant"]
    print(f"DP-SGD: noise multiplier {dp.noise_multiplier:.4g}, clip norm {dp.clip_norm:g}, {dp.sampling} sampling, "
          f"{record['steps']} steps; accountant epsilon {record['epsilon']:.4g} at delta {dp.delta:g} "
          "(each model's in config.json)", flush=True)
  mine = group_files.groups_of(cfg, process_id, num_processes)
  todo = [(g, ids) for g, ids in mine if not group_files.group_done(cfg, run_dir, g)]
  rescore = sum(os.path.exists(run_folder.group_paths(run_dir, g)[1]) for g, _ in todo)  # trained, files missing
  done = len(mine) - len(todo)
  if log_groups and (done or rescore):
    print(f"resuming {run_dir}: {done} of {len(mine)} group(s) already finished, {len(todo) - rescore} to train"
          + (f", {rescore} trained before to score from their checkpoints for the files they lack (population, "
             "top1)" if rescore else ""), flush=True)
  for i, (g, ids) in enumerate(todo):
    preemption.check()
    t0 = time.perf_counter()
    run_group(cfg, run_dir, data, model, g, ids, mesh, progress, dp)
    if log_groups:
      print(f"group {g} ({done + i + 1} of {len(mine)}): models {ids[0]}-{ids[-1]} finished in "
            f"{time.perf_counter() - t0:.1f} s", flush=True)
  if wait:
    group_files.wait_for_groups(cfg, run_dir)
  if assemble_here:
    return group_files.assemble(cfg, run_dir)
  return all(group_files.group_done(cfg, run_dir, g) for g, _ in group_files.groups_of(cfg))
