"""The shadow-model run: the run's data (training/run_data.py), the model, grouped training and per-token losses, in
one run folder.

Stages hand over through files in the run folder (LiRA reference code style), so a killed run resumes
where it stopped: finished groups are skipped, a group whose checkpoint exists is only re-extracted,
and at most the group in flight is lost.
"""

import os
import tempfile
import time
import warnings

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

import models
import run_folder
from training import canaries as canaries_lib
from training import dp as dp_lib
from training import group_plan
from training import plan_table as plan_table_lib
from training import images as images_lib
from training import lora_config as lora_lib
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


def build_model(cfg, data, run_dir, progress=True):
  """The model every shadow copy starts as: a fresh one (LSTM, PixelCNN++), or a base checkpoint to fine-tune
  (GPT-NeoX: the family fine-tunes)."""
  kwargs = dict(cfg.model)
  name = kwargs.pop("name")
  fam = models.family(name)
  if fam.data_kind == "images":
    return fam.build(**kwargs)
  if not fam.fine_tunes:
    return fam.build(vocab_size=data.vocab_size, **kwargs)
  from models import hf_convert
  base = cfg.model.base
  if base == "pretrain":
    base = os.path.join(run_dir, run_folder.names.BASE_MODEL_DIR)
    if not os.path.exists(os.path.join(base, run_folder.names.MODEL_CONFIG)):  # written last: the folder is complete
      pretrain_base(cfg, data, base, os.path.join(run_dir, run_folder.names.TOKENIZER), progress)
  module = hf_convert.from_pretrained(base)  # float32: training rebuilds it in train.compute_dtype
  if module.config.vocab_size < data.vocab_size:
    raise InputError(f"model.base {cfg.model.base!r} embeds {module.config.vocab_size} token ids but the tokenizer "
                     f"{cfg.tokenizer.name!r} has {data.vocab_size}; use the base model's own tokenizer")
  graphdef, params = nnx.split(module)  # the base lives on the host: each group's copies are put shard by shard
  host = nnx.merge(graphdef, jax.device_get(params))
  lora = lora_lib.settings(cfg.train.get("lora"))
  if lora is not None:  # the copies are adapters on this one base
    from models import lora as lora_model
    return lora_model.functional(name, module.config, host, lora)
  return models.pretrained(name, module.config, host)


def pretrain_base(cfg, data, folder, tokenizer_file, progress=True):
  """Pretrain a small GPT-NeoX on the train-split sequences the shadows do not fine-tune on; save it as a
  Hugging Face folder (with the run's tokenizer.json).

  The offline stand-in for a Pythia checkpoint: it never sees the held-out split the average-case canaries come
  from, nor the fine-tuning sequences.
  """
  from models import hf_convert
  p = cfg.pretrain
  sequences_SxT = data.pretrain_SxT[:p.max_sequences] if p.max_sequences else data.pretrain_SxT
  if len(sequences_SxT) < p.batch_size:
    raise InputError(f"model.base='pretrain' needs at least pretrain.batch_size={p.batch_size} training sequences "
                     f"beyond data.max_train_sequences={cfg.data.max_train_sequences}; the split has "
                     f"{len(sequences_SxT)}. Lower data.max_train_sequences or use a checkpoint as model.base")
  model = base_architecture(cfg, data)
  tcfg = trainer.TrainConfig(p.epochs, p.batch_size, p.learning_rate, p.weight_decay, cfg.shadow.seed,
                             compute_dtype=run_config.compute_dtype(cfg))
  t0 = time.perf_counter()
  state, loss = trainer.train_group(model, sequences_SxT, [np.arange(len(sequences_SxT))], [0], tcfg,
                                    bos_id=data.bos_id, progress=progress)
  module = nnx.merge(model.graphdef, jax.tree.map(lambda x: x[0], state))
  hf_convert.save_pretrained(module, folder, tokenizer_file=tokenizer_file)
  if progress:
    print(f"base model: pretrained on {len(sequences_SxT)} sequences, last-epoch loss {float(loss[0]):.3f} "
          f"({time.perf_counter() - t0:.1f} s); saved as a Hugging Face folder in {folder}")


def base_architecture(cfg, data):
  """A fresh GPT-NeoX of the architecture `model.base=pretrain` pretrains (model.arch, the run's vocabulary)."""
  return family(cfg).build(vocab_size=data.vocab_size, bos_token_id=data.bos_id, eos_token_id=data.bos_id,
                           **dict(cfg.model.arch))


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
      model = base_architecture(cfg, data)
    else:
      model = build_model(cfg, data, tmp, progress)
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


