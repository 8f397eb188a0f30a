"""Canaries and the shadow-model membership matrix (Carlini et al. 2022; Rossi et al. 2025 Section 4.1)."""

import numpy as np

from lira import synthetic
from lira.errors import InputError


def average_case_canaries(heldout_tokens_SxT, num_canaries, seed):
  """canaries_NxT int32: N distinct held-out sequences drawn without replacement by a seeded RNG."""
  heldout_tokens_SxT = np.asarray(heldout_tokens_SxT)
  if heldout_tokens_SxT.ndim != 2:
    raise InputError(f"heldout_tokens_SxT must be 2-D [S, T], got shape {heldout_tokens_SxT.shape}")
  if num_canaries < 0:
    raise InputError(f"num_canaries must be non-negative, got {num_canaries}")
  # Identical rows would make one canary IN through its twin, so draw among distinct rows only.
  _, first = np.unique(heldout_tokens_SxT, axis=0, return_index=True)
  distinct = np.sort(first)
  if num_canaries > len(distinct):
    raise InputError(f"num_canaries={num_canaries} exceeds the {len(distinct)} distinct held-out sequences "
                     f"(of {len(heldout_tokens_SxT)})")
  chosen = np.random.default_rng(seed).choice(distinct, size=num_canaries, replace=False)
  return heldout_tokens_SxT[chosen].astype(np.int32)


def worst_case_canaries(num_canaries, seq_len, vocab_size, seed, exclude_ids=(0,)):
  """canaries_NxT int32: tokens drawn uniformly from the vocabulary minus `exclude_ids` (special tokens)."""
  if num_canaries < 0:
    raise InputError(f"num_canaries must be non-negative, got {num_canaries}")
  if seq_len < 1:
    raise InputError(f"seq_len must be at least 1, got {seq_len}")
  allowed = np.setdiff1d(np.arange(vocab_size), np.asarray(exclude_ids, np.int64))
  if len(allowed) == 0:
    raise InputError(f"vocab_size={vocab_size} leaves no token once exclude_ids={tuple(exclude_ids)} are removed")
  draws_NxT = np.random.default_rng(seed).integers(len(allowed), size=(num_canaries, seq_len))
  return allowed[draws_NxT].astype(np.int32)


def keep_matrix(num_models, num_canaries, seed):
  """keep_MxN bool: canary n is IN for model m; every canary IN for exactly M/2 models (LiRA reference code)."""
  if num_models < 2 or num_models % 2:
    raise InputError(f"num_models must be even and at least 2, got {num_models}")
  if num_canaries < 0:
    raise InputError(f"num_canaries must be non-negative, got {num_canaries}")
  return synthetic.keep_matrix(num_models, num_canaries, seed)


def training_indices(num_train, keep_MxN, model):
  """idx int64: model m's examples; [0, num_train) are the shared sequences, num_train + n is canary n if IN."""
  keep_MxN = np.asarray(keep_MxN, bool)
  if keep_MxN.ndim != 2:
    raise InputError(f"keep_MxN must be 2-D [M, N], got shape {keep_MxN.shape}")
  if not 0 <= model < keep_MxN.shape[0]:
    raise InputError(f"model must be in [0, {keep_MxN.shape[0]}), got {model}")
  if num_train < 0:
    raise InputError(f"num_train must be non-negative, got {num_train}")
  return np.concatenate([np.arange(num_train), num_train + np.flatnonzero(keep_MxN[model])]).astype(np.int64)


def average_case_images(heldout_SxHxWxC, num_canaries, seed):
  """canaries_NxHxWxC: N distinct held-out images drawn without replacement (average_case_canaries on pixels)."""
  heldout = np.asarray(heldout_SxHxWxC)
  flat_NxP = average_case_canaries(heldout.reshape(len(heldout), -1), num_canaries, seed)
  return flat_NxP.astype(heldout.dtype).reshape((num_canaries,) + heldout.shape[1:])


def worst_case_images(num_canaries, image_shape, num_levels, seed):
  """canaries_NxHxWxC uint8: every channel of every pixel a level drawn uniformly from 0..num_levels-1."""
  if num_canaries < 0:
    raise InputError(f"num_canaries must be non-negative, got {num_canaries}")
  if not 2 <= num_levels <= 256:
    raise InputError(f"num_levels must be in 2..256 (uint8 pixels), got {num_levels}")
  return np.random.default_rng(seed).integers(num_levels, size=(num_canaries,) + tuple(image_shape)).astype(np.uint8)
