"""attacks/ez_mia.py: EZ-MIA against a per-text loop written from the definition (tests/attacks/ez_mia_reference.py)
on ragged features-folder rows and shadow runs, its conventions on hand-made rows, and the registry's records on a
small stand-in for a shadow run."""

import numpy as np
import pytest
from ez_mia_reference import ez_rows, ez_shadow_loop  # tests/attacks/, on sys.path (tests/conftest.py)

from attacks import ez_mia as E
from lira.errors import InputError
from lira.evaluation import ModelRows

# Both sides take the same float64 differences (the shadow reference mean is the same number too: the losses are
# float32 values within 2^-10 .. 2^5, whose sums over a few models are exact in float64, so the closed-form "sum of all
# OUT rows less the target's own" equals the loop's sum over the others before the one division); only the order in
# which P and Q add up their same-signed terms differs, a relative error of at most about T * 2^-53 (~1e-15 for
# T = 20) on each, so 1e-12 relative leaves a wide margin. An exact 0 must be an exact 0 (atol = 0).
CLOSE = {"rtol": 1e-12, "atol": 0}


def features_rows(rng, N=14, T=20):
  """A features folder's lp and ref_lp (float32, position 0 NaN, ragged ends and a hole; ref_lp scored at the same
  positions) and top1 (False at unscored positions), with the conventions' cases planted in rows 0-4."""
  lp = -rng.exponential(2.0, size=(N, T)).astype(np.float32)
  ref = -rng.exponential(2.0, size=(N, T)).astype(np.float32)
  length = rng.integers(2, T + 1, size=N)
  scored = (np.arange(T) >= 1) & (np.arange(T) < length[:, None])
  scored[6, 4] = scored[6, 7] = False  # holes
  scored[7] = np.arange(T) >= 3  # the first scored position is 3
  top1 = rng.random((N, T)) < 0.4
  length[:5] = T
  scored[:5] = np.arange(T) >= 1
  ref[0, ::2] = lp[0, ::2]  # exact ties: deltas of 0, in neither sum
  top1[1] = True
  top1[1, [1, 5]] = False  # 2 error tokens, the first one dropped: 1 left -> 0
  ref[2] = lp[2] - 0.25  # every delta positive: no negative sum -> 0
  ref[3] = lp[3]  # every delta 0 -> 0
  top1[4] = True  # no error token -> 0
  lp, ref = np.where(scored, lp, np.nan), np.where(scored, ref, np.nan)
  return lp, ref, top1 & scored, scored


def test_ez_mia_equals_the_definition():
  rng = np.random.default_rng(0)
  for _ in range(4):
    lp, ref, top1, scored = features_rows(rng)
    want = ez_rows(lp, ref, top1, scored)
    got = E.ez_mia(lp, ref, top1)
    np.testing.assert_allclose(got, want, **CLOSE)
    assert got.dtype == np.float64 and (got[1:5] == 0).all() and (got[5:] > 0).any()
    np.testing.assert_allclose(E.ez_mia(lp, ref, top1, min_tokens=5), ez_rows(lp, ref, top1, scored, 5), **CLOSE)
    np.testing.assert_allclose(E.ez_mia(lp.astype(np.float64), ref, top1.astype(np.int8)), want, **CLOSE)


