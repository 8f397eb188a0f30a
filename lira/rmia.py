"""RMIA (Zarifzadeh, Liu and Shokri, ICML 2024) on per-token losses: leave-one-out and separate targets.

For a target model theta, a candidate x and population samples z that no model trains on:
  LR(x) = Pr(x | theta) / Pr(x),  score(x) = fraction of z with LR(x) / LR(z) >= gamma,
Pr(x) the marginal over reference models. Everything is computed in log space: r(x) = ln Pr(x|theta) - ln Pr(x),
and LR(x) / LR(z) >= gamma reads r(z) <= r(x) - ln gamma (one sort of r(z) per target, then a binary search per x).

- Online (every reference model): Pr(x) = (Pr_IN(x) + Pr_OUT(x)) / 2, the means over the IN and over the OUT
  reference models (balance_counts, the default: the reference models' own IN/OUT counts carry no weight, so a
  leave-one-out target's label cannot move Pr(x)), or the plain mean over all of them (balance_counts=False).
  A population sample is OUT for every model: Pr(z) is the mean over all reference models.
- Offline (OUT reference models only): Pr(x) = ((1 + a) Pr_OUT(x) + (1 - a)) / 2, and the same for z.
- Pr(x | theta) of a sequence is its geometric-mean token probability exp(mean_t ln p_t) over the scored positions
  (after a length reduction: over the K values it keeps). `tokens=True` is the sequence-aware form: each position's
  marginal Pr_t(x) is taken over the reference models separately and r(x) = mean_t (ln p_t(x|theta) - ln Pr_t(x)),
  i.e. Pr(x) = prod_t Pr_t(x), the factorised marginal that treats positions as independent across reference
  models (as LiRA's independent variant does) so that every token is calibrated against its own difficulty.

The log-ratios themselves are public (loo_ratios, loo_unit_blocks, target_ratios, target_unit_ratios; per unit with
tokens), and so are the checks of the scorers' inputs: InfoRMIA (attacks/informia.py) reads the same r in bits.
"""

import dataclasses

import numpy as np

from lira.checks import check_arrays, check_losses, check_targets
from lira.errors import InputError
from lira.options import Options, option, shared
from lira.scoring import Scoring
from lira.transforms import check_reduction, parse_reduction, reduce_length
from run_folder import names

# Attack names of the commands' --attacks: (online, tokens).
ATTACKS = {"rmia": (True, False), "rmia_offline": (False, False), "rmia_tokens": (True, True),
           "rmia_tokens_offline": (False, True)}


@dataclasses.dataclass(frozen=True)
class RMIA(Options):
  """RMIA's settings (defaults: ML Privacy Meter's gamma = 1 and a = 0.3); invalid values raise InputError at once."""

  OWNER = "RMIA "
  PUBLIC_NAME = "lira.rmia.RMIA"

  online: bool = option(True, "Pr(x) from every reference model (else the OUT ones and the offline formula).")
  gamma: float = option(1.0, "RMIA: a population sample z counts when LR(x) / LR(z) >= gamma.", low=0,
                        low_open=True)
  a: float = option(0.3, "RMIA offline: Pr(x) = ((1 + a) Pr_OUT(x) + (1 - a)) / 2.", low=0, high=1)
  tokens: bool = option(False, "Per-position marginals (sequence-aware RMIA) instead of the sequence's.")
  # The settings RMIA shares with LiRA (SHARED), defined once on lira.Scoring: a run's scoring gives both.
  reduction: str | None = shared(Scoring, "reduction", "Length reduction before Pr(x|theta): group:K, min:K or max:K.")
  balance_counts: bool = shared(Scoring, "balance_counts",
                                "Online: Pr(x) = (Pr_IN + Pr_OUT) / 2 (else the mean over all models).")

  SHARED = ("reduction", "balance_counts")

  def check_fields(self):
    if self.tokens and parse_reduction(self.reduction)[0] in ("min", "max"):
      raise InputError(f"token-wise RMIA compares each position across models, so it needs aligned positions: "
                       f"reduction group:K or none, got {self.reduction!r}")

  @classmethod
  def named(cls, attack, scoring=None, **fields):
    """The options of a command's attack name ("rmia", "rmia_offline", "rmia_tokens", "rmia_tokens_offline"), with
    the SHARED settings of `scoring` (a lira.Scoring: the run's) unless `fields` set them."""
    if attack not in ATTACKS:
      raise InputError(f"unknown RMIA attack {attack!r}; choose from {', '.join(ATTACKS)}")
    online, tokens = ATTACKS[attack]
    common = {} if scoring is None else {n: getattr(scoring, n) for n in cls.SHARED}
    return cls(online=online, tokens=tokens, **{**common, **fields})

  @property
  def name(self):
    """Row name: "RMIA", "RMIA offline (a=0.3)", "RMIA token-wise", ...; gamma when it is not 1."""
    words = ["RMIA"] + (["token-wise"] if self.tokens else []) + ([] if self.online else [f"offline (a={self.a:g})"])
    return " ".join(words) + ("" if self.gamma == 1 else f" (gamma={self.gamma:g})")


