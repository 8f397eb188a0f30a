"""The group size G from the device's memory and speed (`shadow.group_size=auto` or `fastest`); the readable plan of
`train_shadows --plan` is training/plan_table.py.

For each candidate G (powers of two up to M and M's divisors, ascending) the trainer's step (trainer.make_step, the
program train_group runs) and the per-token extraction over one batch of canaries (what canary_statistics runs) are
compiled on abstract inputs, never run. A candidate's memory is the larger of the two programs' XLA estimates,
arguments + outputs - aliased (donated) buffers + temporaries + generated code, per device; its cost is the step's
FLOPs (XLA's cost analysis). A candidate fits when its memory is within the limit less a margin: the accelerator
allocator's `bytes_limit` less what is in use, or on a CPU a share of the host's available memory. Memory grows with
G, so the largest candidate is compiled first and the others bisected: a few compiles, not one per candidate.

Two rules choose among the candidates that fit. "auto": the largest. "fastest": the one whose run is estimated to
train fastest, from step times measured on the device (the median of MEASURED_STEPS steps of the trainer's step on
random training rows): the largest that fits and the powers of two below it are timed, largest first, until one is
SLOWER_STOP times slower per run than the best so far; among those within TIE of the best the largest G is chosen
(fewer groups: fewer compiles, extraction passes and checkpoints, which the step time leaves out).
"""

import dataclasses
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from training import trainer

MARGIN = 0.1  # share of the limit left free: buffers outside the two programs, allocator fragmentation
HOST_SHARE = 0.5  # CPU: the share of the host's available memory a group may take (the data and the process hold more)
MEASURED_STEPS = 5  # the plan's step time: their median, after WARMUP_STEPS
WARMUP_STEPS = 2
LOGIT_BUFFERS = 3  # float32 [G, B, T, V] buffers the extraction of a language model holds at once (extraction_batch)
RULES = ("auto", "fastest")  # shadow.group_size values the plan resolves to an integer
SLOWER_STOP = 1.5  # "fastest": stop timing smaller groups once one is this many times slower per run than the best
TIE = 0.03  # "fastest": the largest G whose estimated run time is within this share of the fastest


BAD_VALUE = 'shadow.group_size must be a positive integer, "auto" or "fastest", got {!r}'


def parse(value):
  """shadow.group_size as the config or a flag gives it: a positive int, or one of RULES; ValueError otherwise."""
  if isinstance(value, str) and value.strip().lower() in RULES:
    return value.strip().lower()
  if isinstance(value, str) and value.strip().isdigit():
    value = int(value)
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
    raise ValueError(BAD_VALUE.format(value))
  return int(value)


def planned(group_size):
  """Whether shadow.group_size is a rule the plan resolves (RULES), not an integer."""
  return isinstance(group_size, str) and group_size in RULES


def candidates(num_models, multiple=1):
  """Ascending group sizes to try: powers of two up to num_models and num_models' divisors, each a multiple of
  `multiple` (the devices a "models" mesh shards the model axis over)."""
  powers = {2 ** k for k in range(int(math.log2(num_models)) + 1)}
  divisors = {d for d in range(1, num_models + 1) if num_models % d == 0}
  return sorted(g for g in powers | divisors if g % multiple == 0) or [num_models]


def memory_limit(mesh=None):
  """(bytes a group may use per device, where that number comes from): the smallest `bytes_limit` less
  `bytes_in_use` of the devices, or, where devices report no memory (CPUs), HOST_SHARE of the host's available
  memory."""
  devices = list(mesh.devices.flat) if mesh is not None else jax.local_devices()[:1]
  stats = [d.memory_stats() or {} for d in devices]
  if all("bytes_limit" in s for s in stats):
    return (min(s["bytes_limit"] - s.get("bytes_in_use", 0) for s in stats),
            "device bytes_limit less bytes in use; XLA_PYTHON_CLIENT_MEM_FRACTION sets the limit's share of the memory")
  return int(HOST_SHARE * host_available()), f"{HOST_SHARE:g} of the host's available memory"


def host_available():
  """The host's available memory in bytes (psutil, else /proc/meminfo's MemAvailable, else free pages)."""
  try:
    import psutil
    return int(psutil.virtual_memory().available)
  except ImportError:
    pass
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@dataclasses.dataclass(frozen=True)
class Shapes:
  """What the compiled programs depend on besides the model: one example's shape and dtype, the training and
  extraction batches, the optimiser and the DP-SGD settings (training.dp.DPConfig or None)."""
  example_shape: tuple
  example_dtype: str
  batch_size: int
  eval_batch_size: int
  learning_rate: float
  weight_decay: float
  bos_id: int | None = None
  dp: object = None
  compute_dtype: str = "float32"  # the step's (train.compute_dtype); the extraction is always float32


