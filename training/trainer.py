"""Many shadow models trained at once: parameters stacked on a leading model axis, one vmapped AdamW step.

The trainer knows no tokens or pixels: the per-position loss is the model family's (models.FunctionalModel.loss).
Model m's initialisation, data order and dropout masks depend only on (seed, m), never on which group it is trained
in, so a model trained in a group of 16 equals the same model trained alone up to float32 rounding (which AdamW's
division by sqrt(v) can amplify to a whole step on the rare entry whose gradient is ~0; the tests say how).

Precision: the step computes in TrainConfig.compute_dtype (the family's model rebuilt in it,
FunctionalModel.with_compute_dtype; bfloat16 mixed precision as models/precision.py states); the parameters, their
gradients and AdamW's moments are float32 in either. The per-token losses are always extracted with the float32
model (canary_statistics), whatever the models were trained in.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from training import adamw
from training import dp as dp_lib
from training import per_token
from training import preemption
from lira.errors import InputError, UserError
from models import precision


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  epochs: int = 10
  batch_size: int = 64
  learning_rate: float = 1e-3
  weight_decay: float = 0.0
  seed: int = 0
  dp: dp_lib.DPConfig | None = None  # DP-SGD (training/dp.py); None: plain AdamW steps
  compute_dtype: str = "float32"  # "float32" or "bfloat16" (mixed precision: float32 weights and optimiser state)

  def __post_init__(self):
    precision.check(self.compute_dtype, "train.compute_dtype")


class TrainingDiverged(UserError, RuntimeError):
  """A model's loss became NaN or inf."""


def model_key(seed, model_id):
  """Initialisation key of model `model_id` (independent of grouping)."""
  return jax.random.fold_in(jax.random.PRNGKey(seed), model_id)


def token_losses(model, params, tokens_BxT, bos_id):
  """Per-token loss -ln p(x_t | BOS, x_<t) for every position t of tokens_BxT (all T positions scored)."""
  return model.loss(params, tokens_BxT, bos_id)


def dropout_key_data(seed, model_ids, epoch, step):
  """uint32 [G, 2]: raw threefry dropout keys of each model at one step, a function of (seed, model, epoch, step).

  Threefry, not the faster-compiling "rbg": vmapped rbg draws differ from the same key's unbatched draws (all rows
  but the first), so a model's dropout masks would depend on its group; threefry's do not.
  """
  return np.stack([np.random.default_rng([seed, m, epoch, step, 1]).integers(0, 2**32, 2, dtype=np.uint32)
                   for m in model_ids])


def dropout_key(key_data):
  return jax.random.wrap_key_data(key_data, impl="threefry2x32")


def epoch_slots(example_ids, length, batch_size, seed, model_id, epoch):
  """Model's example order for one epoch: its examples and (length - len) padding slots (-1), shuffled.

  `length` is the run-wide maximum number of examples of any model, so every model takes the same
  number of steps; padding slots carry zero weight.
  """
  steps = -(-length // batch_size)
  slots = np.full(steps * batch_size, -1, np.int64)
  slots[:length] = np.concatenate([example_ids, np.full(length - len(example_ids), -1, np.int64)])
  rng = np.random.default_rng([seed, model_id, epoch])
  slots[:length] = slots[:length][rng.permutation(length)]
  return slots.reshape(steps, batch_size)


def make_optimizer(learning_rate, weight_decay):
  return adamw.make_optimizer(learning_rate, weight_decay)


@functools.lru_cache(maxsize=16)
def make_step(model, learning_rate, weight_decay, bos_id, single=False, dp=None):
  """One AdamW step for a stack of models: (params, opt_state, examples_GxBx..., weight_GxB[, key_data_Gx2]
  [, noise_key_data_Gx2]) -> (..., loss_G); the per-position loss is the model family's (`model.loss`), with dropout
  keys where it has dropout. dp (training.dp.DPConfig): a DP-SGD step instead (`_dp_gradient`), with noise keys.

  Cached, so the groups of a run share one compiled step (jit caches per function object). With `single` (a stack
  of one model) the model axis is dropped inside the step instead of vmapped over: under vmap XLA lays the weight
  gradients out transposed, and the update reads them with strides (1.5x slower for one Pythia-160m copy;
  BENCHMARKS.md).
  """
  optimizer = make_optimizer(learning_rate, weight_decay)

  def step(params, opt_state, examples_B, weight_B, key_data=None, noise_key_data=None, frozen=None):
    key = None if key_data is None else dropout_key(key_data)

    def loss_fn(p):
      per_example_B = model.loss(p, examples_B, bos_id, key, frozen).mean(axis=1)
      return (per_example_B * weight_B).sum() / jnp.maximum(weight_B.sum(), 1.0)

    if dp is None:
      loss, grads = jax.value_and_grad(loss_fn)(params)
    else:
      loss, grads = _dp_gradient(model, bos_id, dp, params, examples_B, weight_B, key, dropout_key(noise_key_data),
                                 frozen)

    def update(grads, opt_state, params):
      updates, new_opt_state = optimizer.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), new_opt_state

    # A batch made only of padding changes nothing (no AdamW moment or weight-decay step either). One model: a
    # branch, so no select over every leaf (measured ~3% of a PixelCNN++ step); vmapped, lax.cond would become
    # that select: the state is chosen per model first, then the parameters stepped from it (training/adamw.py).
    has_data = weight_B.sum() > 0
    if dp is not None and dp.noise_multiplier > 0:  # a noisy step is taken whatever was sampled (even nothing)
      has_data = jnp.asarray(True)
    if single:
      new_params, new_opt_state = jax.lax.cond(has_data, update, lambda g, o, p: (p, o), grads, opt_state, params)
      return new_params, new_opt_state, loss
    new_params, new_opt_state = adamw.masked_update(grads, opt_state, params, has_data, learning_rate, weight_decay)
    return new_params, new_opt_state, loss

  # `frozen` (LoRA: the base's parameters, model.frozen) is one argument shared by the G copies: mapped over no
  # model axis, never donated.
  if single:
    def unstacked(*args, frozen=None):
      out = step(*jax.tree.map(lambda x: x[0], args), frozen=frozen)
      return jax.tree.map(lambda x: x[None], out)
    return jax.jit(unstacked, donate_argnums=(0, 1))

  def stacked(*args, frozen=None):
    return jax.vmap(lambda *a: step(*a, frozen=frozen))(*args)
  return jax.jit(stacked, donate_argnums=(0, 1))


