"""The run's data: corpus or images -> train / held-out split -> tokenizer -> T-token sequences (images: arrays of
levels) -> canaries, keep matrix and population, saved once in the run folder and checked against it on resume."""

import dataclasses
import os
import time

import numpy as np

import models
from lira.errors import InputError
import run_folder
from training import canaries as canaries_lib
from training import data as data_lib
from training import images as images_lib
from training import population as population_lib
from training import preemption
from training import token_cache
from training import run_config

@dataclasses.dataclass(frozen=True)
class RunData:
  examples_ExT: np.ndarray  # train sequences, then canaries (images: [E, H, W, C] uint8 levels)
  num_train: int
  canaries_NxT: np.ndarray  # images: [N, H, W, C]
  keep_MxN: np.ndarray
  bos_id: int | None  # None for images
  vocab_size: int | None
  pretrain_SxT: np.ndarray  # train-split sequences left out of examples_ExT (data.max_train_sequences): base pretraining
  population_ZxT: np.ndarray | None = None  # never trained on, never a canary (training/population.py); images: [Z, H, W, C]


def _corpus(cfg):
  if cfg.data.corpus == "chitchat":
    return data_lib.load_chitchat()
  if cfg.data.corpus == "personachat":
    return data_lib.load_personachat(cfg.data.hub_id)
  raise InputError(f"data.corpus must be 'chitchat' or 'personachat', got {cfg.data.corpus!r}")


def _tokenizer(cfg, train_texts, run_dir):
  """The run's tokenizer, saved as RUN_DIR/tokenizer.json; a resumed run must keep the same vocabulary."""
  path = os.path.join(run_dir, run_folder.names.TOKENIZER)
  if cfg.tokenizer.name == "bpe":
    vocab = cfg.tokenizer.vocab_size
    fresh = None if os.path.exists(path) else token_cache.bpe(
        train_texts, vocab, lambda: data_lib.train_bpe_tokenizer(train_texts, vocab))
  else:
    fresh = data_lib.load_tokenizer(cfg.tokenizer.name)
  saved = data_lib.load_tokenizer(path) if os.path.exists(path) else None
  if saved is not None and fresh is not None and saved.get_vocab() != fresh.get_vocab():
    raise InputError(f"tokenizer {cfg.tokenizer.name!r} has a different vocabulary ({data_lib.vocab_size(fresh)} "
                     f"tokens) from the one this run was started with ({path}, {data_lib.vocab_size(saved)} tokens)")
  if saved is None:
    run_folder.save_text(path, fresh.to_str())
  return saved or fresh


def _pack(texts, tokenizer, T, split):
  try:
    return token_cache.packed(texts, tokenizer, T,
                              lambda: data_lib.pack_sequences(texts, tokenizer, T, between=preemption.check))
  except ValueError as e:
    raise InputError(f"data.seq_len={T} is longer than the {split} split allows: {e}") from e


def _save_once(run_dir, arrays):
  """Write canaries.npy / keep.npy / population.npy once: a finished run re-runs on a read-only folder; a resumed run
  must match. A None array (no population) is not written."""
  for name, array in arrays:
    if array is None:
      continue
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
      run_folder.save_npy(path, array)
    elif not np.array_equal(run_folder.load_npy(path), array):
      raise InputError(f"{path} differs from what this config produces (different data or tokenizer?)")


def prepare_images(cfg, run_dir, progress=True):
  """Images -> train / held-out split -> canaries and keep, saved in the run folder; checked against model.*."""
  t0 = time.perf_counter()
  shape, L = tuple(cfg.model.image_shape), cfg.model.num_levels
  N, M = cfg.canaries.num_canaries, cfg.shadow.num_models
  train, heldout = images_lib.load_split(cfg.data.source, cfg.data.data_dir, cfg.data.heldout_fraction,
                                         cfg.shadow.seed)
  images_lib.check_against_config(train, shape, L, f"data.source={cfg.data.source!r} training")
  images_lib.check_against_config(heldout, shape, L, f"data.source={cfg.data.source!r} held-out")
  whole_train = train
  if cfg.data.max_train_images:
    train = train[:cfg.data.max_train_images]
  if len(train) < cfg.train.batch_size:
    raise InputError(f"{len(train)} training images, fewer than one batch (train.batch_size={cfg.train.batch_size})")
  if cfg.canaries.kind == "average":
    distinct = len(np.unique(heldout.reshape(len(heldout), -1), axis=0))
    if N > distinct:
      raise InputError(f"canaries.num_canaries={N} is more than the {distinct} distinct held-out images of "
                       f"data.source={cfg.data.source!r}; use fewer canaries")
    canaries = canaries_lib.average_case_images(heldout, N, cfg.shadow.seed)
  else:
    canaries = canaries_lib.worst_case_images(N, shape, L, cfg.shadow.seed)
  keep_MxN = canaries_lib.keep_matrix(M, N, run_config.model_seed(cfg))
  population = population_lib.images(cfg, canaries, whole_train, heldout)
  _save_once(run_dir, ((run_folder.names.CANARIES, canaries), (run_folder.names.KEEP, keep_MxN),
                       (run_folder.names.POPULATION, population)))
  if progress:
    print(f"data: {len(train)} training images {shape} with {L} levels ({cfg.data.source}), {N} "
          f"{cfg.canaries.kind}-case canaries{_population_note(population)} ({time.perf_counter() - t0:.1f} s)")
  return RunData(np.concatenate([train, canaries]), len(train), canaries, keep_MxN, None, None, train[:0], population)


