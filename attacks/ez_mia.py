"""EZ-MIA, the error-zone attack (arXiv 2601.12104, JetBrains Research; official code
github.com/JetBrains-Research/ez-mia, mia/ez_score.py, `error_zone_pos_neg_sum_ratio`) on stored per-token arrays;
higher = member.

For a text, take the target model's log-probability of each true token, lp_t, a reference model's, ref_t, and
whether the target's top-1 (argmax) token is the true token, over the positions the model predicts (scored). The
error zone E is the scored positions, less the first one, where the target's top-1 token is NOT the true token. With
d_t = lp_t - ref_t,

  P = sum_{t in E, d_t > 0} d_t,    Q = sum_{t in E, d_t < 0} |d_t|,    EZ = P / (Q + 1e-12).

Conventions, each the official function's:
- the first scored position of each text is dropped (its `ignore_bos=True`: mask[0] = 0);
- a text with fewer than min_tokens = 2 error-zone tokens scores 0.0;
- a difference of exactly 0 is in neither sum;
- Q == 0 (no negative difference in E) scores 0.0; otherwise EZ = P / (Q + 1e-12), the 1e-12 kept;
- a NaN, infinite or negative score is 0.0 (the official nan_to_num after the function).
Computed in float64 (the official code: in the model's dtype).

Where the project's form departs:
- A features folder's lp has position 0 NaN (nothing predicts the first token), so the dropped position is the
  prediction of the second token, as in the official (no-BOS) code. The project's shadow runs prepend BOS, so every
  position is scored and the dropped one is the prediction of the canary's first token.
- The reference of a shadow run's target m on canary n is the mean lp (= -loss) of n's OUT models other than m
  (`ez_mia_shadow`; the official code uses one reference model), or the base model the run fine-tuned
  (`ez_mia_base`, base_losses.npy, the official setting).
- top1 is stored as a bool array (True = the target's argmax token is the true token; on a tie the argmax is the
  first index, as the stored arrays are computed). Unscored positions are read as NaN in lp (features folders) or
  False in mask_NxT (shadow runs); top1 is only read at scored positions.
- A text with no scored position is refused (attacks/rows.py), where the official code would score it 0.0; the
  reference must be scored at the target's positions (the same tokenizer), or is refused.

A pair (m, n) with no OUT model besides its target is undefined: InputError, or NaN with on_undefined="nan".
The registry's records (end of this module): `ez_mia` (ez_mia_shadow; on a features folder, EZ-MIA against ref_lp)
and `ez_mia_base` (every model of a fine-tuning run against its base model).
"""

import numbers

import numpy as np

from attacks.rows import as_rows, canary_blocks, same_rows
from lira.checks import check_arrays
from lira.errors import InputError
from lira.loo import columns

MIN_TOKENS = 2  # the official min_tokens
EPSILON = 1e-12  # the official denominator's guard


def _check_min_tokens(min_tokens):
  if not isinstance(min_tokens, numbers.Integral) or isinstance(min_tokens, bool) or min_tokens < 1:
    raise InputError(f"min_tokens must be a positive integer, got {min_tokens!r}")
  return int(min_tokens)


def _as_top1(name, top1, shape):
  """top1 as bool of the given shape; InputError unless bool (or numbers all 0 or 1) of that shape."""
  top1 = np.asarray(top1)
  if top1.shape != tuple(shape):
    raise InputError(f"{name} must be shaped like the per-token losses {list(shape)}, got {list(top1.shape)}")
  if top1.dtype == bool:
    return top1
  what = f"{name} must be bool (True = the target's top-1 token is the true token)"
  if top1.dtype.kind not in "iuf":
    raise InputError(f"{what}, got dtype {top1.dtype}")
  if not np.isin(top1, (0, 1)).all():
    raise InputError(f"{what}, got {top1.dtype} values other than 0 and 1")
  return top1.astype(bool)


def _same_positions(scored_NxT, ref_scored_NxT, target="target_lp", reference="reference_lp"):
  """EZ-MIA compares the two models token by token: the reference must be scored exactly where the target is."""
  why = (f"EZ-MIA compares the target and reference models token by token, so {reference} must hold the "
         f"reference's log-probabilities of {target}'s tokens (the same tokenizer)")
  if ref_scored_NxT.shape != scored_NxT.shape:
    raise InputError(f"{why}: {reference} is shaped {list(ref_scored_NxT.shape)}, {target} "
                     f"{list(scored_NxT.shape)}")
  differ_NxT = scored_NxT != ref_scored_NxT
  if differ_NxT.any():
    n, t = (int(i[0]) for i in np.nonzero(differ_NxT))
    has, lacks = (target, reference) if scored_NxT[n, t] else (reference, target)
    raise InputError(f"{why}: text {n} is scored at position {t} in {has} but not in {lacks} "
                     f"({int(differ_NxT.any(axis=1).sum())} texts differ)")


