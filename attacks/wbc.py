"""WBC, window-based comparison (Chen et al., USENIX Security 2026; official code github.com/Stry233/WBC,
attacks/wbc.py, MIT licence) on stored per-token arrays; higher = member.

A text's per-token losses a_1..a_L under the target model and b_1..b_L under a reference are each row's first L
scored positions in order (L = the smaller of the two rows' scored counts, the official trimming). For window sizes W:

  WBC = (1 / |W|) sum_{w in W} (1 / (L - v + 1)) sum_{j=1}^{L-v+1} 1[ b_j + ... + b_{j+v-1} > a_j + ... + a_{j+v-1} ],
  v = min(w, L)

- a window votes member when the reference's summed loss STRICTLY exceeds the target's: a tie votes non-member;
- a text shorter than w is one window, the whole text (v = L), which still counts once in the mean over W;
- each window size weighs 1 / |W| whatever its number of windows (the official np.mean over the per-size fractions).

The official code scores a text with no scored position 0.0; here such a row is refused (attacks/rows.py). The
windows run over the scored positions, so positions left out of a row (NaN, or False in the mask) are skipped over,
as the official code's boolean indexing does.

Two leave-one-out forms score a run of M shadow models (target m against the others, canary by canary):
- wbc_shadow: the reference's per-token loss is the mean over canary n's OUT models other than m;
- wbc_vote: WBC of m against each OUT model r != m on its own, averaged over those references.
The registry's records (end of this module): `wbc` (wbc_shadow; on a features folder, WBC against ref_lp), `wbc_vote`,
and `wbc_base`, every model of a fine-tuning run against the base model it was fine-tuned from (base_losses.npy),
the official setting.
A pair (m, n) with no such OUT model is undefined: InputError, or NaN with on_undefined="nan".
"""

import numbers

import numpy as np

from attacks.rows import as_rows, canary_blocks, same_rows
from lira.checks import check_arrays
from lira.errors import InputError
from lira.loo import columns

WINDOW_SIZES = (2, 3, 4, 6, 9, 13)  # geometrically spaced, ~1.5x apart
# The official repository's configs/example.yaml and README (its class's own default is a single window of 1).
OFFICIAL_WINDOW_SIZES = (2, 3, 4, 6, 9, 13, 18, 25, 32, 40)


def check_window_sizes(window_sizes):
  """The window sizes as a tuple of ints; InputError unless a non-empty set of positive integers."""
  sizes = tuple(window_sizes) if np.ndim(window_sizes) == 1 else ()
  if not sizes or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) and w > 0 for w in sizes):
    raise InputError(f"window_sizes must be a non-empty list of positive integers, got {window_sizes!r}")
  return tuple(int(w) for w in sizes)


def _window_sums(x_XxT, w):
  """Sums of w consecutive values [..., T - w + 1], each added up from its own w values (not a difference of
  prefix sums), so two windows holding the same values have the same sum and a tie stays a tie."""
  J = x_XxT.shape[-1] - w + 1
  out = x_XxT[..., :J].copy()
  for k in range(1, w):
    out += x_XxT[..., k:k + J]
  return out


def _fractions(a_XxT, b_XxT, length_X, window_sizes):
  """WBC of target losses a against reference losses b (broadcast together), float64 [...].

  Both hold each text's L = length_X scored losses first, left-aligned, and zeros after them.
  """
  T = a_XxT.shape[-1]
  whole_X = b_XxT.sum(axis=-1) > a_XxT.sum(axis=-1)  # the one window of a text shorter than w
  score_X = np.zeros(np.broadcast_shapes(a_XxT.shape[:-1], b_XxT.shape[:-1]))
  for w in window_sizes:
    if w > T:
      score_X += whole_X
      continue
    J = T - w + 1
    inside_XxJ = np.arange(J) + w <= length_X[..., None]  # the window ends within the text
    wins_X = np.count_nonzero((_window_sums(b_XxT, w) > _window_sums(a_XxT, w)) & inside_XxJ, axis=-1)
    score_X += np.where(length_X >= w, wins_X / np.maximum(length_X - w + 1, 1), whole_X)
  return score_X / len(window_sizes)