def _population_note(population):
  return "" if population is None else f", a population of {len(population)}"


def _heldout_sequences(cfg, heldout_conv, tokenizer, T):
  """The held-out split's T-token sequences (none when the split is empty)."""
  texts = data_lib.conversation_texts(heldout_conv)
  return _pack(texts, tokenizer, T, "held-out") if texts else np.zeros((0, T), np.int32)


def prepare_data(cfg, run_dir, progress=True):
  """Corpus -> split -> tokenizer -> T-token sequences -> canaries and keep, saved in the run folder (images:
  prepare_images)."""
  if models.family(cfg.model.name).data_kind == "images":
    return prepare_images(cfg, run_dir, progress)
  t0 = time.perf_counter()
  train_conv, heldout_conv = data_lib.split_conversations(_corpus(cfg), cfg.data.heldout_fraction, cfg.shadow.seed)
  preemption.check()  # a stop (train_shadows: SIGTERM, Ctrl-C) between the parts: they write whole files only
  train_texts = data_lib.conversation_texts(train_conv)
  tokenizer = _tokenizer(cfg, train_texts, run_dir)
  preemption.check()
  T, N, M = cfg.data.seq_len, cfg.canaries.num_canaries, cfg.shadow.num_models
  train_SxT = _pack(train_texts, tokenizer, T, "training")
  whole_train_SxT = train_SxT
  pretrain_SxT = train_SxT[cfg.data.max_train_sequences:] if cfg.data.max_train_sequences else train_SxT[:0]
  if cfg.data.max_train_sequences:
    train_SxT = train_SxT[:cfg.data.max_train_sequences]
  if len(train_SxT) < cfg.train.batch_size:
    raise InputError(f"data.seq_len={T} leaves only {len(train_SxT)} training sequences, fewer than one batch "
                     f"(train.batch_size={cfg.train.batch_size}); use shorter sequences or more data")
  bos, vocab = data_lib.bos_id(tokenizer), data_lib.vocab_size(tokenizer)
  heldout_SxT = None
  if cfg.canaries.kind == "average" or population_lib.uses_heldout(cfg):
    heldout_SxT = _heldout_sequences(cfg, heldout_conv, tokenizer, T)
  if cfg.canaries.kind == "average":
    distinct = len(np.unique(heldout_SxT, axis=0)) if len(heldout_SxT) else 0
    if N > distinct:
      raise InputError(f"canaries.num_canaries={N} is more than the {distinct} distinct held-out sequences of "
                       f"data.seq_len={T} tokens (data.heldout_fraction={cfg.data.heldout_fraction}); use fewer "
                       "canaries, shorter sequences or a larger held-out split")
    canaries_NxT = canaries_lib.average_case_canaries(heldout_SxT, N, cfg.shadow.seed)
  else:
    canaries_NxT = canaries_lib.worst_case_canaries(N, T, vocab, cfg.shadow.seed, exclude_ids=(bos,))
  keep_MxN = canaries_lib.keep_matrix(M, N, run_config.model_seed(cfg))
  population_ZxT = population_lib.sequences(cfg, canaries_NxT, whole_train_SxT, heldout_SxT, vocab, bos)
  _save_once(run_dir, ((run_folder.names.CANARIES, canaries_NxT), (run_folder.names.KEEP, keep_MxN),
                       (run_folder.names.POPULATION, population_ZxT)))
  if progress:
    print(f"data: {len(train_SxT)} training sequences of {T} tokens, {N} {cfg.canaries.kind}-case canaries"
          f"{_population_note(population_ZxT)}, vocabulary {vocab} ({time.perf_counter() - t0:.1f} s)")
  return RunData(np.concatenate([train_SxT, canaries_NxT]).astype(np.int32), len(train_SxT), canaries_NxT, keep_MxN,
                 bos, vocab, pretrain_SxT, population_ZxT)