def _zone(top1_XxBxT, scored_BxT):
  """The error zone: scored, top-1 wrong, and not the row's first scored position (broadcast over leading axes)."""
  zone = scored_BxT & ~top1_XxBxT
  B = scored_BxT.shape[0]
  zone[..., np.arange(B), np.argmax(scored_BxT, axis=-1)] = False  # argmax of bool: the first True
  return zone


def _ratio(delta_XxT, zone_XxT, min_tokens):
  """EZ of each row from its differences and error zone (float64 [...])."""
  d_XxT = np.where(zone_XxT, delta_XxT, 0.0)
  positive_X = np.where(d_XxT > 0, d_XxT, 0.0).sum(axis=-1)
  negative_X = np.where(d_XxT < 0, -d_XxT, 0.0).sum(axis=-1)
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    score_X = positive_X / (negative_X + EPSILON)
  defined_X = (zone_XxT.sum(axis=-1) >= min_tokens) & (negative_X != 0) & np.isfinite(score_X) & (score_X >= 0)
  return np.where(defined_X, score_X, 0.0)


def ez_mia(target_lp_NxT, reference_lp_NxT, top1_NxT, min_tokens=MIN_TOKENS):
  """EZ-MIA score_N of each text: the target's per-token lp against a reference model's on the same tokens (NaN at
  unscored positions, the same in both), the error zone read from top1_NxT (True = the target's top-1 token is the
  true token)."""
  min_tokens = _check_min_tokens(min_tokens)
  target_lp_NxT = as_rows("target_lp", target_lp_NxT)
  reference_lp_NxT = as_rows("reference_lp", reference_lp_NxT)
  same_rows("reference_lp", reference_lp_NxT, target_lp_NxT)
  same_rows("top1", top1_NxT, target_lp_NxT)
  top1_NxT = _as_top1("top1", top1_NxT, target_lp_NxT.shape)
  scored_NxT = np.isfinite(target_lp_NxT)
  _same_positions(scored_NxT, np.isfinite(reference_lp_NxT))
  delta_NxT = np.where(scored_NxT, target_lp_NxT.astype(np.float64) - reference_lp_NxT.astype(np.float64), 0.0)
  return _ratio(delta_NxT, _zone(top1_NxT, scored_NxT), min_tokens)


def _block(loss_MxNxT, top1_MxNxT, mask_NxT, blk):
  """The block's lp [M, B, T] (float64, 0 where unscored), error zone [M, B, T] and scored positions [B, T]."""
  loss_MxBxT = np.asarray(columns(loss_MxNxT, blk))
  B, T = loss_MxBxT.shape[1:]
  scored_BxT = np.ones((B, T), bool) if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
  top1_MxBxT = _as_top1("top1", np.asarray(columns(top1_MxNxT, blk)), loss_MxBxT.shape)
  lp_MxBxT = np.where(scored_BxT, -loss_MxBxT.astype(np.float64), 0.0)
  return lp_MxBxT, _zone(top1_MxBxT, scored_BxT), scored_BxT


def _shadow_checks(loss_MxNxT, keep_MxN, top1_MxNxT, mask_NxT, min_tokens):
  min_tokens = _check_min_tokens(min_tokens)
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT)
  if tuple(np.shape(top1_MxNxT)) != tuple(loss_MxNxT.shape):
    raise InputError(f"top1 must be shaped like the losses [M, N, T] = {list(loss_MxNxT.shape)}, got "
                     f"{list(np.shape(top1_MxNxT))}")
  return min_tokens


def ez_mia_shadow(loss_MxNxT, keep_MxN, top1_MxNxT, mask_NxT=None, *, min_tokens=MIN_TOKENS, on_undefined="raise",
                  block_size=None):
  """Leave-one-out EZ-MIA score_MxN: target m on canary n against the mean per-token lp of n's OUT models other
  than m (the sum of the OUT rows less m's own when m is OUT, divided by their count), m's error zone from
  top1_MxNxT[m, n].

  loss_MxNxT: per-token losses (>= 0 at scored positions; may be memory-mapped); keep_MxN: True = IN; top1_MxNxT:
  bool, True = model m's top-1 token is the true token; mask_NxT: True = scored (None: all). A pair with no OUT
  model besides its target raises InputError, or is NaN with on_undefined="nan".
  """
  if on_undefined not in ("raise", "nan"):
    raise InputError(f"on_undefined must be 'raise' or 'nan', got {on_undefined!r}")
  min_tokens = _shadow_checks(loss_MxNxT, keep_MxN, top1_MxNxT, mask_NxT, min_tokens)
  out_MxN = ~np.asarray(keep_MxN, bool)
  undefined_MxN = out_MxN.sum(axis=0)[None] - out_MxN == 0  # no OUT model other than the target
  if undefined_MxN.any() and on_undefined == "raise":
    n = int(np.flatnonzero(undefined_MxN.any(axis=0))[0])
    raise InputError(f"canary {n} has {int(out_MxN[:, n].sum())} OUT models; ez_mia_shadow needs at least 2 (1 "
                     f"left after removing an OUT target) ({int(undefined_MxN.any(axis=0).sum())} canaries "
                     "affected)")
  M, N, T = loss_MxNxT.shape
  score_MxN = np.full((M, N), np.nan)
  for blk in canary_blocks(N, 6 * 8 * M * T, block_size):  # ~6 float64 [M, B, T] arrays at once
    lp_MxBxT, zone_MxBxT, _ = _block(loss_MxNxT, top1_MxNxT, mask_NxT, blk)
    out_MxB = out_MxN[:, blk]
    count_MxB = out_MxB.sum(axis=0)[None] - out_MxB
    reference_MxBxT = (np.einsum("mbt,mb->bt", lp_MxBxT, out_MxB.astype(np.float64))[None]
                       - lp_MxBxT * out_MxB[..., None]) / np.maximum(count_MxB, 1)[..., None]
    score_MxN[:, blk] = _ratio(lp_MxBxT - reference_MxBxT, zone_MxBxT, min_tokens)
  score_MxN[undefined_MxN] = np.nan
  return score_MxN