# ---- log-probabilities ----

def log_probs(loss_MxNxT, mask_NxT, options):
  """ln Pr(x | model) per unit, float64 [M, N, U], and valid_NxU: U = 1 (the sequence's mean token log-probability
  over its scored, reduced positions) or, with tokens, the positions (after a group reduction)."""
  loss = np.asarray(loss_MxNxT, dtype=np.float64)
  valid_NxT = np.ones(loss.shape[1:], bool) if mask_NxT is None else np.asarray(mask_NxT, bool)
  lp = np.where(valid_NxT[None], -loss, 0.0)
  lp_MxNxD, valid_NxD = reduce_length(lp, np.where(valid_NxT[None], loss, 0.0), options.reduction, valid_NxT)
  if valid_NxD is None:
    valid_NxD = np.ones(lp_MxNxD.shape[1:], bool)
  lp_MxNxD = np.where(valid_NxD[None], lp_MxNxD, 0.0)
  if options.tokens:
    return lp_MxNxD, valid_NxD
  return (lp_MxNxD.sum(axis=2) / valid_NxD.sum(axis=1))[:, :, None], np.ones(lp_MxNxD.shape[1:2] + (1,), bool)


def mean_units(v_MxNxU, valid_NxU):
  """The mean [M, N] of v over each column's valid units (what is at an invalid unit, NaN included, is ignored)."""
  return np.where(valid_NxU[None], v_MxNxU, 0.0).sum(axis=2) / valid_NxU.sum(axis=1)


def _offline(log_p_out, a):
  """ln(((1 + a) P_OUT + (1 - a)) / 2) from ln P_OUT."""
  if a == 1:
    return log_p_out
  return np.logaddexp(np.log((1 + a) / 2) + log_p_out, np.log((1 - a) / 2))


def _log_mean(lp_RxNxU, member_RxN, axis=0):
  """ln of the mean of exp(lp) over the rows where member is True; -inf where there is none (count 0)."""
  lp = np.where(member_RxN[:, :, None], lp_RxNxU, -np.inf)
  count_N = member_RxN.sum(axis=0)
  with np.errstate(divide="ignore"):
    return _logsumexp0(lp) - np.log(count_N)[:, None]


def _logsumexp0(v):
  top = np.max(v, axis=0)
  top = np.where(np.isfinite(top), top, 0.0)
  with np.errstate(divide="ignore"):
    return top + np.log(np.exp(v - top).sum(axis=0))


def _log_marginal(lp_RxNxU, keep_RxN, options):
  """ln Pr(x) [N, U] from the reference models' ln Pr(x | theta') and their membership keep_RxN."""
  keep = np.asarray(keep_RxN, bool)
  if not options.online:
    return _offline(_log_mean(lp_RxNxU, ~keep), options.a)
  if not options.balance_counts:
    return _log_mean(lp_RxNxU, np.ones_like(keep))
  return np.logaddexp(_log_mean(lp_RxNxU, keep), _log_mean(lp_RxNxU, ~keep)) - np.log(2)