def _left_aligned(loss_XxT, scored_XxT):
  """float64 losses with each row's scored positions moved to the front, in order, and zeros after them."""
  order_XxT = np.argsort(~scored_XxT, axis=-1, kind="stable")
  loss_XxT = np.where(scored_XxT, loss_XxT, 0.0).astype(np.float64, copy=False)
  return np.take_along_axis(loss_XxT, np.broadcast_to(order_XxT, loss_XxT.shape), axis=-1)


def wbc(target_lp_NxT, reference_lp_NxT, window_sizes=WINDOW_SIZES):
  """WBC score_N of each text: the target's per-token lp against a reference model's (loss = -lp), NaN at
  unscored positions; the two may be tokenized differently (their own widths and scored counts)."""
  sizes = check_window_sizes(window_sizes)
  target_lp_NxT = as_rows("target_lp", target_lp_NxT)
  reference_lp_NxT = as_rows("reference_lp", reference_lp_NxT)
  same_rows("reference_lp", reference_lp_NxT, target_lp_NxT)
  rows = []
  for lp_NxT in (target_lp_NxT, reference_lp_NxT):
    scored_NxT = np.isfinite(lp_NxT)
    rows.append((_left_aligned(-lp_NxT, scored_NxT), scored_NxT.sum(axis=1)))
  (a_NxT, n_target_N), (b_NxT, n_reference_N) = rows
  length_N = np.minimum(n_target_N, n_reference_N)
  T = min(a_NxT.shape[1], b_NxT.shape[1])
  inside_NxT = np.arange(T) < length_N[:, None]
  return _fractions(np.where(inside_NxT, a_NxT[:, :T], 0.0), np.where(inside_NxT, b_NxT[:, :T], 0.0), length_N,
                    sizes)


def _shadow_setup(loss_MxNxT, keep_MxN, mask_NxT, window_sizes, on_undefined, scorer):
  """Checked inputs: (sizes, out_MxN, the undefined pairs [M, N])."""
  sizes = check_window_sizes(window_sizes)
  if on_undefined not in ("raise", "nan"):
    raise InputError(f"on_undefined must be 'raise' or 'nan', got {on_undefined!r}")
  check_arrays(loss_MxNxT, keep_MxN, mask_NxT)
  out_MxN = ~np.asarray(keep_MxN, bool)
  references_MxN = out_MxN.sum(axis=0)[None] - out_MxN  # OUT models other than the target
  undefined_MxN = references_MxN == 0
  if undefined_MxN.any() and on_undefined == "raise":
    n = int(np.flatnonzero(undefined_MxN.any(axis=0))[0])
    raise InputError(f"canary {n} has {int(out_MxN[:, n].sum())} OUT models; {scorer} needs at least 2 (1 left "
                     f"after removing an OUT target) ({int(undefined_MxN.any(axis=0).sum())} canaries affected)")
  return sizes, out_MxN, undefined_MxN


def _block_losses(loss_MxNxT, mask_NxT, blk):
  """The block's losses left-aligned [M, B, T] (float64) and its scored counts [B]."""
  loss_MxBxT = np.asarray(columns(loss_MxNxT, blk))
  B, T = loss_MxBxT.shape[1:]
  scored_BxT = np.ones((B, T), bool) if mask_NxT is None else np.asarray(mask_NxT[blk], bool)
  return _left_aligned(loss_MxBxT, scored_BxT[None]), scored_BxT.sum(axis=1)