def test_ez_mia_rules_on_hand_made_rows():
  nan = np.nan
  # Position 0 unscored; position 1 the first scored one: a top-1 error with a huge delta, which is dropped.
  lp = np.array([[nan, 0.0, -1.0, -1.0, -3.0, -2.0, -1.0, nan]])
  ref = np.array([[nan, -1e6, -2.0, -1.0, -1.0, -2.5, -0.5, nan]])
  top1 = np.array([[False, False, True, False, False, False, False, False]])
  # Error zone: positions 3..6 (2 is right, 1 dropped): deltas 0, -2, +0.5, -0.5. P = 0.5, Q = 2.5.
  assert E.ez_mia(lp, ref, top1)[0] == 0.5 / (2.5 + 1e-12)
  # The same row with a right token scored before it: position 1 is no longer the first, and its huge delta counts.
  lp0, ref0 = lp.copy(), ref.copy()
  lp0[0, 0] = ref0[0, 0] = -1.0
  assert E.ez_mia(lp0, ref0, top1 | (np.arange(8) == 0))[0] == (1e6 + 0.5) / (2.5 + 1e-12)
  # The first scored position is an error token whose delta is huge, and only one more error token: 1 < 2 -> 0.
  only = np.array([[False, False, True, True, False, True, True, True]])
  assert E.ez_mia(lp, ref, only)[0] == 0.0
  # Deltas of exactly 0 count in neither sum (here they would leave Q == 0 -> 0 either way); a row of them scores 0.
  assert E.ez_mia(lp, lp, np.zeros_like(top1))[0] == 0.0
  tied = ref.copy()
  tied[0, 5] = lp[0, 5]  # the +0.5 becomes a 0: P = 0
  assert E.ez_mia(lp, tied, top1)[0] == 0.0
  # A 0 delta still counts as an error-zone token (the official count is of the zone, whatever the deltas):
  # deltas 0, -1, +1 after the dropped first position are 3 tokens, enough for min_tokens = 3.
  three_lp = np.array([[nan, -1.0, -1.0, -2.0, -1.0]])
  three_ref = np.array([[nan, -1.0, -1.0, -1.0, -2.0]])
  assert E.ez_mia(three_lp, three_ref, np.zeros((1, 5), bool), min_tokens=3)[0] == 1 / (1 + 1e-12)
  assert E.ez_mia(three_lp, three_ref, np.zeros((1, 5), bool), min_tokens=4)[0] == 0.0


def test_shadow_style_rows_drop_the_first_scored_position():
  # A shadow run scores position 0 (BOS first): it is the dropped one; with a mask the first True is.
  lp = np.array([[-1.0, -1.0, -3.0, -2.0], [-1.0, -1.0, -3.0, -2.0]])
  ref = np.array([[-5.0, -2.0, -2.0, -2.0], [-5.0, -2.0, -2.0, -2.0]])
  top1 = np.zeros((2, 4), bool)
  loss = -lp[None].repeat(3, axis=0)
  loss[1:] = -ref[None]  # models 1 and 2 are the OUT reference of model 0 (IN)
  keep = np.array([[True, True], [False, False], [False, False]])
  top1_MxNxT = np.zeros((3, 2, 4), bool)
  mask = np.array([[True, True, True, True], [False, True, True, True]])
  got = E.ez_mia_shadow(loss, keep, top1_MxNxT, mask)[0]
  # Canary 0: position 0 dropped, deltas +1, -1, 0 -> 1 / 1. Canary 1: position 1 dropped, -1, 0 -> P = 0 -> 0.
  assert got[0] == 1 / (1 + 1e-12) and got[1] == 0.0
  np.testing.assert_array_equal(E.ez_mia(lp, ref, top1), [1 / (1 + 1e-12), 1 / (1 + 1e-12)])


def shadow_run(rng, M=7, N=9, T=11):
  """float32 losses in [2^-10, 2^5] (NaN where unscored), a random keep (every canary with 2+ OUT models), top1, and
  a ragged mask with a hole; canaries 2-4 hold planted ties, a lone error token, and a target above every OUT model."""
  loss = np.clip(rng.exponential(1.0, size=(M, N, T)), 2.0**-10, 2.0**5).astype(np.float32)
  keep = rng.random((M, N)) < 0.5
  keep[:2, :] = False
  keep[2:, 0] = True  # canary 0: exactly 2 OUT models
  top1 = rng.random((M, N, T)) < 0.4
  mask = np.arange(T) < rng.integers(3, T + 1, size=N)[:, None]
  mask[1] = False
  mask[1, 0] = True  # one scored position: nothing left after the first -> 0
  mask[2, :3] = False  # ties; the first scored position is 3
  mask[2, 3:] = True
  mask[5, 4] = False  # a hole
  loss[:, 2, ::2] = loss[0, 2, ::2]  # every model equal at every other position: deltas of exactly 0
  top1[:, 3] = True
  top1[:, 3, 1] = False  # canary 3: a single error token -> 0
  mask[3] = True
  loss[0, 4] = 2.0**-10  # canary 4: model 0 above every other model's lp everywhere -> no negative delta -> 0
  mask[4] = True
  loss[:, ~mask] = np.nan
  return loss, keep, top1 & mask, mask