def _population_marginal(lp_RxZxU, options):
  """ln Pr(z) [Z, U]: every reference model is OUT for a population sample."""
  out = _log_mean(lp_RxZxU, np.ones(lp_RxZxU.shape[:2], bool))
  return out if options.online else _offline(out, options.a)


def _count(r_x_KxN, r_z_KxZ, gamma):
  """score[k, n] = fraction of z with r_z[k] <= r_x[k, n] - ln gamma (LR(x) / LR(z) >= gamma)."""
  out = np.empty(r_x_KxN.shape)
  for k in range(r_x_KxN.shape[0]):
    out[k] = np.searchsorted(np.sort(r_z_KxZ[k]), r_x_KxN[k] - np.log(gamma), side="right")
  return out / r_z_KxZ.shape[1]


# ---- checks ----

def check_population(loss_MxNxT, pop_MxZxT, pop_mask_ZxT=None, options=None, model_ids=None):
  """The population's shape against the canaries' [M, N, T], its mask, the reduction length and every scored loss."""
  options = RMIA.of(options)
  M, _, T = np.shape(loss_MxNxT)
  if np.ndim(pop_MxZxT) != 3 or np.shape(pop_MxZxT)[0] != M or np.shape(pop_MxZxT)[2] != T:
    raise InputError(f"population losses must be shaped [M, Z, T] with M = {M} models and T = {T} positions (the "
                     f"canaries'), got {list(np.shape(pop_MxZxT))}")
  Z = np.shape(pop_MxZxT)[1]
  if Z == 0:
    raise InputError("the population holds no sample (Z = 0): RMIA compares every canary with population samples")
  if pop_mask_ZxT is not None and np.shape(pop_mask_ZxT) != (Z, T):
    raise InputError(f"population mask must be shaped [Z, T] = {[Z, T]}, got {list(np.shape(pop_mask_ZxT))}")
  length_Z = np.full(Z, T) if pop_mask_ZxT is None else np.asarray(pop_mask_ZxT, bool).sum(axis=1)
  if (length_Z == 0).any():
    raise InputError(f"population sample {int(np.flatnonzero(length_Z == 0)[0])} has no scored position in its mask")
  try:
    check_reduction(options.reduction, length_Z)
  except InputError as e:
    raise InputError(str(e).replace("canary", "population sample")) from None
  check_losses(pop_MxZxT, pop_mask_ZxT, model_ids=model_ids, item="population sample",
               mask_file=names.POPULATION_MASK)


def undefined_canaries(keep_MxN, options, scorer="leave_one_out"):
  """[N] mask of canaries whose Pr(x) is undefined: no OUT reference model (offline), or, online with balanced
  counts, no IN or no OUT one. Leave-one-out counts the other M - 1 models of every target (worst case)."""
  keep = np.asarray(keep_MxN, bool)
  n_in, n_out = keep.sum(axis=0), (~keep).sum(axis=0)
  own = 1 if scorer == "leave_one_out" else 0
  if not options.online:
    return n_out - own < 1
  if options.balance_counts:
    return (n_in - own < 1) | (n_out - own < 1)
  return np.full(keep.shape[1], keep.shape[0] - own < 1)


def _undefined_error(undefined_N, options, name=None):
  n = int(np.flatnonzero(undefined_N)[0])
  need = "an IN and an OUT reference model" if options.online else "an OUT reference model"
  return InputError(f"canary {n}: {name or options.name} needs {need} per canary to estimate Pr(x) "
                    f"({int(undefined_N.sum())} canaries lack one); use more models")


# ---- leave-one-out marginals ----