def _dp_gradient(model, bos_id, dp, params, examples_B, weight_B, key, noise_key, frozen=None):
  """(loss, DP-SGD gradient) of one model's batch: per-example gradients clipped to dp.clip_norm and summed
  (jax_privacy.clipped_grad), Gaussian noise of std noise_multiplier * clip_norm added (its gaussian_privatizer),
  divided by the expected batch size (Poisson) or the examples in the batch (shuffle). Empty slots weigh 0."""
  import jax_privacy  # here, not at the top: it takes ~1.5 s to import, and only a DP run needs it

  def example_loss(p, example_1xT, weight_1, example_key=None):
    return (model.loss(p, example_1xT, bos_id, example_key, frozen).mean(axis=1) * weight_1).sum()

  grad_fn = jax_privacy.clipped_grad(example_loss, l2_clip_norm=dp.clip_norm, batch_argnums=(1, 2),
                                     return_values=True, prng_argnum=None if key is None else 3)
  args = (params, examples_B, weight_B) + (() if key is None else (key,))
  grad_sum, aux = grad_fn(*args)
  stddev = dp.noise_multiplier * dp.clip_norm if dp.noise_multiplier else 0.0  # noise 0 with clipping off: none
  privatizer = jax_privacy.noise_addition.gaussian_privatizer(stddev=stddev, prng_key=0)
  noisy, _ = privatizer.update(grad_sum, (noise_key, ()))
  count = jnp.maximum(weight_B.sum(), 1.0)
  denominator = count if dp.sampling == "shuffle" else float(dp.batch_size)
  return aux.values.sum() / count, jax.tree.map(lambda g: g / denominator, noisy)


def init_stack(model, keys, mesh=None):
  """Parameters of one model per key, stacked on a leading axis (copies of the base params when fine-tuning).

  With a mesh the stack is created directly sharded (`shardings`): fine-tuning copies are put shard by shard from
  the host base (np.broadcast_to is a view, so no device and no host buffer ever holds the G copies whole), fresh
  models are drawn by a jit whose outputs are sharded. lax.map rather than vmap: a vmapped orthogonal initialiser
  becomes one batched LAPACK QR, which deadlocks jaxlib's CPU thread pool for batches of 8 or more on small machines.
  """
  if model.pretrained is not None:
    if mesh is None:
      return jax.tree.map(lambda x: jnp.broadcast_to(x, (len(keys),) + x.shape), model.pretrained)
    abstract = jax.eval_shape(lambda: init_stack(model, keys))
    return jax.tree.map(lambda x, s: _put_copies(x, len(keys), s), model.pretrained, shardings(mesh, abstract))
  return _init_fn(model, mesh, len(keys))(keys)


def _put_copies(x, copies, sharding):
  """[copies, *x.shape] on `sharding`, each device given only its shard of the broadcast host array."""
  x = np.asarray(x)
  stacked = np.broadcast_to(x, (copies,) + x.shape)
  return jax.make_array_from_callback(stacked.shape, sharding, lambda index: np.ascontiguousarray(stacked[index]))


