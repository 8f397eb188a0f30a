"""DP-SGD for the shadow trainer (Abadi et al. 2016): per-example clipping, Gaussian noise, Poisson sampling and the
accountant, all from jax-privacy (docs/shadow_models.md, "DP-SGD").

A step draws each of the model's examples independently with probability q = batch_size / n (Poisson sampling;
batches larger than `max_batch_size` are truncated to a uniform subset of that size, which the accountant includes),
clips each example's gradient to L2 norm `clip_norm`, adds N(0, (noise_multiplier * clip_norm)^2) to the sum, and
divides by the expected batch size. sampling="shuffle" uses the trainer's shuffled fixed-size batches instead (the
common approximation: accounted as Poisson sampling with the same q, which shuffling does not strictly satisfy) and
divides by the number of examples in the batch, so noise 0 and clip_norm inf give the plain trainer's steps.
The accountant (PLD, add-or-remove-one adjacency) gives each model's epsilon for the run's steps; a target epsilon
is met by calibrating the noise multiplier for the model with the fewest examples (the largest q).
"""

import dataclasses
import math

import numpy as np

from lira.errors import InputError
from lira.options import Options, option

SAMPLINGS = ("poisson", "shuffle")
# The accountant's privacy-loss grid grows as the noise shrinks: at the CPU default's 564 steps one epsilon takes ~6 s
# at noise 0.2 (epsilon ~170), ~10 s at 0.1 (~880) and ~45 s at 0.05 (~3,700, 2-core CPU), and calibrating to an
# epsilon evaluates it about 25 times. An epsilon above the ceiling, or a noise multiplier below the floor (0 excepted:
# no noise), is refused before any work; such runs give no meaningful guarantee anyway.
EPSILON_CEILING = 100.0
NOISE_FLOOR = 0.1


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """DP-SGD settings of a training run (hashable: part of the cached step's key)."""
  noise_multiplier: float
  clip_norm: float
  batch_size: int  # the expected batch size (Poisson: the sum of clipped gradients is divided by it)
  sampling: str = "poisson"
  max_batch_size: int = 0  # the physical batch of Poisson sampling (truncation); 0: see max_batch
  delta: float = 1e-5


@dataclasses.dataclass(frozen=True)
class DPSettings(Options):
  """The `train.dp` block of a config: its fields, defaults, help and ranges, checked at once (InputError naming the
  field as train.dp.<field>). DP-SGD is off unless `epsilon` or `noise_multiplier` is set."""

  OWNER = "train.dp."

  epsilon: float | None = option(None, "Target epsilon: the noise multiplier is calibrated to it.", low=0,
                                 low_open=True)
  noise_multiplier: float | None = option(None, "Or the noise multiplier itself (0: no noise).", low=0)
  clip_norm: float = option(1.0, "Per-example gradient L2 norm bound (inf: no clipping).", low=0, low_open=True,
                            finite=False)
  delta: float = option(1e-5, "The delta of the accountant's epsilon.", low=0, high=1, low_open=True,
                        high_open=True)
  sampling: str = option("poisson", "poisson, or shuffle: fixed-size shuffled batches, accounted as Poisson (an "
                         "approximation).", choices=SAMPLINGS)
  max_batch_size: int = option(0, "Poisson batches are truncated to this size; 0: batch_size + 6 sqrt(batch_size).",
                               low=0, integer=True)

  def check_fields(self):
    if self.epsilon is not None and self.epsilon > EPSILON_CEILING:
      raise InputError(f"train.dp.epsilon={self.epsilon:g} is above the ceiling {EPSILON_CEILING:g}: calibrating "
                       "the noise to it would take the accountant minutes to hours and the guarantee would be vacuous; "
                       f"set train.dp.noise_multiplier (0, or >= {NOISE_FLOOR:g}) instead, or leave DP-SGD off")
    if self.noise_multiplier is not None and 0 < self.noise_multiplier < NOISE_FLOOR:
      raise InputError(f"train.dp.noise_multiplier={self.noise_multiplier:g} is below the floor {NOISE_FLOOR:g} "
                       "(0: no noise): the accountant's epsilon for so little noise would take minutes to hours")
    if self.epsilon is not None and self.noise_multiplier is not None:
      raise InputError("train.dp.epsilon and train.dp.noise_multiplier are both set: give one (the other follows)")
    if math.isinf(self.clip_norm) and (self.epsilon is not None or self.noise_multiplier):
      raise InputError("train.dp.clip_norm is inf (no clipping): noise and epsilon need a finite clip norm")