def _loo_log_mean(lp_MxBxU, member_MxB):
  """[M, B, U]: for every model m, ln of the mean of exp(lp) over the OTHER models with member True (-inf if none).

  Each target's sum without its own term is a prefix plus a suffix sum of exp(lp - top) along the models (top: the
  largest lp of the column), so nothing is subtracted and no term is cancelled against a larger one.
  """
  v = np.where(member_MxB[:, :, None], lp_MxBxU, -np.inf)
  top = np.max(v, axis=0)
  top = np.where(np.isfinite(top), top, 0.0)
  e = np.exp(v - top)
  zero = np.zeros((1,) + e.shape[1:])
  before = np.concatenate([zero, np.cumsum(e, axis=0)[:-1]])
  after = np.concatenate([np.cumsum(e[::-1], axis=0)[::-1][1:], zero])
  count_MxB = member_MxB.sum(axis=0)[None] - member_MxB
  with np.errstate(divide="ignore"):
    return np.log(before + after) + top - np.log(count_MxB)[:, :, None]


def _loo_log_marginal(lp_MxBxU, keep_MxB, options):
  """ln Pr(x) [M, B, U] of every leave-one-out target: the marginal over the other M - 1 models."""
  if not options.online:
    return _offline(_loo_log_mean(lp_MxBxU, ~keep_MxB), options.a)
  if not options.balance_counts:
    return _loo_log_mean(lp_MxBxU, np.ones_like(keep_MxB))
  return np.logaddexp(_loo_log_mean(lp_MxBxU, keep_MxB), _loo_log_mean(lp_MxBxU, ~keep_MxB)) - np.log(2)


def _loo_marginal(lp_MxBxU, keep_MxB, options):
  """ln Pr(x) [M, B, U] without each target; keep_MxB None for population samples (OUT for every model)."""
  if keep_MxB is None:
    marginal = _loo_log_mean(lp_MxBxU, np.ones(lp_MxBxU.shape[:2], bool))
    return marginal if options.online else _offline(marginal, options.a)
  return _loo_log_marginal(lp_MxBxU, keep_MxB, options)


# ---- the log-ratios r = ln Pr(x|theta) - ln Pr(x): RMIA counts them, InfoRMIA (attacks/informia.py) averages ----

