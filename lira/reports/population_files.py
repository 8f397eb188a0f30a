"""RMIA's population files of a run folder read and checked: run_folder.load_population's shapes, and every scored
loss finite and >= 0 (lira.checks), before any scoring."""

import run_folder
from lira import checks
from run_folder import names


def load_population(run_dir, mmap=False):
  """(population_MxZxT, population_mask_ZxT or None) of run_folder.load_population, with its losses checked: the
  first loss not finite and >= 0 at a scored position is named (model, population sequence, position)."""
  population, mask = run_folder.load_population(run_dir, mmap=mmap)
  checks.check_losses(population, mask, item="population sequence", mask_file=names.POPULATION_MASK)
  return population, mask