def as_array(loop_scores):
  return np.array([[np.nan if s is None else s for s in row] for row in loop_scores])


def test_ez_mia_shadow_equals_the_loop():
  rng = np.random.default_rng(1)
  loss, keep, top1, mask = shadow_run(rng)
  want = as_array(ez_shadow_loop(loss, keep, top1, mask))
  got = E.ez_mia_shadow(loss, keep, top1, mask)
  np.testing.assert_allclose(got, want, **CLOSE)
  assert (got[:, [1, 3]] == 0).all() and got[0, 4] == 0 and (got[:, 5:] > 0).any()
  for block_size in (1, 2, 4):
    np.testing.assert_array_equal(E.ez_mia_shadow(loss, keep, top1, mask, block_size=block_size), got)
  full = np.nan_to_num(loss, nan=0.5)  # mask None: every position scored
  np.testing.assert_allclose(E.ez_mia_shadow(full, keep, top1), as_array(ez_shadow_loop(full, keep, top1, None)),
                             **CLOSE)
  np.testing.assert_allclose(E.ez_mia_shadow(loss, keep, top1, mask, min_tokens=4),
                             as_array(ez_shadow_loop(loss, keep, top1, mask, 4)), **CLOSE)


def test_ez_mia_shadow_on_a_model_subset_view():
  # run.subset(models) hands over row-subset views (lira.evaluation.ModelRows) of the losses and of top1.
  rng = np.random.default_rng(4)
  loss, keep, top1, mask = shadow_run(rng)
  models = np.array([0, 1, 3, 4, 6])
  got = E.ez_mia_shadow(ModelRows(loss, models), keep[models], ModelRows(top1, models), mask, block_size=3)
  np.testing.assert_array_equal(got, E.ez_mia_shadow(loss[models], keep[models], top1[models], mask))


def test_undefined_pairs_raise_or_are_nan():
  rng = np.random.default_rng(2)
  loss, keep, top1, mask = shadow_run(rng)
  keep[:, 6] = True
  keep[4, 6] = False  # canary 6: one OUT model, which has no reference left
  keep[:, 7] = True  # canary 7: none
  with pytest.raises(InputError, match=r"canary 6 has 1 OUT models; ez_mia_shadow needs at least 2 .* "
                                       r"\(2 canaries affected\)"):
    E.ez_mia_shadow(loss, keep, top1, mask)
  score = E.ez_mia_shadow(loss, keep, top1, mask, on_undefined="nan")
  undefined = np.zeros(keep.shape, bool)
  undefined[4, 6] = undefined[:, 7] = True
  assert (np.isnan(score) == undefined).all()
  np.testing.assert_allclose(score, as_array(ez_shadow_loop(loss, keep, top1, mask)), **CLOSE)


def test_ez_mia_base_equals_the_definition_per_model():
  rng = np.random.default_rng(3)
  loss, _, top1, mask = shadow_run(rng)
  base = np.clip(rng.exponential(1.0, size=mask.shape), 2.0**-10, 2.0**5).astype(np.float32)
  base[~mask] = np.nan  # never read there
  got = E.ez_mia_base(loss, base, top1, mask, block_size=2)
  ref_lp = np.where(mask, -base.astype(np.float64), np.nan)
  for m in range(loss.shape[0]):
    lp = np.where(mask, -loss[m].astype(np.float64), np.nan)
    np.testing.assert_allclose(got[m], ez_rows(lp, ref_lp, top1[m], mask), **CLOSE)
    np.testing.assert_array_equal(got[m], E.ez_mia(lp, ref_lp, top1[m]))
  bad = base.copy()
  bad[5, 2] = np.nan
  with pytest.raises(InputError, match=r"base losses: canary 5 position 2 is nan at a scored position"):
    E.ez_mia_base(loss, bad, top1, mask)


