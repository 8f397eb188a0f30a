"""A synthetic run folder written (experiments/make_synthetic.py): lira.synthetic's losses, membership and population
in the files of a run (run_folder)."""

import numpy as np

import run_folder
from lira import synthetic
from run_folder import names


def write_synthetic_run(run_dir, overwrite=False, population_size=None, **kwargs):
  """Write losses.npy, keep.npy, (mask.npy), population_losses.npy [M, Z, T] (population_mask.npy with ragged
  canaries) and config.json of a synthetic run; returns the config. population_size Z: default N // 4; 0: none.

  A folder that already holds a run is refused unless `overwrite`; then stale mask and population files are removed.
  """
  if not overwrite:
    run_folder.check_no_run(run_dir)
  run_folder.check_writable(run_dir, "choose another --run_dir")
  loss_MxNxT, keep_MxN, mask_NxT = synthetic.synthetic_losses(**kwargs)
  M, N, T = loss_MxNxT.shape
  Z = N // 4 if population_size is None else int(population_size)
  population = (None, None)
  if Z:
    population = synthetic.synthetic_population(M, Z, T, **{k: kwargs[k] for k in ("rho", "ragged", "seed")
                                                            if k in kwargs})
  config = {"source": "synthetic", "generator": "lira.synthetic.synthetic_losses", "num_models": M,
            "num_canaries": N, "seq_len": T, "population_size": Z,
            **{k: v for k, v in kwargs.items() if k not in ("num_models", "num_canaries", "seq_len")}}
  if kwargs.get("frac_canaries", 1.0) < 1.0:  # the canaries that carry the signal, by construction
    config["shifted_canaries"] = np.flatnonzero(synthetic.shifted_canaries(N, kwargs["frac_canaries"],
                                                                           kwargs.get("seed", 0))).tolist()
  run_folder.save_run(run_dir, {names.LOSSES: loss_MxNxT, names.KEEP: keep_MxN, names.MASK: mask_NxT,
                                names.POPULATION_LOSSES: population[0], names.POPULATION_MASK: population[1]}, config)
  return config
