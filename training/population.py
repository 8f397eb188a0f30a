"""The population set of a shadow run: sequences (or images) no model trains on and that are never canaries, for RMIA
(Zarifzadeh et al. 2024, Section 3: the reference samples z of the pairwise likelihood ratio).

Config block `population` (`config_defaults`): `size` Z (0: none) and `source`:
  auto     the canaries' own distribution: worst-case canaries get fresh random sequences (images) drawn as the
           canaries are, from another seed stream ([seed, STREAM]); average-case canaries get held-out sequences
           (images) that were not chosen as canaries;
  heldout  held-out sequences (images) that are not canaries, whatever the canary kind.
A drawn row equal to a canary or to any row of the training split is excluded, never written: random rows are
redrawn from the same stream until Z are found, held-out rows are drawn among the distinct ones that are neither.
So no model trains on the population (the training split, the IN canaries and a fine-tuned run's pretraining
sequences all come from rows it excludes) and every population row differs from every canary.

RUN_DIR/population.npy holds the Z rows; each group's per-token losses of them sit beside its canary losses
(RUN_DIR/losses/group_GGGG_population.npy [G, Z, T]), stacked into RUN_DIR/population_losses.npy [M, Z, T].
"""

import numpy as np

from lira.errors import InputError
from run_folder import names
from training import canaries as canaries_lib

SOURCES = ("auto", "heldout")
DEFAULT_SIZE = 1000
STREAM = 2  # the population's random rows come from default_rng([seed, STREAM]); canaries use default_rng(seed)
FILE = names.POPULATION
LOSSES_FILE = names.POPULATION_LOSSES


def config_defaults(size=DEFAULT_SIZE):
  """The `population` block of every config."""
  from ml_collections import config_dict
  return config_dict.ConfigDict(dict(size=size, source="auto"))


def settings(cfg):
  """(size, source) of a config; a config without a `population` block (a run folder from before it) has none."""
  block = cfg.get("population")
  if block is None:
    return 0, "auto"
  return block.get("size", 0), block.get("source", "auto")


def validate(cfg):
  """One-line InputError naming the first bad `population` field (before any data is loaded)."""
  size, source = settings(cfg)
  if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
    raise InputError(f"population.size must be an integer >= 0 (0: no population), got {size!r}")
  if source not in SOURCES:
    raise InputError(f"population.source must be one of {', '.join(SOURCES)}, got {source!r}")


def group_path(losses_path):
  """A group's population losses, beside its canary losses file."""
  return names.population_group_path(losses_path)


def _flat(array):
  """[S, P]: each row (sequence or image) flattened; empty arrays too."""
  array = np.ascontiguousarray(array)
  return array.reshape(len(array), int(np.prod(array.shape[1:])))


def _rows(array):
  """Each row (sequence or image) as bytes, for set membership."""
  return [row.tobytes() for row in _flat(array)]


def _excluded(canaries, train):
  return set(_rows(canaries)) | set(_rows(train))


def _random(draw, size, canaries, train):
  """`size` rows from draw(n) (n fresh rows each call), skipping rows equal to a canary or a training row."""
  banned, out = _excluded(canaries, train), []
  while len(out) < size:
    batch = draw(size - len(out))
    out += [row for row, key in zip(batch, _rows(batch)) if key not in banned]
  return np.stack(out) if out else draw(0)


def _heldout(heldout, size, canaries, train, seed, what):
  """`size` distinct held-out rows that are neither a canary nor a training row, drawn by a seeded RNG."""
  _, first = np.unique(_flat(heldout), axis=0, return_index=True)
  banned = _excluded(canaries, train)
  keys = _rows(heldout)
  available = np.array([i for i in np.sort(first) if keys[i] not in banned], np.int64)
  if size > len(available):
    raise InputError(f"population.size={size} is more than the {len(available)} distinct held-out {what} that are "
                     "neither canaries nor training data; use a smaller population.size, a larger "
                     "data.heldout_fraction" + (", or population.source=auto with worst-case canaries"
                                                if what == "sequences" else ""))
  chosen = np.random.default_rng([seed, STREAM]).choice(available, size=size, replace=False)
  return heldout[np.sort(chosen)]


def uses_heldout(cfg):
  """Whether the population comes from the held-out split (it then has to be loaded even for worst-case canaries)."""
  size, source = settings(cfg)
  return size > 0 and (source == "heldout" or cfg.canaries.kind == "average")


def sequences(cfg, canaries_NxT, train_SxT, heldout_SxT, vocab_size, bos_id):
  """population_ZxT int32 (None when population.size is 0); train_SxT: the whole training split."""
  size, _ = settings(cfg)
  if size == 0:
    return None
  seed = cfg.shadow.seed
  if uses_heldout(cfg):
    return _heldout(heldout_SxT, size, canaries_NxT, train_SxT, seed, "sequences").astype(np.int32)
  rng_seed = [seed, STREAM]
  calls = []

  def draw(n):  # each call its own stream ([seed, STREAM, k]), so a redraw never repeats the first rows
    calls.append(1)
    stream = rng_seed if len(calls) == 1 else rng_seed + [len(calls)]
    return canaries_lib.worst_case_canaries(n, canaries_NxT.shape[1], vocab_size, stream, exclude_ids=(bos_id,))

  return _random(draw, size, canaries_NxT, train_SxT)


def images(cfg, canaries_NxHxWxC, train_SxHxWxC, heldout_SxHxWxC):
  """population_ZxHxWxC uint8 (None when population.size is 0); train: the whole training split."""
  size, _ = settings(cfg)
  if size == 0:
    return None
  seed = cfg.shadow.seed
  if uses_heldout(cfg):
    return _heldout(heldout_SxHxWxC, size, canaries_NxHxWxC, train_SxHxWxC, seed, "images")
  calls = []

  def draw(n):
    calls.append(1)
    stream = [seed, STREAM] if len(calls) == 1 else [seed, STREAM, len(calls)]
    return canaries_lib.worst_case_images(n, tuple(cfg.model.image_shape), cfg.model.num_levels, stream)

  return _random(draw, size, canaries_NxHxWxC, train_SxHxWxC)