def test_members_score_higher_on_a_planted_toy():
  from sklearn.metrics import roc_auc_score
  rng = np.random.default_rng(5)
  M, N, T = 10, 40, 24
  keep = rng.random((M, N)) < 0.5
  keep[:3], keep[3:6] = False, True
  base = rng.exponential(2.0, size=(N, T))
  loss = (base[None] * rng.uniform(0.7, 1.3, size=(M, N, T)) * np.where(keep, 0.8, 1.0)[..., None]).astype(np.float32)
  top1 = rng.random((M, N, T)) < 0.3
  assert roc_auc_score(keep.ravel(), E.ez_mia_shadow(loss, keep, top1).ravel()) > 0.8


def test_a_reference_on_other_tokens_and_bad_input_are_refused():
  rng = np.random.default_rng(6)
  lp, ref, top1, _ = features_rows(rng)
  other = ref.copy()
  other[8, 4] = np.nan
  with pytest.raises(InputError, match=r"same tokenizer\): text 8 is scored at position 4 in target_lp but not in "
                                       r"reference_lp \(1 texts differ\)"):
    E.ez_mia(lp, other, top1)
  other = ref.copy()
  other[3, 0] = -1.0
  with pytest.raises(InputError, match=r"text 3 is scored at position 0 in reference_lp but not in target_lp"):
    E.ez_mia(lp, other, top1)
  with pytest.raises(InputError, match=r"reference_lp is shaped \[14, 18\], target_lp \[14, 20\]"):
    E.ez_mia(lp, ref[:, :18], top1)
  with pytest.raises(InputError, match="reference_lp: 13 rows, but lp has 14"):
    E.ez_mia(lp, ref[1:], top1)
  with pytest.raises(InputError, match="reference_lp: row 0 has no scored position"):
    E.ez_mia(lp, np.full(lp.shape, np.nan), top1)
  with pytest.raises(InputError, match=r"top1 must be shaped like the per-token losses \[14, 20\], got \[14, 19\]"):
    E.ez_mia(lp, ref, top1[:, 1:])
  with pytest.raises(InputError, match="top1 must be bool .*, got float64 values other than 0 and 1"):
    E.ez_mia(lp, ref, top1 * 0.5)
  for bad in (0, -1, 2.0, True):
    with pytest.raises(InputError, match="min_tokens must be a positive integer"):
      E.ez_mia(lp, ref, top1, min_tokens=bad)
  loss, keep = np.ones((4, 2, 3)), np.zeros((4, 2), bool)
  top1_MxNxT = np.zeros((4, 2, 3), bool)
  with pytest.raises(InputError, match=r"keep must be shaped \[M, N\]"):
    E.ez_mia_shadow(loss, keep[:3], top1_MxNxT)
  with pytest.raises(InputError, match=r"mask must be shaped \[N, T\]"):
    E.ez_mia_shadow(loss, keep, top1_MxNxT, np.ones((2, 2), bool))
  with pytest.raises(InputError, match=r"top1 must be shaped like the losses \[M, N, T\] = \[4, 2, 3\]"):
    E.ez_mia_shadow(loss, keep, top1_MxNxT[:3])
  with pytest.raises(InputError, match="on_undefined must be 'raise' or 'nan'"):
    E.ez_mia_shadow(loss, keep, top1_MxNxT, on_undefined="skip")
  with pytest.raises(InputError, match=r"base losses must be shaped \[N, T\] = \[2, 3\]"):
    E.ez_mia_base(loss, np.ones((2, 2)), top1_MxNxT)


# ---- the registry's records ----

class FakeRun:
  """What the records read of attacks.shadow.ShadowRun."""

  def __init__(self, loss, keep, mask, top1, base=None):
    self.loss_MxNxT, self.keep_MxN, self.mask_NxT = loss, keep, mask
    self._top1, self._base = top1, base

  @property
  def num_models(self):
    return self.loss_MxNxT.shape[0]

  def top1(self):
    return self._top1

  def base_losses(self):
    return self._base

  def check_defined(self, undefined_N, name, why):
    if np.any(undefined_N):
      raise InputError(f"canary {int(np.flatnonzero(undefined_N)[0])} has too few models for {name}: {why}")