def in_dtype(model, dtype):
  """The model computing in `dtype`, as the trainer rebuilds it (FunctionalModel.with_compute_dtype)."""
  if dtype == getattr(model.config, "dtype", "float32"):
    return model
  return model.with_compute_dtype(dtype)


def _abstract(tree, shardings=None):
  if shardings is None:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def step_args(model, G, shapes, mesh=None):
  """Abstract arguments of the trainer's step for a group of G: params, AdamW state, examples, weights and the
  dropout / noise keys the step takes (as train_group passes them)."""
  params = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), G)))
  opt_state = jax.eval_shape(lambda p: trainer.opt_init(p, shapes.learning_rate, shapes.weight_decay), params)
  width = shapes.batch_size
  if shapes.dp is not None and shapes.dp.sampling == "poisson":
    from training import dp as dp_lib
    width = dp_lib.max_batch(shapes.dp, shapes.batch_size)  # the widest step a Poisson batch runs
  examples = jax.ShapeDtypeStruct((G, width) + tuple(shapes.example_shape), jnp.dtype(shapes.example_dtype))
  weight = jax.ShapeDtypeStruct((G, width), jnp.float32)
  data = (examples, weight)
  if mesh is not None:
    params = _abstract(params, trainer.shardings(mesh, params))
    opt_state = _abstract(opt_state, trainer.shardings(mesh, opt_state))
    data = _abstract(data, trainer.shardings(mesh, data, 1))
  keys = [jax.ShapeDtypeStruct((G, 2), jnp.uint32) if model.dropout else None]
  if shapes.dp is not None:
    keys.append(jax.ShapeDtypeStruct((G, 2), jnp.uint32))
  while keys and keys[-1] is None:
    keys.pop()
  return (params, opt_state) + data + tuple(keys)


def compile_step(model, G, shapes, mesh=None):
  """The trainer's step for a group of G, compiled (not run)."""
  step = trainer.make_step(in_dtype(model, shapes.compute_dtype), shapes.learning_rate, shapes.weight_decay,
                           shapes.bos_id, single=G == 1, dp=shapes.dp)
  return step.lower(*step_args(model, G, shapes, mesh), frozen=abstract_frozen(model, mesh)).compile()


def abstract_frozen(model, mesh=None):
  """Abstract base parameters of a LoRA model (replicated on a mesh, as trainer.put_frozen places them); None
  otherwise."""
  if model.frozen is None:
    return None
  frozen = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), model.frozen)
  if mesh is None:
    return frozen
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  return _abstract(frozen, jax.tree.map(lambda _: replicated, frozen))


def out_of_memory(e):
  """Whether an exception is XLA's out-of-memory error (RESOURCE_EXHAUSTED)."""
  return "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower()


def extraction_batch(model, G, example_shape, batch_size, mesh=None, limit_bytes=None):
  """Rows per batch of the per-token extraction on a group of G: `batch_size` (train.eval_batch_size), fewer where
  a language model's float32 logits over the vocabulary, [G, B, T, V] on each device with the two temporaries of
  their statistics (models/token_loss.token_statistics), would not fit within the margin of `limit_bytes` (default
  memory_limit(mesh): the device's free memory, on a CPU a share of the host's); at least 1. Other families and
  batches that fit keep `batch_size`. The extraction of each row does not depend on the rows beside it."""
  vocab = getattr(model.config, "vocab_size", None)
  if not vocab:
    return batch_size
  if limit_bytes is None:
    limit_bytes = memory_limit(mesh)[0]
  local_G = G // mesh.shape["models"] if mesh is not None and "models" in mesh.axis_names else G
  row_bytes = LOGIT_BUFFERS * 4 * max(local_G, 1) * math.prod(example_shape) * vocab
  return int(max(1, min(batch_size, limit_bytes * (1 - MARGIN) // row_bytes)))


def compile_extraction(model, G, shapes, num_examples, mesh=None, limit_bytes=None):
  """The per-token extraction of one batch of examples on a group of G (trainer.canary_statistics), compiled, at
  the batch the run extracts with (extraction_batch)."""
  model = in_dtype(model, "float32")
  fn = trainer.stats_fn(model, shapes.bos_id)
  params = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), G)))
  B = min(extraction_batch(model, G, shapes.example_shape, shapes.eval_batch_size, mesh, limit_bytes), num_examples)
  examples = jax.ShapeDtypeStruct((B,) + tuple(shapes.example_shape), jnp.dtype(shapes.example_dtype))
  if mesh is not None:
    params = _abstract(params, trainer.shardings(mesh, params))
    examples = _abstract(examples, trainer.shardings(mesh, examples, 0))
  return fn.lower(params, examples, frozen=abstract_frozen(model, mesh)).compile()