@functools.lru_cache(maxsize=16)
def _init_fn(model, mesh=None, copies=None):
  init = lambda k: jax.lax.map(model.init, k)  # noqa: E731
  if mesh is None:
    return jax.jit(init)
  keys = jax.ShapeDtypeStruct((copies, 2), jnp.uint32)
  return jax.jit(init, out_shardings=shardings(mesh, jax.eval_shape(init, keys)))


@functools.lru_cache(maxsize=16)
def _opt_init_fn(learning_rate, weight_decay, mesh=None, abstract_leaves=None):
  """Jitted AdamW init of a stack; with a mesh its outputs (the moments) are created sharded like the params, whose
  (treedef, shapes) `abstract_leaves` are hashable for the cache."""
  init = jax.vmap(make_optimizer(learning_rate, weight_decay).init)
  if mesh is None:
    return jax.jit(init)
  treedef, leaves = abstract_leaves
  params = jax.tree.unflatten(treedef, [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in leaves])
  return jax.jit(init, out_shardings=shardings(mesh, jax.eval_shape(init, params)))


def opt_init(params, learning_rate, weight_decay, mesh=None):
  """AdamW state of a stack of params (sharded like them on a mesh, never gathered on one device)."""
  if mesh is None:
    return _opt_init_fn(learning_rate, weight_decay)(params)
  leaves, treedef = jax.tree.flatten(params)
  key = (treedef, tuple((tuple(x.shape), np.dtype(x.dtype)) for x in leaves))
  return _opt_init_fn(learning_rate, weight_decay, mesh, key)(params)


def abstract_stack(model, num_models, mesh=None):
  """ShapeDtypeStructs of a stack of `num_models` params with the shardings they get on `mesh` (the first local
  device without one): the target a checkpoint is restored into, shard by shard."""
  abstract = jax.eval_shape(lambda: init_stack(model, jax.random.split(jax.random.PRNGKey(0), num_models)))
  where = shardings(mesh, abstract) or jax.tree.map(
    lambda _: jax.sharding.SingleDeviceSharding(jax.local_devices()[0]), abstract)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract, where)


@functools.lru_cache(maxsize=16)
def stats_fn(model, bos_id):
  def stats(params, examples, frozen=None):
    return jax.vmap(lambda p: model.statistics(p, examples, bos_id, frozen))(params)
  return jax.jit(stats)


def put_frozen(model, mesh=None):
  """A LoRA model's base parameters (model.frozen) on the device, replicated over a mesh; None without LoRA."""
  if model.frozen is None:
    return None
  if mesh is None:
    return jax.device_put(model.frozen)
  return jax.device_put(model.frozen, NamedSharding(mesh, PartitionSpec()))


def fsdp_spec(shape, num_devices):
  """PartitionSpec of a stacked [G, ...] array: its largest non-model dimension divisible by the device count is
  split over the "fsdp" axis (FSDP / ZeRO-3 style); arrays with no such dimension (scalars, small biases) are
  replicated."""
  dims = [d for d in range(1, len(shape)) if shape[d] % num_devices == 0 and shape[d] >= num_devices]
  if not dims:
    return PartitionSpec()
  split = max(dims, key=lambda d: shape[d])
  return PartitionSpec(*[("fsdp" if d == split else None) for d in range(len(shape))])


def shardings(mesh, tree, batch_axis=None):
  """Shardings for `tree` on `mesh`: None (one device); a "models" mesh shards the model axis of every leaf; an
  "fsdp" mesh splits each model's parameters and optimiser moments by `fsdp_spec`, or, with `batch_axis`, the
  batch dimension of the data (data parallelism within each model)."""
  if mesh is None:
    return None
  if "models" in mesh.axis_names:  # data without a model axis (batch_axis 0) is replicated
    spec = PartitionSpec() if batch_axis == 0 else PartitionSpec("models")
    return jax.tree.map(lambda _: NamedSharding(mesh, spec), tree)
  n = mesh.shape["fsdp"]

  def one(x):
    if batch_axis is not None:
      ok = x.shape[batch_axis] % n == 0
      return NamedSharding(mesh, PartitionSpec(*([None] * batch_axis + ["fsdp"])) if ok else PartitionSpec())
    return NamedSharding(mesh, fsdp_spec(x.shape, n))

  return jax.tree.map(one, tree)


def _put(tree, mesh, batch_axis=None):
  return tree if mesh is None else jax.device_put(tree, shardings(mesh, tree, batch_axis))