def loo_unit_blocks(loss_MxNxT, keep_MxN, mask_NxT, options, block_elements=2**22):
  """Yield (blk, r_MxBxU, valid_BxU) block by block of columns: the per-unit log-ratios ln p_u(x|theta_m) -
  ln Pr_u(x) of every leave-one-out target m (the marginal over the other M - 1 models), float64, NaN at invalid units.

  Units as log_probs: U = 1 (the sequence) or, with options.tokens, the positions (after a group reduction).
  keep_MxN None: population samples, OUT for every model. A canary without a reference model of a class its marginal
  needs gives NaN (the callers report it: undefined_canaries). The inputs are not checked (check_leave_one_out).
  """
  M, N, T = np.shape(loss_MxNxT)
  step = max(1, block_elements // max(1, M * T))
  for lo in range(0, N, step):
    blk = slice(lo, min(lo + step, N))
    mask = None if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
    lp_MxBxU, valid_BxU = log_probs(np.asarray(loss_MxNxT[:, blk]), mask, options)
    with np.errstate(invalid="ignore"):  # canaries without a reference model of a class: NaN, reported by the caller
      marginal = _loo_marginal(lp_MxBxU, None if keep_MxN is None else np.asarray(keep_MxN[:, blk], bool), options)
      r_MxBxU = np.where(valid_BxU[None], lp_MxBxU - marginal, np.nan)
    yield blk, r_MxBxU, valid_BxU  # outside the errstate: the caller runs while the generator waits here


def loo_unit_ratios(loss_MxNxT, keep_MxN, mask_NxT, options):
  """(r_MxNxU, valid_NxU): loo_unit_blocks' per-unit log-ratios of all the columns at once."""
  r_MxNxU, valid_NxU = None, None
  for blk, r_MxBxU, valid_BxU in loo_unit_blocks(loss_MxNxT, keep_MxN, mask_NxT, options):
    if r_MxNxU is None:
      r_MxNxU = np.empty(r_MxBxU.shape[:1] + (np.shape(loss_MxNxT)[1],) + r_MxBxU.shape[2:])
      valid_NxU = np.empty((r_MxNxU.shape[1], r_MxNxU.shape[2]), bool)
    r_MxNxU[:, blk], valid_NxU[blk] = r_MxBxU, valid_BxU
  return r_MxNxU, valid_NxU


def loo_ratios(loss_MxNxT, keep_MxN, mask_NxT, options, block_elements=2**22):
  """r = ln Pr(x|theta_m) - ln Pr(x) [M, N] of every leave-one-out target m: the mean of loo_unit_blocks' units (with
  options.tokens, r(x) = mean_t (ln p_t(x|theta) - ln Pr_t(x))), block by block of columns."""
  M, N, _ = np.shape(loss_MxNxT)
  r_MxN = np.empty((M, N))
  for blk, r_MxBxU, valid_BxU in loo_unit_blocks(loss_MxNxT, keep_MxN, mask_NxT, options, block_elements):
    r_MxN[:, blk] = mean_units(r_MxBxU, valid_BxU)
  return r_MxN


def _loo_ratios(loss_MxNxT, keep_MxN, mask_NxT, options, population, block_elements=2**22):
  """loo_ratios with population=True for keep None (benchmarks/rmia_cost.py's name)."""
  return loo_ratios(loss_MxNxT, None if population else keep_MxN, mask_NxT, options, block_elements)


def target_unit_ratios(shadow_loss_MxNxT, shadow_keep_MxN, target_loss_KxNxT, mask_NxT, options):
  """(r_KxNxU, valid_NxU): the per-unit log-ratios ln p_u(x|theta_k) - ln Pr_u(x) of K separate targets, Pr_u(x) the
  marginal over all M shadow models; NaN at invalid units. shadow_keep_MxN None: population samples (OUT for every
  model). The inputs are not checked (check_score_targets)."""
  M = np.shape(shadow_loss_MxNxT)[0]
  lp, valid_NxU = log_probs(np.concatenate([np.asarray(shadow_loss_MxNxT), np.asarray(target_loss_KxNxT)]), mask_NxT,
                            options)
  if shadow_keep_MxN is None:
    marginal = _population_marginal(lp[:M], options)
  else:
    marginal = _log_marginal(lp[:M], np.asarray(shadow_keep_MxN, bool), options)
  return np.where(valid_NxU[None], lp[M:] - marginal, np.nan), valid_NxU


def target_ratios(shadow_loss_MxNxT, shadow_keep_MxN, target_loss_KxNxT, mask_NxT, options):
  """r = ln Pr(x|theta_k) - ln Pr(x) [K, N] of K separate targets: the mean of target_unit_ratios' units."""
  return mean_units(*target_unit_ratios(shadow_loss_MxNxT, shadow_keep_MxN, target_loss_KxNxT, mask_NxT, options))


# ---- scorers ----

def check_leave_one_out(loss_MxNxT, keep_MxN, pop_MxZxT, options, *, mask_NxT=None, pop_mask_ZxT=None,
                        on_undefined="raise", model_ids=None, name=None):
  """Every input of a leave-one-out scorer against a population (RMIA, InfoRMIA) checked: returns (keep_MxN as bool,
  undefined_N), the canaries whose Pr(x) is undefined, which raise InputError with on_undefined="raise". name: the
  attack in messages (default options.name)."""
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT, options.reduction, model_ids)
  M = np.shape(loss_MxNxT)[0]
  check_population(loss_MxNxT, pop_MxZxT, pop_mask_ZxT, options, model_ids)
  if M < 2:
    raise InputError(f"leave-one-out {name or 'RMIA'} needs at least 2 models, got M = {M}")
  keep = np.asarray(keep_MxN, bool)
  undefined_N = undefined_canaries(keep, options)
  if undefined_N.any() and on_undefined == "raise":
    raise _undefined_error(undefined_N, options, name)
  return keep, undefined_N