def program_bytes(compiled):
  """Peak device bytes XLA reserves for one compiled program (per device): arguments + outputs - donated aliases
  + temporaries + generated code."""
  m = compiled.memory_analysis()
  return int(m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
             + m.generated_code_size_in_bytes)


def program_flops(compiled):
  """XLA's FLOP count of one run of a compiled program (0 where the backend reports none)."""
  cost = compiled.cost_analysis()
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else {}
  return float((cost or {}).get("flops", 0.0))


@dataclasses.dataclass(frozen=True)
class Candidate:
  G: int
  step_bytes: int
  extraction_bytes: int
  flops: float  # of one training step of the whole group
  fits: bool
  error: str = ""  # why no memory was measured: the compile itself ran out of the device's memory
  step_seconds: float = 0.0  # the group's measured step time ("fastest" times the candidates it compares); 0: not timed

  @property
  def bytes(self):
    return max(self.step_bytes, self.extraction_bytes)


@dataclasses.dataclass(frozen=True)
class Plan:
  """The candidates compiled, the memory limit and margin they were held to, and the chosen G."""
  device: str
  compute_dtype: str
  limit_bytes: int
  limit_from: str
  margin: float
  candidates: tuple
  chosen: int
  compiled: dict = dataclasses.field(default=None, compare=False, repr=False)  # G -> its compiled step
  rule: str = "auto"  # how `chosen` was chosen (RULES)

  @property
  def budget_bytes(self):
    return int(self.limit_bytes * (1 - self.margin))

  def candidate(self, G):
    return next((c for c in self.candidates if c.G == G), None)

  def record(self):
    """The plan as config.json's shadow.group_size_plan block."""
    return {"device": self.device, "compute_dtype": self.compute_dtype, "limit_bytes": self.limit_bytes,
            "limit_from": self.limit_from, "margin": self.margin, "budget_bytes": self.budget_bytes,
            "chosen": self.chosen, "rule": self.rule,
            "candidates": [dataclasses.asdict(c) for c in self.candidates]}


def device_name(mesh=None):
  d = jax.local_devices()[0]
  kind = d.platform if d.device_kind.lower() == d.platform else f"{d.platform} {d.device_kind}"
  return f"{mesh.size} x {kind}" if mesh is not None and mesh.size > 1 else kind


def compile_candidate(model, G, shapes, num_examples, budget, mesh=None):
  """(Candidate, compiled step) of a group of G: both programs compiled, their memory held to `budget` bytes. A
  compile that runs out of memory (a GPU compiler's autotuning allocates the program's buffers) does not fit:
  (Candidate with its error, None)."""
  try:
    step = compile_step(model, G, shapes, mesh)
    extraction = program_bytes(compile_extraction(model, G, shapes, num_examples, mesh))
  except Exception as e:  # noqa: BLE001 - only an out-of-memory compile is a result; anything else is raised
    if not out_of_memory(e):
      raise
    return Candidate(G, 0, 0, 0.0, False, error="out of memory while compiling"), None
  c = Candidate(G, program_bytes(step), extraction, program_flops(step), False)
  return dataclasses.replace(c, fits=c.bytes <= budget), step


def with_candidate(plan, model, G, shapes, num_examples, mesh=None):
  """The plan with G among its candidates (compiled if it was not): the config's G beside the chosen one."""
  if plan.candidate(G) is not None:
    return plan
  c, step = compile_candidate(model, G, shapes, num_examples, plan.budget_bytes, mesh)
  return dataclasses.replace(plan, candidates=tuple(sorted(plan.candidates + (c,), key=lambda c: c.G)),
                             compiled={**plan.compiled, G: step})