def test_records_are_registered_and_score_as_their_functions():
  from attacks.catalogue import ATTACKS
  ez, base = ATTACKS.attacks["ez_mia"], ATTACKS.attacks["ez_mia_base"]
  assert (ez.title, ez.needs, ez.features) == ("EZ-MIA", ("top1",), ("lp", "ref_lp", "top1"))
  assert (base.title, base.needs) == ("EZ-MIA base", ("base", "top1"))
  assert "ez_mia" in ATTACKS.names("texts") and "ez_mia_base" not in ATTACKS.names("texts")
  assert {"ez_mia", "ez_mia_base"} <= set(ATTACKS.names("leave_one_out"))
  assert not ez.can("targets") and not base.can("targets")
  colors = [a.color for a in ATTACKS.attacks.values()]
  assert colors.count(ez.color) == 1 and colors.count(base.color) == 1
  settings = ATTACKS.defaults()
  assert ez.label(settings) == "EZ-MIA" and base.label(settings) == "EZ-MIA base" and ez.params(settings) == {}
  assert ez.note.startswith("{names}: ") and base.note.startswith("{names}: ")

  rng = np.random.default_rng(7)
  loss, keep, top1, mask = shadow_run(rng)
  base_NxT = np.clip(rng.exponential(1.0, size=mask.shape), 2.0**-10, 2.0**5).astype(np.float32)
  run = FakeRun(loss, keep, mask, top1, base_NxT)
  ez.check(run, settings)
  np.testing.assert_array_equal(ez.leave_one_out(run, settings), E.ez_mia_shadow(loss, keep, top1, mask))
  want = as_array(ez_shadow_loop(loss, keep, top1, mask))
  np.testing.assert_allclose(ez.leave_one_out(run, settings), want, **CLOSE)
  base_scores = base.leave_one_out(run, settings)
  ref_lp = np.where(mask, -base_NxT.astype(np.float64), np.nan)
  for m in range(run.num_models):
    np.testing.assert_array_equal(base_scores[m], E.ez_mia(np.where(mask, -loss[m].astype(np.float64), np.nan),
                                                           ref_lp, top1[m]))
  keep[:, 3] = True
  keep[2, 3] = False  # one OUT model: the check refuses before any scoring; "nan" leaves the pair undefined
  with pytest.raises(InputError, match="canary 3 has too few models for EZ-MIA: it needs an OUT model besides"):
    ez.check(run, settings)
  assert np.isnan(ez.leave_one_out(run, settings, on_undefined="nan")[:, 3]).sum() == 1
  assert np.isfinite(base.leave_one_out(run, settings, on_undefined="nan")).all()  # the base: every pair defined


def test_texts_record_scores_a_features_folder_and_refuses_other_tokens():
  from attacks.catalogue import ATTACKS
  ez = ATTACKS.attacks["ez_mia"]
  rng = np.random.default_rng(8)
  lp, ref, top1, _ = features_rows(rng)
  arrays = {"lp": lp, "ref_lp": ref, "top1": top1}
  labels = np.arange(len(lp)) % 2
  ez.check_texts(arrays, labels, ATTACKS.defaults())
  (row,) = ez.texts(arrays, labels, ATTACKS.defaults())
  assert (row["name"], row["attack"], row["params"], row["tuned"]) == ("EZ-MIA", "ez_mia", {}, False)
  np.testing.assert_array_equal(row["scores"], E.ez_mia(lp, ref, top1))
  other = dict(arrays, ref_lp=np.concatenate([ref, np.full((len(lp), 1), -1.0)], axis=1))  # another tokenizer
  with pytest.raises(InputError, match=r"ref_lp must hold the reference's log-probabilities of lp's tokens \(the "
                                       r"same tokenizer\): ref_lp is shaped \[14, 21\], lp \[14, 20\]"):
    ez.check_texts(other, labels, ATTACKS.defaults())
  shifted = dict(arrays, ref_lp=np.roll(ref, 1, axis=1))
  with pytest.raises(InputError, match=r"text 0 is scored at position 0 in ref_lp but not in lp"):
    ez.check_texts(shifted, labels, ATTACKS.defaults())