def config_defaults():
  """The `train.dp` block of every config (DPSettings' fields and defaults): off unless `epsilon` or
  `noise_multiplier` is set."""
  from ml_collections import config_dict
  return config_dict.ConfigDict({
      f.name: config_dict.placeholder(float) if f.default is None else f.default
      for f in dataclasses.fields(DPSettings)})


def enabled(dp_cfg):
  """Whether a config's `train.dp` block switches DP-SGD on."""
  return dp_cfg is not None and (dp_cfg.get("epsilon") is not None or dp_cfg.get("noise_multiplier") is not None)


def validate(dp_cfg, batch_size):
  """DPSettings of a config's `train.dp` block: a one-line InputError naming the first bad field (before any data is
  loaded), or a field set away from its default while DP-SGD is off (it would be accepted and ignored)."""
  names = [f.name for f in dataclasses.fields(DPSettings)]
  unknown = sorted(set(dp_cfg) - set(names))
  if unknown:
    raise InputError(f"train.dp has no field {unknown[0]!r}; its fields: {', '.join(names)}")
  settings = DPSettings(**{name: dp_cfg.get(name, DPSettings.defaults()[name]) for name in names})
  if settings.epsilon is None and settings.noise_multiplier is None:
    ignored = settings.changed([n for n in names if n not in ("epsilon", "noise_multiplier")])
    if ignored:
      name, value = next(iter(ignored.items()))
      shown = value if isinstance(value, str) else f"{value:g}"
      raise InputError(f"train.dp.{name}={shown} acts only with DP-SGD on, which this config leaves off: set "
                       "train.dp.epsilon or train.dp.noise_multiplier, or leave "
                       f"{' and '.join('train.dp.' + n for n in ignored)} at the default")
  if settings.max_batch_size and settings.max_batch_size < batch_size:
    raise InputError(f"train.dp.max_batch_size must be 0 or >= train.batch_size ({batch_size}), "
                     f"got {settings.max_batch_size}")
  return settings


def max_batch(dp, batch_size):
  """The physical batch size: Poisson batches truncated to it (default batch_size + 6 sqrt(batch_size), six standard
  deviations above the mean: the accountant's epsilon is then within 0.1% of untruncated sampling's at the CPU
  default and paper shapes); shuffled batches are batch_size."""
  if dp.sampling == "shuffle":
    return batch_size
  return dp.max_batch_size or batch_size + math.ceil(6 * math.sqrt(batch_size))


# The PLD's privacy-loss grid. jax-privacy's default, 1e-4, takes ~2-6 s per epsilon at the CPU default's 564 steps
# (calibration evaluates it ~25 times); 1e-3 is 10x faster and moves epsilon by under 0.03% there, upwards (the
# discretisation is pessimistic, so the epsilon stays a valid upper bound).
PLD_DISCRETIZATION = 1e-3