def make_plan(model, num_models, shapes, num_examples, mesh=None, limit=None, examples_ExT=None):
  """Choose the largest candidate that fits (1 when none does), compiling as few as memory's growth with G allows:
  the largest candidate first, then a bisection of the rest. `limit`: (bytes, where from), default
  memory_limit(mesh). With examples_ExT (training rows to time the step on) the rule is "fastest": among the
  candidates that fit, the one of the least estimated run time (`fastest`). The plan lists the candidates compiled."""
  limit_bytes, limit_from = limit or memory_limit(mesh)
  multiple = mesh.size if mesh is not None and "models" in mesh.axis_names else 1
  budget = int(limit_bytes * (1 - MARGIN))
  sizes = candidates(num_models, multiple)
  tried, compiled = {}, {}

  def fits(i):
    tried[sizes[i]], compiled[sizes[i]] = compile_candidate(model, sizes[i], shapes, num_examples, budget, mesh)
    return tried[sizes[i]].fits

  lo, hi = -1, len(sizes) - 1  # sizes[lo] fits (-1: none known to), sizes[hi] does not unless it is the largest
  if fits(hi):
    lo = hi
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits(mid) else (lo, mid)
  chosen = sizes[lo] if lo >= 0 else sizes[0]
  plan = Plan(device_name(mesh), shapes.compute_dtype, int(limit_bytes), limit_from, MARGIN,
              tuple(tried[G] for G in sorted(tried)), chosen, compiled)
  if examples_ExT is None or lo < 0:
    return plan
  timed = [G for G in sizes[:lo] if _power_of_two(G // multiple)] + [sizes[lo]]
  return fastest(plan, model, num_models, shapes, num_examples, examples_ExT, timed, mesh)


def _power_of_two(n):
  return n > 0 and n & (n - 1) == 0


def fastest(plan, model, num_models, shapes, num_examples, examples_ExT, sizes, mesh=None):
  """The plan with the rule "fastest": the sizes (ascending, each fitting) timed largest first (measure_step) until
  one's estimated run is SLOWER_STOP times the best's; chosen: the largest G within TIE of the least estimated run
  time (estimate_run_seconds, per step of every group)."""
  run_s = {}
  for G in reversed(sizes):
    plan = with_candidate(plan, model, G, shapes, num_examples, mesh)
    if not plan.candidate(G).fits:
      continue
    seconds = measure_step(model, G, shapes, examples_ExT, compiled=plan.compiled.get(G), mesh=mesh)
    plan = timed(plan, G, seconds)
    run_s[G] = estimate_run_seconds(plan, num_models, G, 1, seconds)
    if run_s[G] > SLOWER_STOP * min(run_s.values()):
      break
  # again with every candidate compiled by now (a smaller last group is costed by its own FLOPs where known)
  run_s = {G: estimate_run_seconds(plan, num_models, G, 1, plan.candidate(G).step_seconds) for G in run_s}
  best = min(run_s.values())
  chosen = max(G for G, s in run_s.items() if s <= (1 + TIE) * best)
  return dataclasses.replace(plan, chosen=chosen, rule="fastest")


def timed(plan, G, seconds):
  """The plan with G's step time measured."""
  cands = tuple(dataclasses.replace(c, step_seconds=seconds) if c.G == G else c for c in plan.candidates)
  return dataclasses.replace(plan, candidates=cands)


def from_record(block):
  """A Plan from config.json's shadow.group_size_plan block."""
  cands = tuple(Candidate(**c) for c in block["candidates"])
  return Plan(block["device"], block["compute_dtype"], block["limit_bytes"], block["limit_from"], block["margin"],
              cands, block["chosen"], rule=block.get("rule", "auto"))


def measure_step(model, G, shapes, examples_ExT, steps=MEASURED_STEPS, seed=0, compiled=None, mesh=None):
  """Seconds per training step of a group of G on rows of examples_ExT drawn at random, after WARMUP_STEPS steps:
  the median of `steps` runs of the trainer's step (`compiled` for the same mesh, or compiled here) on fresh models,
  each with its batch gathered on the host as train_group gathers it."""
  rng = np.random.default_rng(seed)
  step = compiled or compile_step(model, G, shapes, mesh)
  params = trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(seed), G), mesh)
  opt_state = trainer.opt_init(params, shapes.learning_rate, shapes.weight_decay, mesh)
  frozen = trainer.put_frozen(model, mesh)
  args = step_args(model, G, shapes)
  width = args[3].shape[1]
  keys = [np.asarray(rng.integers(0, 2**32, (G, 2)), np.uint32) for _ in args[4:]]
  weight = np.ones((G, width), np.float32)

  def one(params, opt_state):
    data = (np.asarray(examples_ExT)[rng.integers(0, len(examples_ExT), (G, width))], weight)
    if mesh is not None:
      data = jax.device_put(data, trainer.shardings(mesh, data, 1))
    out = step(params, opt_state, *data, *keys, frozen=frozen)
    jax.block_until_ready(out)
    return out

  for _ in range(WARMUP_STEPS):
    params, opt_state, _ = one(params, opt_state)
  seconds = []
  for _ in range(steps):
    start = time.perf_counter()
    params, opt_state, _ = one(params, opt_state)
    seconds.append(time.perf_counter() - start)
  return float(np.median(seconds))


def group_sizes(num_models, G):
  """The sizes of a run's groups: full groups of G, then the rest."""
  return [G] * (num_models // G) + ([num_models % G] if num_models % G else [])


def estimate_run_seconds(plan, num_models, G, steps_per_group, step_seconds):
  """Training seconds of a run in groups of G, from the measured step time of a group of G; a smaller last group is
  scaled by its share of G's FLOPs (its models' share where it was not compiled)."""
  ref = plan.candidate(G)
  total = 0.0
  for size in group_sizes(num_models, G):
    other = plan.candidate(size)
    scale = other.flops / ref.flops if other is not None and ref is not None and ref.flops else size / G
    total += steps_per_group * step_seconds * scale
  return total