def wbc_shadow(loss_MxNxT, keep_MxN, mask_NxT=None, window_sizes=WINDOW_SIZES, *, on_undefined="raise",
               block_size=None):
  """Leave-one-out WBC score_MxN: target m on canary n against the mean per-token loss of n's OUT models other
  than m (the sum of the OUT rows less m's own when m is OUT).

  loss_MxNxT: per-token losses (>= 0 at scored positions; may be memory-mapped); keep_MxN: True = IN; mask_NxT: True
  = scored (None: all). A pair with no OUT model besides its target raises InputError, or is NaN with
  on_undefined="nan".
  """
  sizes, out_MxN, undefined_MxN = _shadow_setup(loss_MxNxT, keep_MxN, mask_NxT, window_sizes, on_undefined,
                                                "wbc_shadow")
  M, N, T = loss_MxNxT.shape
  score_MxN = np.full((M, N), np.nan)
  for blk in canary_blocks(N, 8 * 8 * M * T, block_size):  # ~8 float64 [M, B, T] arrays at once
    a_MxBxT, length_B = _block_losses(loss_MxNxT, mask_NxT, blk)
    out_MxB = out_MxN[:, blk]
    own_MxBxT = a_MxBxT * out_MxB[..., None]
    count_MxB = out_MxB.sum(axis=0)[None] - out_MxB
    b_MxBxT = (np.einsum("mbt,mb->bt", a_MxBxT, out_MxB.astype(np.float64))[None] - own_MxBxT) \
        / np.maximum(count_MxB, 1)[..., None]
    score_MxN[:, blk] = _fractions(a_MxBxT, b_MxBxT, length_B, sizes)
  score_MxN[undefined_MxN] = np.nan
  return score_MxN


def wbc_vote(loss_MxNxT, keep_MxN, mask_NxT=None, window_sizes=WINDOW_SIZES, *, on_undefined="raise",
             block_size=None):
  """Leave-one-out WBC score_MxN voted over references: the mean over canary n's OUT models r != m of WBC(m, r),
  i.e. per window size the fraction of (reference, window) comparisons target m wins, averaged over the sizes.

  Arguments and undefined pairs as wbc_shadow's. Every model's window sums are computed once per block of canaries;
  the [M, M, B, T] comparisons are sized by attacks.rows.BLOCK_BYTES.
  """
  sizes, out_MxN, undefined_MxN = _shadow_setup(loss_MxNxT, keep_MxN, mask_NxT, window_sizes, on_undefined,
                                                "wbc_vote")
  M, N, T = loss_MxNxT.shape
  eye_MxM = np.eye(M, dtype=bool)
  score_MxN = np.full((M, N), np.nan)
  for blk in canary_blocks(N, 3 * M * M * T, block_size):  # two bool [M, M, B, T] arrays and [M, M, B] counts
    a_MxBxT, length_B = _block_losses(loss_MxNxT, mask_NxT, blk)
    fraction_MxRxB = _fractions(a_MxBxT[:, None], a_MxBxT[None], length_B, sizes)  # target m, reference r
    reference_MxRxB = out_MxN[None, :, blk] & ~eye_MxM[..., None]
    with np.errstate(invalid="ignore", divide="ignore"):
      score_MxN[:, blk] = (fraction_MxRxB * reference_MxRxB).sum(axis=1) / reference_MxRxB.sum(axis=1)
  score_MxN[undefined_MxN] = np.nan
  return score_MxN


# ---- the registry's records (attacks/catalogue.py registers them) ----

def _windows(settings):
  return settings["wbc_windows"]


def _same_tokens(arrays, labels_N, settings):
  """WBC compares the models token by token, so the reference's lp must be on lp's tokens (the same tokenizer)."""
  del labels_N, settings
  scored_N = np.isfinite(arrays["lp"]).sum(axis=1)
  ref_N = np.isfinite(arrays["ref_lp"]).sum(axis=1)
  if arrays["ref_lp"].ndim != 2 or np.any(scored_N != ref_N):
    n = int(np.flatnonzero(scored_N != ref_N)[0]) if arrays["ref_lp"].ndim == 2 else 0
    raise InputError(f"wbc compares the target and reference models token by token, so ref_lp must hold the "
                     f"reference's log-probabilities of lp's tokens (the same tokenizer): text {n} has "
                     f"{int(scored_N[n])} scored tokens in lp and {int(ref_N[n])} in ref_lp")