def train_group(model, examples_ExT, example_ids, model_ids, config, *, bos_id=None, length=None, mesh=None,
                progress=True):
  """Train the models `model_ids` together; example_ids[i] are the rows of examples_ExT model i trains on.

  examples_ExT holds sequences [E, T] for language models (bos_id: the token each is read after), images
  [E, H, W, C] for PixelCNN++ (bos_id unused).

  The step computes in config.compute_dtype, whatever the dtype `model` was built with.
  Returns the stacked parameters (leading axis = len(model_ids)) as numpy float32 arrays and the mean loss
  of each model in its last epoch. Raises TrainingDiverged naming the model whose loss is not finite, and
  preemption.Preempted between steps once SIGTERM arrived (training.preemption).
  """
  G = len(model_ids)
  model = model.with_compute_dtype(config.compute_dtype)
  if mesh is not None and "models" in mesh.axis_names and G % mesh.size:
    raise InputError(f"group size {G} must be a multiple of the {mesh.size} devices the model axis is sharded over")
  length = length or max(len(ids) for ids in example_ids)
  keys = jnp.stack([model_key(config.seed, m) for m in model_ids])
  params = init_stack(model, keys, mesh)
  opt_state = opt_init(params, config.learning_rate, config.weight_decay, mesh)
  dp = config.dp
  step = make_step(model, config.learning_rate, config.weight_decay, bos_id, single=G == 1, dp=dp)
  frozen = put_frozen(model, mesh)
  examples_ExT = np.asarray(examples_ExT)
  steps = -(-length // config.batch_size)
  poisson = dp is not None and dp.sampling == "poisson"
  bar = tqdm(total=config.epochs * steps, desc=f"models {model_ids[0]}-{model_ids[-1]}", disable=not progress,
             leave=False, unit="step")
  for epoch in range(config.epochs):
    if poisson:
      physical = dp_lib.max_batch(dp, config.batch_size)
      slots_GxSxB = np.stack([dp_lib.poisson_slots(ids, config.batch_size, physical, steps, config.seed, m, epoch)
                              for ids, m in zip(example_ids, model_ids)])
    else:
      slots_GxSxB = np.stack([epoch_slots(ids, length, config.batch_size, config.seed, m, epoch)
                              for ids, m in zip(example_ids, model_ids)])
    losses = []
    for s in range(steps):
      if preemption.requested():  # SIGTERM: abandon the group between steps (its earlier groups are kept)
        bar.close()
        raise preemption.Preempted()
      slot_GxB = slots_GxSxB[:, s]
      if poisson:  # filled slots come first: run the step at the usual width unless a batch needs more
        slot_GxB = slot_GxB[:, :dp_lib.step_width(dp, config.batch_size, int((slot_GxB >= 0).sum(axis=1).max()))]
      batch_GxB = examples_ExT[np.maximum(slot_GxB, 0)]
      weight_GxB = (slot_GxB >= 0).astype(np.float32)
      # dropout and noise keys as positional arguments (key_data=None when the model has no dropout); jit places them
      keys = [dropout_key_data(config.seed, model_ids, epoch, s) if model.dropout else None]
      if dp is not None:
        keys.append(dp_lib.noise_key_data(config.seed, model_ids, epoch, s))
      while keys and keys[-1] is None:
        keys.pop()
      params, opt_state, loss_G = step(params, opt_state, _put(batch_GxB, mesh, 1), _put(weight_GxB, mesh, 1), *keys,
                                       frozen=frozen)
      if losses:  # one step in flight at most: the bar shows finished steps, not queued ones
        jax.block_until_ready(losses[-1])
      losses.append(loss_G)
      bar.update(1)
    epoch_loss_G = np.mean(np.stack(jax.device_get(losses)), axis=0)
    bar.set_postfix(epoch=epoch + 1, loss=f"{epoch_loss_G.mean():.3f}")
    bad = ~np.isfinite(epoch_loss_G)
    if bad.any():
      bar.close()
      raise TrainingDiverged(f"model {model_ids[int(np.flatnonzero(bad)[0])]} has a non-finite training loss in "
                             f"epoch {epoch + 1}; lower the learning rate (finished groups are kept)")
  bar.close()
  return jax.device_get(params), epoch_loss_G


def canary_statistics(model, params, canaries_NxT, *, bos_id=None, batch_size=256, mesh=None):
  """(loss, *stats) of every canary on every stacked model, each [G, N, T] float32, without dropout.

  Language models: loss = -ln p(x_t | BOS, x_<t), then mu and sigma, the mean and std of ln p over the vocabulary
  at that position. PixelCNN++: the NLL of each pixel in raster order, alone (model.stat_names).
  Always computed by the float32 model, whatever the compute dtype `model` (or the training) had.
  """
  model = model.with_compute_dtype("float32")
  fn = stats_fn(model, bos_id)
  params, frozen = _put(params, mesh), put_frozen(model, mesh)
  return per_token.batched(lambda c_BxT: fn(params, _put(jnp.asarray(c_BxT), mesh, 0), frozen=frozen),
                           (canaries_NxT,), batch_size, axis=1)