def check_score_targets(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                        options, *, mask_NxT=None, pop_mask_ZxT=None, name=None):
  """Every input of a separate-target scorer against a population checked: returns (target_KxNxT, target_pop_KxZxT,
  shadow_keep_MxN as bool), a single target's [N, T] and [Z, T] made [1, N, T] and [1, Z, T]. A canary whose Pr(x) is
  undefined raises InputError."""
  check_arrays(shadow_loss_MxNxT, shadow_keep_MxN, mask_NxT, options.reduction)
  _, N, T = np.shape(shadow_loss_MxNxT)
  target = check_targets(target_loss_KxNxT, N, T, mask_NxT)
  target_pop = target_pop_KxZxT if np.ndim(target_pop_KxZxT) == 3 else np.asarray(target_pop_KxZxT)[None]
  if np.ndim(target_pop) != 3 or target_pop.shape[0] != target.shape[0] or target_pop.shape[1:] != np.shape(
      shadow_pop_MxZxT)[1:]:
    raise InputError(f"target population losses must be shaped [K, Z, T] = "
                     f"{[target.shape[0]] + list(np.shape(shadow_pop_MxZxT)[1:])}, got {list(np.shape(target_pop))}")
  both = np.concatenate([np.asarray(shadow_loss_MxNxT), np.asarray(target)])
  both_pop = np.concatenate([np.asarray(shadow_pop_MxZxT), np.asarray(target_pop)])
  check_population(both, both_pop, pop_mask_ZxT, options)
  keep = np.asarray(shadow_keep_MxN, bool)
  undefined_N = undefined_canaries(keep, options, scorer="targets")
  if undefined_N.any():
    raise _undefined_error(undefined_N, options, name)
  return target, target_pop, keep


def leave_one_out(loss_MxNxT, keep_MxN, pop_MxZxT, options=None, *, mask_NxT=None, pop_mask_ZxT=None,
                  on_undefined="raise", model_ids=None, **fields):
  """Leave-one-out RMIA scores [M, N] in [0, 1] (higher = member): model m the target, the other M - 1 its
  reference models, pop_MxZxT the population's per-token losses on every model.

  Pairs whose Pr(x) is undefined raise, or give NaN with on_undefined="nan". Every input is checked first. The
  arrays may be memory-mapped: they are read a block of columns at a time.
  """
  options = RMIA.of(options, **fields)
  keep, undefined_N = check_leave_one_out(loss_MxNxT, keep_MxN, pop_MxZxT, options, mask_NxT=mask_NxT,
                                          pop_mask_ZxT=pop_mask_ZxT, on_undefined=on_undefined, model_ids=model_ids)
  r_x = loo_ratios(loss_MxNxT, keep, mask_NxT, options)
  r_z = loo_ratios(pop_MxZxT, None, pop_mask_ZxT, options)
  score = _count(np.where(undefined_N[None], 0.0, r_x), r_z, options.gamma)
  score[:, undefined_N] = np.nan
  return score


def score_targets(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                  options=None, *, mask_NxT=None, pop_mask_ZxT=None, **fields):
  """RMIA scores [K, N] of K separate targets, every one of the M shadow models a reference model."""
  options = RMIA.of(options, **fields)
  target, target_pop, keep = check_score_targets(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT,
                                                 target_loss_KxNxT, target_pop_KxZxT, options, mask_NxT=mask_NxT,
                                                 pop_mask_ZxT=pop_mask_ZxT)
  r_x = target_ratios(shadow_loss_MxNxT, keep, target, mask_NxT, options)
  r_z = target_ratios(shadow_pop_MxZxT, None, target_pop, pop_mask_ZxT, options)
  return _count(r_x, r_z, options.gamma)