def _records():
  from attacks.registry import Attack, Setting, text_row  # at first use, as ez_mia.py and informia.py
  windows = Setting("wbc_windows", WINDOW_SIZES, "WBC: the window sizes (tokens) whose win fractions are averaged "
                    f"(the official example's ten: {','.join(map(str, OFFICIAL_WINDOW_SIZES))}).", 1, kind="ints")
  note = ("{names}: WBC, the fraction of token windows in which the reference's summed loss exceeds the target "
          "model's, averaged over the window sizes; the reference: the mean per-token loss of the canary's OUT "
          "models other than the target.")
  vote_note = ("{names}: WBC vote, the fraction of token windows in which a reference's summed loss exceeds the "
               "target model's, averaged over the window sizes, for each of the canary's OUT models other than the "
               "target on its own, the fractions averaged.")

  def label(title):
    """The row's name: its title, and the window sizes where they are not the default."""
    return lambda s: title + ("" if tuple(_windows(s)) == tuple(WINDOW_SIZES) else
                              f" (windows={','.join(map(str, _windows(s)))})")

  def shadow(run, settings, on_undefined="raise"):
    return wbc_shadow(run.loss_MxNxT, run.keep_MxN, run.mask_NxT, _windows(settings), on_undefined=on_undefined)

  def vote(run, settings, on_undefined="raise"):
    return wbc_vote(run.loss_MxNxT, run.keep_MxN, run.mask_NxT, _windows(settings), on_undefined=on_undefined)

  def check(run, settings):
    undefined_N = (~np.asarray(run.keep_MxN, bool)).sum(axis=0) < 2
    run.check_defined(undefined_N, "WBC", "it needs an OUT model besides each OUT target")

  def texts(arrays, labels_N, settings):
    del labels_N
    return [text_row("wbc", label("WBC")(settings), wbc(arrays["lp"], arrays["ref_lp"], _windows(settings)),
                 {"wbc_windows": list(_windows(settings))})]

  def base_lp(run):
    return -np.asarray(run.base_losses(), dtype=np.float64) if run.mask_NxT is None else np.where(
        np.asarray(run.mask_NxT, bool), -np.asarray(run.base_losses(), dtype=np.float64), np.nan)

  def against_base(run, settings, on_undefined="raise"):
    del on_undefined  # the base model is every target's reference: always defined
    ref_NxT = base_lp(run)
    return np.stack([wbc(run.target_lp(m), ref_NxT, _windows(settings)) for m in range(run.num_models)])

  def targets(run, target_loss_KxNxT, target_pop_KxZxT, settings):
    del target_pop_KxZxT
    ref_NxT = base_lp(run)
    mask = None if run.mask_NxT is None else np.asarray(run.mask_NxT, bool)
    lp_KxNxT = -np.asarray(target_loss_KxNxT, dtype=np.float64)
    lp_KxNxT = lp_KxNxT[None] if lp_KxNxT.ndim == 2 else lp_KxNxT
    return np.stack([wbc(lp if mask is None else np.where(mask, lp, np.nan), ref_NxT, _windows(settings))
                     for lp in lp_KxNxT])

  base_note = ("{names}: WBC against the base model every shadow copy was fine-tuned from (base_losses.npy), the "
               "official setting: the fraction of token windows in which the base model's summed loss exceeds the "
               "fine-tuned model's, averaged over the window sizes.")
  return (Attack("wbc", "WBC", "teal", uses=("wbc_windows",), leave_one_out=shadow, check=check, note=note,
                 features=("lp", "ref_lp"), texts=texts, check_texts=_same_tokens, new_settings=(windows,),
                 label_of=label("WBC")),
          Attack("wbc_vote", "WBC vote", "darkslategray", uses=("wbc_windows",), leave_one_out=vote, check=check,
                 note=vote_note, label_of=label("WBC vote")),
          Attack("wbc_base", "WBC base", "cadetblue", uses=("wbc_windows",), needs=("base",),
                 leave_one_out=against_base, targets=targets, note=base_note, label_of=label("WBC base")))


ATTACKS = _records()