def groups_of(cfg, process_id=0, num_processes=1):
  """(group index, model ids) of this process's share: groups g with g % num_processes == process_id."""
  return run_folder.groups(cfg.shadow.num_models, cfg.shadow.group_size, process_id, num_processes)


def _checkpointer():
  """Orbax checkpointer of this process alone (no barrier waits for other processes)."""
  me = jax.process_index()
  return ocp.StandardCheckpointer(multiprocessing_options=ocp.options.MultiprocessingOptions(
    primary_host=me, active_processes={me}))


def _npy_name(path):
  return "".join(str(getattr(k, "key", k)) + "." for k in path) + "npy"


def save_checkpoint(ckpt, params):
  """Save a group's stacked params. One process: orbax. A jax.distributed run: one .npy per parameter in a folder
  renamed into place when complete, because orbax saves from each process only its part of global arrays (numpy
  arrays from process 0, process-local jax.Arrays refused), not the groups a process trains alone."""
  if jax.process_count() == 1:
    checkpointer = _checkpointer()
    checkpointer.save(ckpt, params)  # orbax writes to a temporary folder and renames it when complete
    checkpointer.wait_until_finished()
    return
  tmp = f"{ckpt}.tmp-{os.getpid()}"
  for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
    run_folder.save_npy(os.path.join(tmp, _npy_name(path)), jax.device_get(x))
  os.replace(tmp, ckpt)


def restore_checkpoint(ckpt, target):
  """A group's params restored into `target` (ShapeDtypeStructs with shardings), each device reading only its
  shards: orbax with the sharded target, or the .npy folder memory-mapped and cut shard by shard."""
  if not os.path.exists(os.path.join(ckpt, "_CHECKPOINT_METADATA")):
    def one(path, t):
      array = run_folder.load_npy(os.path.join(ckpt, _npy_name(path)), mmap=True)
      if array.shape != t.shape or array.dtype != t.dtype:
        raise InputError(f"{ckpt}/{_npy_name(path)}: {array.dtype} {array.shape}, the model needs {t.dtype} {t.shape}")
      return jax.make_array_from_callback(t.shape, t.sharding, lambda index: np.asarray(array[index]))
    return jax.tree_util.tree_map_with_path(one, target)
  with run_folder.ctrl_c_held():
    return _checkpointer().restore(ckpt, target)


def _population_files(data, model, losses_path):
  """A group's population files when the run has a population: its losses, and top-1 correctness where the family
  has it."""
  if data.population_ZxT is None:
    return []
  paths = [population_lib.group_path(losses_path)]
  if "top1" in model.stat_names:
    paths.append(run_folder.names.population_group_path(losses_path, "top1"))
  return paths


def _missing(paths):
  return [p for p in paths if not os.path.exists(p)]


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
    params = restore_checkpoint(ckpt, target)
  elif finished:
    missing = [os.path.relpath(p, run_dir) for p in _missing(stat_paths + _population_files(data, model, losses_path))]
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
    save_checkpoint(ckpt, params)
  state = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), len(model_ids))))
  nnx.replace_by_pure_dict(state, params)
  eval_batch = cfg.train.get("eval_batch_size", 256)
  batch_size = group_plan.extraction_batch(model, len(model_ids), data.canaries_NxT.shape[1:], eval_batch, mesh)
  if progress and batch_size < eval_batch:
    print(f"group {g}: per-token extraction in batches of {batch_size} sequences (train.eval_batch_size = "
          f"{eval_batch}: the group's logits over the vocabulary would not fit the device's memory)", flush=True)
  population_paths = _population_files(data, model, losses_path)
  if _missing(population_paths):
    # the canaries' per-token functions, on the population: its losses, and top1 where the family has it
    loss_GxZxT, *stats = trainer.canary_statistics(model, state, data.population_ZxT, bos_id=data.bos_id,
                                                   batch_size=batch_size, mesh=mesh)
    top1 = dict(zip(model.stat_names, stats)).get("top1")
    for path, array_GxZxT in zip(population_paths, (loss_GxZxT, top1)):
      if array_GxZxT is not None and not os.path.exists(path):
        run_folder.save_npy(path, array_GxZxT)
  if finished and not _missing(stat_paths):
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
  if not model.fine_tuned or not _missing(paths):
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


