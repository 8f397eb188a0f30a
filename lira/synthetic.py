"""Synthetic per-token losses: correlated Gaussian per-token logits with a known membership shift.

Stand in for trained shadow models when testing the LiRA stages (lira.reports.synthetic_run.write_synthetic_run
writes them as a run folder). For canary n and model m the
per-token logit (ln p - ln(1-p)) is
  z[m, n] = mu[n] + sigma[n] * e[m, n] + keep[m, n] * shift * sigma[n] * b[n]    (shift_units="std"),
with e ~ N(0, C) where C[s, t] = rho^|s - t| (AR(1) correlation between neighbouring tokens),
mu[n, t] ~ N(1, 1.5^2), sigma[n, t] ~ U(0.5, 1.5), and b[n, t] = 1 on a random `frac_shifted` of the
positions (0 elsewhere; 0 everywhere for the canaries outside a random `frac_canaries` of them, which carry no
signal at all: shifted_canaries names the ones that do): being IN raises the logit (lowers the loss) of those tokens by `shift`
standard deviations. With shift_units="logit" the raise is `shift` logit units at every affected position
(`keep * shift * b`), whatever that position's spread. Losses are softplus(-z) = -ln sigmoid(z), stored as float32, so that
lira.logit_scale(loss) recovers z.

The population (RMIA's reference samples, `synthetic_population`) is drawn as canaries that are OUT for every model:
z[m, j] = mu[j] + sigma[j] * e[m, j], with mu, sigma and e as above, from a seed stream of its own, so adding a
population leaves the canaries' losses unchanged.
"""

import numpy as np

from lira.errors import InputError


def keep_matrix(num_models, num_canaries, seed):
  """Balanced membership as in the LiRA reference code: every canary IN for exactly M/2 models."""
  if num_models % 2:
    raise InputError(f"the number of models M must be even, got {num_models}")
  rng = np.random.default_rng(seed)
  order_MxN = rng.uniform(size=(num_models, num_canaries)).argsort(0)
  return order_MxN < num_models // 2


def _out_losses(rng, num_models, num_items, seq_len, rho, ragged):
  """(loss_MxNxT float32, mask_NxT or None) of items OUT for every model: the model above with keep = 0."""
  M, N, T = num_models, num_items, seq_len
  mu_NxT = rng.normal(1.0, 1.5, size=(N, T))
  sigma_NxT = rng.uniform(0.5, 1.5, size=(N, T))
  chol_TxT = np.linalg.cholesky(rho ** np.abs(np.subtract.outer(np.arange(T), np.arange(T))))
  loss_MxNxT = np.empty((M, N, T), np.float32)
  for m in range(M):
    loss_MxNxT[m] = np.logaddexp(0.0, -(mu_NxT + sigma_NxT * (rng.normal(size=(N, T)) @ chol_TxT.T)))
  mask_NxT = None
  if ragged:
    length_N = rng.integers(max(1, T // 2), T + 1, size=N)
    mask_NxT = np.arange(T)[None, :] < length_N[:, None]
    loss_MxNxT[:, ~mask_NxT] = np.nan
  return loss_MxNxT, mask_NxT


def synthetic_population(num_models=32, num_population=500, seq_len=32, *, rho=0.6, ragged=False, seed=0):
  """(population_MxZxT float32, population_mask_ZxT bool or None): Z sequences OUT for every model (RMIA's
  population), from the canaries' distribution with no membership shift; independent of synthetic_losses' draws."""
  if num_population < 0:
    raise InputError(f"num_population must be non-negative, got {num_population}")
  return _out_losses(np.random.default_rng([seed, 2]), num_models, num_population, seq_len, rho, ragged)


def shifted_canaries(num_canaries, frac_canaries=1.0, seed=0):
  """shifted_N bool: the canaries whose membership shifts their losses, a random round(frac x N) of them (all with
  frac_canaries = 1), from a seed stream of their own (the losses' draws do not depend on it)."""
  if not 0.0 <= frac_canaries <= 1.0:
    raise InputError(f"frac_canaries must be in [0, 1], got {frac_canaries!r}")
  shifted_N = np.zeros(num_canaries, bool)
  shifted_N[np.random.default_rng([seed, 3]).permutation(num_canaries)[:round(frac_canaries * num_canaries)]] = True
  return shifted_N


def synthetic_losses(num_models=32, num_canaries=2000, seq_len=32, *, rho=0.6, shift=1.0, frac_shifted=0.25,
                     ragged=False, seed=0, shift_units="std", frac_canaries=1.0):
  """Returns (loss_MxNxT float32, keep_MxN bool, mask_NxT bool or None) from the model above."""
  if shift_units not in ("std", "logit"):
    raise InputError(f"shift_units must be 'std' or 'logit', got {shift_units!r}")
  shifted_N = shifted_canaries(num_canaries, frac_canaries, seed)
  M, N, T = num_models, num_canaries, seq_len
  keep_MxN = keep_matrix(M, N, seed)
  rng = np.random.default_rng(seed + 1)
  mu_NxT = rng.normal(1.0, 1.5, size=(N, T))
  sigma_NxT = rng.uniform(0.5, 1.5, size=(N, T))
  b_NxT = (rng.uniform(size=(N, T)) < frac_shifted).astype(np.float64)
  b_NxT[~shifted_N] = 0.0
  corr_TxT = rho ** np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
  chol_TxT = np.linalg.cholesky(corr_TxT)
  loss_MxNxT = np.empty((M, N, T), np.float32)
  for m in range(M):  # one model at a time keeps memory at one [N, T] float64 slice
    e_NxT = rng.normal(size=(N, T)) @ chol_TxT.T
    if shift_units == "std":
      z_NxT = mu_NxT + sigma_NxT * (e_NxT + keep_MxN[m][:, None] * shift * b_NxT)
    else:
      z_NxT = mu_NxT + sigma_NxT * e_NxT + keep_MxN[m][:, None] * shift * b_NxT
    loss_MxNxT[m] = np.logaddexp(0.0, -z_NxT)
  mask_NxT = None
  if ragged:  # canaries of different lengths, right-padded; padding is not scored
    length_N = rng.integers(max(1, T // 2), T + 1, size=N)
    mask_NxT = np.arange(T)[None, :] < length_N[:, None]
    loss_MxNxT[:, ~mask_NxT] = np.nan
  return loss_MxNxT, keep_MxN, mask_NxT