def ez_mia_base(loss_MxNxT, base_loss_NxT, top1_MxNxT, mask_NxT=None, *, min_tokens=MIN_TOKENS, block_size=None):
  """EZ-MIA score_MxN of every model of a fine-tuning run against the base model it was fine-tuned from:
  reference lp = -base_loss_NxT (base_losses.npy), model m's error zone from top1_MxNxT[m]. Every pair is defined.
  A base loss not finite at a scored position is refused, naming the canary."""
  min_tokens = _shadow_checks(loss_MxNxT, np.zeros(loss_MxNxT.shape[:2], bool), top1_MxNxT, mask_NxT, min_tokens)
  M, N, T = loss_MxNxT.shape
  if tuple(np.shape(base_loss_NxT)) != (N, T):
    raise InputError(f"base losses must be shaped [N, T] = {[N, T]}, got {list(np.shape(base_loss_NxT))}")
  score_MxN = np.full((M, N), np.nan)
  for blk in canary_blocks(N, 4 * 8 * M * T, block_size):
    lp_MxBxT, zone_MxBxT, scored_BxT = _block(loss_MxNxT, top1_MxNxT, mask_NxT, blk)
    base_BxT = np.asarray(base_loss_NxT[blk], dtype=np.float64)
    bad_BxT = scored_BxT & ~np.isfinite(base_BxT)
    if bad_BxT.any():
      b, t = (int(i[0]) for i in np.nonzero(bad_BxT))
      raise InputError(f"base losses: canary {blk.start + b} position {t} is {base_BxT[b, t]} at a scored "
                       "position")
    score_MxN[:, blk] = _ratio(lp_MxBxT - np.where(scored_BxT, -base_BxT, 0.0), zone_MxBxT, min_tokens)
  return score_MxN


# ---- the registry's records (attacks/catalogue.py registers them) ----

def _same_tokens(arrays, labels_N, settings):
  """EZ-MIA compares the models token by token, so ref_lp must be scored exactly where lp is (the same tokenizer)."""
  del labels_N, settings
  _same_positions(np.isfinite(arrays["lp"]), np.isfinite(arrays["ref_lp"]), "lp", "ref_lp")


def _records():
  from attacks.registry import Attack, text_row  # here: attacks.registry imports nothing of this module's users
  note = ("{names}: EZ-MIA, on the target's error zone (the scored tokens, less the first, whose top-1 prediction is "
          "wrong) the sum of the target's log-probability gains over the reference divided by the sum of its "
          "losses; the reference: the mean per-token lp of the canary's OUT models other than the target.")
  base_note = ("{names}: EZ-MIA against the base model every shadow copy was fine-tuned from (base_losses.npy), the "
               "official setting: on the fine-tuned model's error zone, its summed log-probability gains over the "
               "base model divided by its summed losses.")

  def shadow(run, settings, on_undefined="raise"):
    del settings
    return ez_mia_shadow(run.loss_MxNxT, run.keep_MxN, run.top1(), run.mask_NxT, on_undefined=on_undefined)

  def check(run, settings):
    del settings
    undefined_N = (~np.asarray(run.keep_MxN, bool)).sum(axis=0) < 2
    run.check_defined(undefined_N, "EZ-MIA", "it needs an OUT model besides each OUT target")

  def texts(arrays, labels_N, settings):
    del labels_N, settings
    return [text_row("ez_mia", "EZ-MIA", ez_mia(arrays["lp"], arrays["ref_lp"], arrays["top1"]))]

  def against_base(run, settings, on_undefined="raise"):
    del settings, on_undefined  # the base model is every target's reference: always defined
    return ez_mia_base(run.loss_MxNxT, run.base_losses(), run.top1(), run.mask_NxT)

  return (Attack("ez_mia", "EZ-MIA", "dodgerblue", needs=("top1",), leave_one_out=shadow, check=check, note=note,
                 features=("lp", "ref_lp", "top1"), texts=texts, check_texts=_same_tokens),
          Attack("ez_mia_base", "EZ-MIA base", "lightskyblue", needs=("base", "top1"), leave_one_out=against_base,
                 note=base_note))


ATTACKS = _records()
