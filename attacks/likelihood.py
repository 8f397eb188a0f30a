"""Loss, Zlib, Reference and Neighbourhood attacks on stored per-token log-probabilities (docs/conventions.md,
"Pretraining-data attacks"): LL = mean ln p over scored positions; every score is higher = member."""

import zlib as zlib_lib

import numpy as np

from attacks.rows import mean_ll, same_rows
from lira.errors import InputError


def loss(lp_NxT):
  """Loss attack (Yeom et al. 2018): LL, the mean lp over each text's scored positions."""
  return mean_ll("lp", lp_NxT)


def zlib(lp_NxT, texts):
  """Zlib attack (Carlini et al. 2021): LL / zlib-compressed byte length of the UTF-8 text (LL < 0, so shorter
  compressions of equally likely texts score lower)."""
  if len(texts) != np.shape(lp_NxT)[0]:
    raise InputError(f"texts: {len(texts)} texts, but lp has {np.shape(lp_NxT)[0]} rows")
  sizes_N = np.array([len(zlib_lib.compress(str(t).encode("utf-8"))) for t in texts], dtype=np.float64)
  return loss(lp_NxT) / sizes_N


def reference(lp_NxT, ref_lp_NxT):
  """Reference attack (Carlini et al. 2021): LL under the target minus LL under a reference model, each over its own
  scored positions (the reference may tokenize differently)."""
  same_rows("ref_lp", ref_lp_NxT, lp_NxT)
  return loss(lp_NxT) - mean_ll("ref_lp", ref_lp_NxT)


def neighbourhood(lp_NxT, neighbour_lp_NxJxT):
  """Neighbourhood attack (Mattern et al. 2023): LL minus the MEAN over the J neighbours' LL (the paper's mean; not
  MIMIR's code, which ends up with the minimum)."""
  same_rows("neighbour_lp", neighbour_lp_NxJxT, lp_NxT)
  neighbours_NxJ = mean_ll("neighbour_lp", neighbour_lp_NxJxT, ndim=3)
  return loss(lp_NxT) - neighbours_NxJ.mean(axis=1)