def group_done(cfg, run_dir, g):
  """Whether group g is finished: its canary losses and the family's statistics (mu, sigma, top1) exist, and its
  population losses and top-1 correctness when the run has a population."""
  losses_path = run_folder.group_paths(run_dir, g)[1]
  stat_names = family(cfg).stat_names
  paths = [losses_path] + [run_folder.stat_path(losses_path, stat) for stat in stat_names]
  if population_lib.settings(cfg)[0]:
    paths.append(population_lib.group_path(losses_path))
    if "top1" in stat_names:
      paths.append(run_folder.names.population_group_path(losses_path, "top1"))
  return not _missing(paths)


def _stack(run_dir, name, parts):
  """Write RUN_DIR/name (losses.npy, ...), the group files `parts` stacked on the model axis, unless it already
  holds them.

  A run folder whose stacked file has the shape the group files make was assembled before: left untouched, so
  re-running a finished run writes nothing (and works on a read-only folder).
  """
  path = os.path.join(run_dir, name)
  shapes = [run_folder.load_npy(p, mmap=True).shape for p in parts]
  want = (sum(s[0] for s in shapes),) + shapes[0][1:]
  if os.path.exists(path) and run_folder.load_npy(path, mmap=True).shape == want:
    return
  run_folder.save_npy(path, run_folder.load_stacked(parts))


def assemble(cfg, run_dir):
  """Stack the per-group losses (and a language model's mu, sigma) into losses.npy [M, N, T], and the population
  losses into population_losses.npy [M, Z, T], once every group is done; False if some group is missing.

  Groups without mu / sigma files (extracted by an older version) leave mu.npy / sigma.npy unwritten, with a
  warning that names the missing files; LiRA needs only losses.npy.
  """
  parts = [run_folder.group_paths(run_dir, g)[1] for g, _ in groups_of(cfg)]
  if not all(os.path.exists(p) for p in parts):
    return False
  for stat in family(cfg).stat_names:
    stat_parts = [run_folder.stat_path(p, stat) for p in parts]
    if missing := [os.path.relpath(p, run_dir) for p in stat_parts if not os.path.exists(p)]:
      warnings.warn(f"{stat}.npy not written: {len(missing)} group(s) have no {stat} file ({', '.join(missing)}); "
                    f"delete those groups' losses files to re-extract them from their checkpoints", stacklevel=2)
    else:
      _stack(run_dir, run_folder.names.stat_file(stat), stat_parts)
  _stack(run_dir, run_folder.names.LOSSES, parts)
  if population_lib.settings(cfg)[0]:
    population_parts = [population_lib.group_path(p) for p in parts]
    if not all(os.path.exists(p) for p in population_parts):
      return False
    _stack(run_dir, run_folder.names.POPULATION_LOSSES, population_parts)
    top1_parts = [run_folder.names.population_group_path(p, "top1") for p in parts]
    if "top1" in family(cfg).stat_names and all(os.path.exists(p) for p in top1_parts):
      _stack(run_dir, run_folder.names.POPULATION_TOP1, top1_parts)
  return True


def is_finished(cfg, run_dir):
  """Whether the run is complete (config.json, every group's losses and losses.npy, and population_losses.npy with
  a population): re-running it then writes nothing into the run folder, which may be read-only. `cfg` as
  run_config.effective_config gives it."""
  if group_plan.planned(cfg.shadow.group_size):  # not planned yet: no group has trained
    return False
  population = population_lib.settings(cfg)[0] == 0 or os.path.exists(
    os.path.join(run_dir, population_lib.LOSSES_FILE))
  return (os.path.exists(run_folder.config_path(run_dir))
          and os.path.exists(os.path.join(run_dir, run_folder.names.LOSSES))
          and population and all(group_done(cfg, run_dir, g) for g, _ in groups_of(cfg)))


def wait_for_groups(cfg, run_dir, poll_s=1.0):
  """Block until every group is done (group_done; written by the other processes of a jax.distributed run);
  a SIGTERM meanwhile raises preemption.Preempted."""
  while not all(group_done(cfg, run_dir, g) for g, _ in groups_of(cfg)):
    preemption.check()
    time.sleep(poll_s)


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
  model = build_model(cfg, data, run_dir, progress)
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
  mine = groups_of(cfg, process_id, num_processes)
  todo = [(g, ids) for g, ids in mine if not group_done(cfg, run_dir, g)]
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
    wait_for_groups(cfg, run_dir)
  return assemble(cfg, run_dir) if assemble_here else all(group_done(cfg, run_dir, g) for g, _ in groups_of(cfg))