def step_width(dp, batch_size, sampled):
  """Slots a Poisson step is run with when `sampled` examples were drawn: the usual width (the next multiple of 8
  above batch_size + 2 sqrt(batch_size), which holds ~98% of batches) or the truncation width. Two widths, so two
  compiles, and the usual step costs about the expected batch rather than the truncation width."""
  full = max_batch(dp, batch_size)
  usual = min(full, -(-math.ceil(batch_size + 2 * math.sqrt(batch_size)) // 8) * 8)
  return usual if sampled <= usual else full


def _accountant():
  from jax_privacy import accounting  # here, not at the top: jax_privacy takes ~1.5 s to import, a DP run needs it
  return accounting.DpsgdTrainingAccountant(
    accounting.PldAccountantConfig(value_discretization_interval=PLD_DISCRETIZATION))


def _params(sigma, num_samples, delta, batch_size, truncated):
  from jax_privacy import accounting
  return accounting.DpParams(noise_multipliers=sigma, num_samples=int(num_samples), delta=delta,
                             batch_size=int(batch_size), truncated_batch_size=truncated)


def _truncated(dp, batch_size):
  return max_batch(dp, batch_size) if dp.sampling == "poisson" else None


def epsilon(dp, batch_size, steps, num_samples):
  """The accountant's epsilon at dp.delta of a model trained on num_samples examples for `steps` steps."""
  if dp.noise_multiplier == 0 or math.isinf(dp.clip_norm):
    return math.inf
  return float(_accountant().compute_epsilon(steps, _params(dp.noise_multiplier, num_samples, dp.delta, batch_size,
                                                            _truncated(dp, batch_size))))


def calibrate(target_epsilon, dp, batch_size, steps, num_samples):
  """The smallest noise multiplier (to 1e-3) whose epsilon at dp.delta is at most target_epsilon."""
  from jax_privacy import accounting
  return float(accounting.calibrate_noise_multiplier(
    target_epsilon=target_epsilon, accountant=_accountant(), batch_sizes=int(batch_size), num_updates=int(steps),
    num_samples=int(num_samples), target_delta=dp.delta, truncated_batch_size=_truncated(dp, batch_size),
    tol=1e-3))


def from_config(dp_cfg, batch_size, steps, num_samples_M, previous=None):
  """(DPConfig, accountant record for config.json) of a run, or (None, None) with DP off.

  num_samples_M: each model's number of training examples; the noise multiplier is calibrated on the smallest.
  previous: the record a resumed run wrote; reused when made for the same settings (the accounting takes seconds
  per distinct example count).
  """
  if not enabled(dp_cfg):
    return None, None
  validate(dp_cfg, batch_size)
  dp = DPConfig(noise_multiplier=0.0, clip_norm=float(dp_cfg.clip_norm), batch_size=int(batch_size),
                sampling=dp_cfg.sampling,
                max_batch_size=int(dp_cfg.max_batch_size), delta=float(dp_cfg.delta))
  inputs = dict(target_epsilon=dp_cfg.get("epsilon"), delta=dp.delta, clip_norm=dp.clip_norm, sampling=dp.sampling,
                max_batch_size=max_batch(dp, batch_size), batch_size=int(batch_size), steps=int(steps),
                sampling_prob=[batch_size / int(n) for n in num_samples_M])
  if previous is not None and all(previous.get(k) == v for k, v in inputs.items()) and (
      dp_cfg.noise_multiplier is None or previous.get("noise_multiplier") == dp_cfg.noise_multiplier):
    return dataclasses.replace(dp, noise_multiplier=float(previous["noise_multiplier"])), previous
  sigma = dp_cfg.noise_multiplier
  if sigma is None:
    sigma = calibrate(dp_cfg.epsilon, dp, batch_size, steps, min(num_samples_M))
  dp = dataclasses.replace(dp, noise_multiplier=float(sigma))
  per_model = {int(n): epsilon(dp, batch_size, steps, n) for n in sorted(set(int(n) for n in num_samples_M))}
  eps_M = [per_model[int(n)] for n in num_samples_M]
  record = dict(epsilon=max(eps_M), epsilon_per_model=eps_M, noise_multiplier=dp.noise_multiplier, **inputs,
                accountant=f"PLD (grid {PLD_DISCRETIZATION:g}), add-or-remove-one (jax_privacy.accounting)")
  return dp, record


def poisson_slots(example_ids, batch_size, physical, steps, seed, model_id, epoch):
  """Model's Poisson-sampled batches for one epoch, [steps, physical] (-1: empty slot): each example in each step
  with probability batch_size / n, truncated to `physical` (jax_privacy.batch_selection.CyclicPoissonSampling); the
  draws depend only on (seed, model, epoch)."""
  from jax_privacy import batch_selection
  example_ids = np.asarray(example_ids, np.int64)
  sampler = batch_selection.CyclicPoissonSampling(sampling_prob=batch_size / len(example_ids), iterations=steps,
                                                  truncated_batch_size=physical)
  slots = np.full((steps, physical), -1, np.int64)
  rng = np.random.default_rng([seed, model_id, epoch, 3])
  for s, idx in enumerate(sampler.batch_iterator(len(example_ids), rng=rng)):
    slots[s, :len(idx)] = example_ids[np.sort(idx)]
  return slots


def noise_key_data(seed, model_ids, epoch, step):
  """uint32 [G, 2]: raw threefry keys of each model's gradient noise at one step, a function of (seed, model, epoch,
  step) only (as the dropout keys, another stream)."""
  return np.stack([np.random.default_rng([seed, m, epoch, step, 2]).integers(0, 2**32, 2, dtype=np.uint32)
                   for m in model_ids])
