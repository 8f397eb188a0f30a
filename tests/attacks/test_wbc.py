"""attacks/wbc.py: WBC against a loop over each text's windows written from the definition (tests/attacks/
wbc_reference.py), on the inputs the official pipeline gives it, and the leave-one-out forms against loops over
(model, canary) that call wbc on one row."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from wbc_reference import wbc_rows  # tests/attacks/, on sys.path (tests/conftest.py)

from attacks import wbc as W
from lira.errors import InputError

CLOSE = {"rtol": 1e-12, "atol": 1e-12}


def pipeline_inputs(rng, N=12, T=20, T_ref=17):
  """What a per-token loss pipeline gives for both models: float32 losses and bool masks of
  ragged, different lengths (the reference tokenizes differently), with ties, zeros and a hole planted."""
  target = rng.exponential(2.0, size=(N, T)).astype(np.float32)
  ref = rng.exponential(2.0, size=(N, T_ref)).astype(np.float32)
  n_target = rng.integers(1, T + 1, size=N)
  n_ref = rng.integers(1, T_ref + 1, size=N)
  n_target[:4], n_ref[:4] = [1, 1, 5, 3], [1, 9, 1, 3]  # length 1 on either side, shorter than most windows
  ref[4, :8] = target[4, :8]  # equal stretches: windows inside them tie (a non-member vote)
  ref[5], n_ref[5], n_target[5] = target[5, :T_ref], T_ref, T  # equal throughout: score 0
  steps = rng.integers(0, 16, size=T).astype(np.float32) / 8  # exact sums: permuted windows tie exactly
  target[6], ref[6], n_target[6], n_ref[6] = steps, rng.permutation(steps)[:T_ref], T, T_ref
  target[7, :6] = ref[7, :6] = 0.0  # losses of exactly 0 (p rounded to 1)
  target_mask = np.arange(T) < n_target[:, None]
  ref_mask = np.arange(T_ref) < n_ref[:, None]
  target_mask[8, [0, 3]] = False  # a hole: the windows skip over it
  target_mask[8, 4:] = True
  return target, target_mask, ref, ref_mask


def as_lp(loss, mask):
  return np.where(mask, -loss, np.nan)


@pytest.mark.parametrize("sizes", [W.WINDOW_SIZES, W.OFFICIAL_WINDOW_SIZES, (1,), (5, 2, 5), (30,)])
def test_wbc_equals_the_definition(sizes):
  rng = np.random.default_rng(0)
  for _ in range(3):
    target, target_mask, ref, ref_mask = pipeline_inputs(rng)
    want = wbc_rows(target, target_mask, ref, ref_mask, sizes)
    ours = W.wbc(as_lp(target, target_mask), as_lp(ref, ref_mask), sizes)
    np.testing.assert_allclose(ours, want, **CLOSE)
  assert ours[5] == 0.0  # the equal rows: every window ties


def test_equal_windows_after_unequal_prefixes_tie_in_float64():
  # A window sum taken as a difference of prefix sums would round differently on the two sides here.
  rng = np.random.default_rng(5)
  target, ref = rng.exponential(2.0, size=(2, 6, 16))
  ref[:, 4:] = target[:, 4:]
  mask = np.ones(target.shape, bool)
  want = wbc_rows(target, mask, ref, mask, W.WINDOW_SIZES)
  np.testing.assert_allclose(W.wbc(-target, -ref), want, **CLOSE)


def test_wbc_rules_on_hand_made_rows():
  # The reference's loss strictly above the target's wins; a tie loses; a text shorter than w is one window.
  target = np.array([[1.0, 1.0, 3.0, np.nan, np.nan]])
  ref = np.array([[2.0, 1.0, 1.0, 0.0, np.nan]])  # trimmed to the target's 3 tokens
  # (target | reference) sums. w = 1: (1|2) (1|1) (3|1), 1 of 3; w = 2: (2|3) (4|2), 1 of 2; w = 3 and 9: the whole
  # text (5|4), 0 each.
  assert W.wbc(-target, -ref, (1, 2, 3, 9))[0] == pytest.approx((1 / 3 + 1 / 2 + 0 + 0) / 4, abs=1e-15)
  assert W.wbc(-ref, -target, (1, 2, 3, 9))[0] == pytest.approx((1 / 3 + 1 / 2 + 1 + 1) / 4, abs=1e-15)


def run(rng, M=7, N=9, T=11):
  """Shadow losses with a random keep (unequal IN/OUT counts, every canary with 2+ OUT models), a ragged mask
  with a hole, and NaN at unscored positions."""
  loss = rng.exponential(1.0, size=(M, N, T)).astype(np.float32)
  keep = rng.random((M, N)) < 0.5
  keep[:2, :] = False
  keep[2:, 0] = True  # canary 0: exactly 2 OUT models
  mask = np.arange(T) < rng.integers(1, T + 1, size=N)[:, None]
  mask[1] = False
  mask[1, 0] = True  # one scored position
  mask[2, 3] = False
  loss[:, ~mask] = np.nan
  return loss, keep, mask


def brute(loss, keep, mask, sizes, vote):
  M, N, _ = loss.shape
  out = np.full((M, N), np.nan)
  for m in range(M):
    for n in range(N):
      refs = [r for r in range(M) if not keep[r, n] and r != m]
      if not refs:
        continue
      row = np.where(mask[n], -loss[m, n].astype(np.float64), np.nan)[None]
      ref_rows = [-loss[r, n].astype(np.float64) for r in refs]
      if vote:
        out[m, n] = np.mean([W.wbc(row, np.where(mask[n], lp, np.nan)[None], sizes)[0] for lp in ref_rows])
      else:
        out[m, n] = W.wbc(row, np.where(mask[n], np.mean(ref_rows, axis=0), np.nan)[None], sizes)[0]
  return out


@pytest.mark.parametrize("scorer", [W.wbc_shadow, W.wbc_vote])
def test_leave_one_out_forms_equal_their_loops(scorer):
  rng = np.random.default_rng(1)
  loss, keep, mask = run(rng)
  sizes = (1, 2, 4, 13)
  want = brute(loss, keep, mask, sizes, vote=scorer is W.wbc_vote)
  np.testing.assert_allclose(scorer(loss, keep, mask, sizes), want, **CLOSE)
  np.testing.assert_allclose(scorer(loss, keep, mask, sizes, block_size=2), want, **CLOSE)
  full = np.nan_to_num(loss, nan=0.5)  # mask None: every position scored
  np.testing.assert_allclose(scorer(full, keep, None, sizes), brute(full, keep, np.ones(mask.shape, bool), sizes,
                                                                    vote=scorer is W.wbc_vote), **CLOSE)


@pytest.mark.parametrize("scorer", [W.wbc_shadow, W.wbc_vote])
def test_undefined_pairs_raise_or_are_nan(scorer):
  rng = np.random.default_rng(2)
  loss, keep, mask = run(rng)
  keep[:, 3] = True
  keep[4, 3] = False  # canary 3: one OUT model, which has no reference left
  keep[:, 5] = True  # canary 5: none
  with pytest.raises(InputError, match=r"canary 3 has 1 OUT models; .* \(2 canaries affected\)"):
    scorer(loss, keep, mask)
  score = scorer(loss, keep, mask, on_undefined="nan")
  undefined = np.zeros(keep.shape, bool)
  undefined[4, 3] = undefined[:, 5] = True
  assert (np.isnan(score) == undefined).all()
  np.testing.assert_allclose(score, brute(loss, keep, mask, W.WINDOW_SIZES, scorer is W.wbc_vote), **CLOSE)


@pytest.mark.parametrize("scorer", [W.wbc_shadow, W.wbc_vote])
def test_members_score_higher_on_a_planted_toy(scorer):
  rng = np.random.default_rng(3)
  M, N, T = 12, 30, 24
  keep = rng.random((M, N)) < 0.5
  keep[:3], keep[3:6] = False, True
  base = rng.exponential(2.0, size=(N, T))
  loss = base[None] * rng.uniform(0.7, 1.3, size=(M, N, T)) * np.where(keep, 0.8, 1.0)[..., None]
  score = scorer(loss, keep)
  assert roc_auc_score(keep.ravel(), score.ravel()) > 0.9


def test_bad_input_is_named():
  lp = np.array([[np.nan, -1.0, -2.0], [np.nan, -1.0, np.nan]])
  for sizes in ((), (0, 2), (-1,), (2.5,), (True,), 3):
    with pytest.raises(InputError, match="window_sizes must be a non-empty list of positive integers"):
      W.wbc(lp, lp, sizes)
  with pytest.raises(InputError, match="reference_lp: 1 rows, but lp has 2"):
    W.wbc(lp, lp[:1])
  with pytest.raises(InputError, match="target_lp: expected a 2-D per-token array"):
    W.wbc(lp[0], lp)
  with pytest.raises(InputError, match="reference_lp: row 0 has no scored position"):
    W.wbc(lp, np.full((2, 3), np.nan))
  loss, keep = np.ones((4, 2, 3)), np.zeros((4, 2), bool)
  with pytest.raises(InputError, match=r"keep must be shaped \[M, N\]"):
    W.wbc_shadow(loss, keep[:3])
  with pytest.raises(InputError, match=r"mask must be shaped \[N, T\]"):
    W.wbc_vote(loss, keep, np.ones((2, 2), bool))
  with pytest.raises(InputError, match=r"losses must be shaped \[M, N, T\]"):
    W.wbc_vote(loss[0], keep)
  with pytest.raises(InputError, match="window_sizes"):
    W.wbc_shadow(loss, keep, window_sizes=[])
  with pytest.raises(InputError, match="on_undefined must be 'raise' or 'nan'"):
    W.wbc_shadow(loss, keep, on_undefined="skip")


def test_rows_carry_their_windows_and_notes_name_only_the_rows_that_ran(tmp_path):
  """A WBC row is labelled with its window sizes where they are not the default, as Min-K% (k=...) and RMIA
  (gamma=...) are; the note under a table names the WBC form that ran; report names keep the attacks' underscores."""
  from attacks import shadow
  from lira.reports import loo_report
  from lira.reports import synthetic_run
  run = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(run, num_models=8, num_canaries=12, seq_len=6, seed=0, population_size=0)
  rows = shadow.shadow_rows(run, ["wbc"], {"wbc_windows": (2, 4)}, n_boot=0, given=("wbc_windows",))
  assert [r["name"] for r in rows.rows] == ["WBC (windows=2,4)"] and rows.rows[0]["params"] == {"wbc_windows": (2, 4)}
  assert len(rows.notes) == 1 and rows.notes[0].startswith("WBC (windows=2,4): WBC, ") and "vote" not in rows.notes[0]
  default = shadow.shadow_rows(run, ["wbc", "wbc_vote"], n_boot=0)
  assert [r["name"] for r in default.rows] == ["WBC", "WBC vote"]
  assert [n.split(":")[0] for n in default.notes] == ["WBC", "WBC vote"]
  _, result = loo_report.evaluate_run(run, n_boot=0, variants=["oas-shared"], progress=False, attack_rows=default)
  assert "results_variants-oas-shared_nboot-0_attacks-wbc+wbc_vote.json" in result["files"]
