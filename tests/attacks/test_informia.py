"""attacks/informia.py: InfoRMIA against a plain loop written from its equations (tests/attacks/informia_reference.py)
at the sequence and the token level, leave-one-out and separate targets, on ragged masks, a group reduction and unequal
IN counts; undefined canaries; that it is not a monotone transform of RMIA's count; on a features folder, the same
ranking as the Reference attack; and its registry records on a stand-in run."""

import math

import informia_reference as ref  # tests/attacks/, on sys.path (tests/conftest.py)
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import attacks
from attacks import informia as I
from attacks.catalogue import ATTACKS
from lira import rmia
from lira.errors import InputError
from lira.scoring import Scoring

# The loop takes ln of means of exp directly, the module logsumexps (shifted by the largest term), and with group:K
# the chunk means are an einsum against a sum / count: each ln Pr is the same number to a few ulp of its size. The log
# ratios here are at most ~10 nats (float64 ulp ~2e-15 there), so a unit differs by ~1e-14; the population mean and
# the means over at most a few dozen units add errors of that order, and / ln 2 scales them by 1.44. 1e-10 absolute
# leaves four orders of magnitude for accumulation (the largest difference measured on these inputs is 9e-16) and is
# far below what a wrong formula changes: weighting the population by samples instead of tokens moves the token form
# by 0.15 bits here, a wrong marginal or a missing correction by more.
CLOSE = {"rtol": 0, "atol": 1e-10}

SETTINGS = {
    "online balanced": dict(online=True, balance_counts=True),
    "online plain": dict(online=True, balance_counts=False),
    "offline a=0.3": dict(online=False, a=0.3),
    "offline a=0.7": dict(online=False, a=0.7),
}


def _options(setting):
  return rmia.RMIA(**setting)


def run(seed=0, M=7, N=10, Z=8, T=6, ragged=False):
  """Shadow losses (members lower), a random keep with unequal IN counts (every canary has an IN and an OUT model
  beside any target), a population, and with ragged=True masks of unequal lengths with a hole."""
  rng = np.random.default_rng(seed)
  loss = rng.gamma(2.0, 0.6, (M, N, T))
  keep = rng.random((M, N)) < 0.5
  keep[:4] = np.array([True, False, True, False])[:, None]
  keep[4:, 1] = True  # canary 1: M - 2 IN models against 2 OUT
  keep[4:, 2] = False  # canary 2: 2 IN against M - 2 OUT
  loss = loss - 0.3 * keep[:, :, None] * loss
  pop = rng.gamma(2.0, 0.6, (M, Z, T))
  if not ragged:
    return loss, keep, pop, None, None
  mask = np.arange(T) < rng.integers(3, T + 1, size=N)[:, None]
  mask[3, 1] = False  # a hole
  pop_mask = np.arange(T) < rng.integers(3, T + 1, size=Z)[:, None]
  pop_mask[0, 0] = False
  loss[:, ~mask] = np.nan  # never read
  pop[:, ~pop_mask] = np.nan
  return loss, keep, pop, mask, pop_mask


def _unit_array(token_lists, U):
  """The loop's token scores [K][N][u] as [K, N, U], NaN where a unit is absent (invalid or undefined)."""
  out = np.full((len(token_lists), len(token_lists[0]), U), np.nan)
  for k, rows in enumerate(token_lists):
    for n, row in enumerate(rows):
      if row is not None:
        out[k, n, :len(row)] = row
  return out


def _left_aligned(s_KxNxU, valid_NxU):
  """The module's units moved to the front of each row (the loop lists only the valid ones)."""
  order = np.argsort(~valid_NxU, axis=1, kind="stable")
  return np.take_along_axis(s_KxNxU, np.broadcast_to(order, s_KxNxU.shape), axis=2)


@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("tokens", [False, True])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_leave_one_out_equals_the_loop(name, tokens, ragged):
  loss, keep, pop, mask, pop_mask = run(seed=1, ragged=ragged)
  setting = SETTINGS[name]
  want, want_tokens = ref.leave_one_out(loss.tolist(), keep.tolist(), pop.tolist(), setting, tokens, mask, pop_mask)
  got = I.leave_one_out(loss, keep, pop, _options(setting), tokens=tokens, mask_NxT=mask, pop_mask_ZxT=pop_mask)
  np.testing.assert_allclose(got, want, **CLOSE)
  if tokens:  # and the per-token array, unit by unit
    s, valid = I.token_scores(loss, keep, pop, _options(setting), mask_NxT=mask, pop_mask_ZxT=pop_mask)
    assert s.shape == loss.shape and s.dtype == np.float64
    np.testing.assert_array_equal(valid, np.ones(loss.shape[1:], bool) if mask is None else mask)
    assert np.isnan(s[:, ~valid]).all()
    np.testing.assert_allclose(_left_aligned(s, valid), _unit_array(want_tokens, loss.shape[2]), **CLOSE)


@pytest.mark.parametrize("tokens", [False, True])
def test_group_reduction_on_ragged_masks_equals_the_loop(tokens):
  loss, keep, pop, mask, pop_mask = run(seed=2, T=7, ragged=True)
  for setting in (dict(online=True, reduction="group:3"), dict(online=False, a=0.3, reduction="group:2")):
    options = rmia.RMIA(**setting)
    want, want_tokens = ref.leave_one_out(loss.tolist(), keep.tolist(), pop.tolist(), setting, tokens, mask, pop_mask)
    np.testing.assert_allclose(I.leave_one_out(loss, keep, pop, options, tokens=tokens, mask_NxT=mask,
                                               pop_mask_ZxT=pop_mask), want, **CLOSE)
    if tokens:
      s, valid = I.token_scores(loss, keep, pop, options, mask_NxT=mask, pop_mask_ZxT=pop_mask)
      K = int(setting["reduction"][-1])
      assert s.shape == loss.shape[:2] + (K,) and valid.all()  # the units are the K groups
      np.testing.assert_allclose(s, _unit_array(want_tokens, K), **CLOSE)


def test_min_reduction_sequence_form_equals_the_loop():
  loss, keep, pop, mask, pop_mask = run(seed=3, ragged=True)
  setting = dict(online=True, reduction="min:2")
  want, _ = ref.leave_one_out(loss.tolist(), keep.tolist(), pop.tolist(), setting, False, mask, pop_mask)
  got = I.leave_one_out(loss, keep, pop, rmia.RMIA(**setting), mask_NxT=mask, pop_mask_ZxT=pop_mask)
  np.testing.assert_allclose(got, want, **CLOSE)
  with pytest.raises(InputError, match="aligned positions"):  # the token form compares each position across models
    I.leave_one_out(loss, keep, pop, rmia.RMIA(**setting), tokens=True, mask_NxT=mask, pop_mask_ZxT=pop_mask)


@pytest.mark.parametrize("tokens", [False, True])
@pytest.mark.parametrize("name", ["online balanced", "online plain", "offline a=0.3"])
def test_separate_targets_equal_the_loop(name, tokens):
  loss, keep, pop, mask, pop_mask = run(seed=4, M=8, ragged=True)
  setting = SETTINGS[name]
  want, want_tokens = ref.targets(loss[2:].tolist(), keep[2:].tolist(), pop[2:].tolist(), loss[:2].tolist(),
                                  pop[:2].tolist(), setting, tokens, mask, pop_mask)
  got = I.score_targets(loss[2:], keep[2:], pop[2:], loss[:2], pop[:2], _options(setting), tokens=tokens,
                        mask_NxT=mask, pop_mask_ZxT=pop_mask)
  assert got.shape == (2, loss.shape[1])
  np.testing.assert_allclose(got, want, **CLOSE)
  one = I.score_targets(loss[2:], keep[2:], pop[2:], loss[0], pop[0], _options(setting), tokens=tokens,
                        mask_NxT=mask, pop_mask_ZxT=pop_mask)  # one target as [N, T] and [Z, T]
  np.testing.assert_allclose(one, got[:1], **CLOSE)
  if tokens:
    s, valid = I.target_token_scores(loss[2:], keep[2:], pop[2:], loss[:2], pop[:2], _options(setting),
                                     mask_NxT=mask, pop_mask_ZxT=pop_mask)
    np.testing.assert_allclose(_left_aligned(s, valid), _unit_array(want_tokens, loss.shape[2]), **CLOSE)


def test_the_token_forms_sequence_score_is_the_mean_of_its_token_scores():
  loss, keep, pop, mask, pop_mask = run(seed=5, ragged=True)
  for options in (rmia.RMIA(), rmia.RMIA(online=False), rmia.RMIA(reduction="group:3")):
    s, valid = I.token_scores(loss, keep, pop, options, mask_NxT=mask, pop_mask_ZxT=pop_mask)
    mean = np.where(valid, s, 0.0).sum(axis=2) / valid.sum(axis=1)
    np.testing.assert_allclose(I.leave_one_out(loss, keep, pop, options, tokens=True, mask_NxT=mask,
                                               pop_mask_ZxT=pop_mask), mean, rtol=0, atol=1e-12)
  # the options' own tokens=True (RMIA.named("rmia_tokens")) is the token form too
  np.testing.assert_array_equal(I.leave_one_out(loss, keep, pop, rmia.RMIA.named("rmia_tokens"), mask_NxT=mask,
                                                pop_mask_ZxT=pop_mask),
                                I.leave_one_out(loss, keep, pop, tokens=True, mask_NxT=mask, pop_mask_ZxT=pop_mask))
  s, valid = I.target_token_scores(loss[1:], keep[1:], pop[1:], loss[:1], pop[:1], mask_NxT=mask,
                                   pop_mask_ZxT=pop_mask)
  np.testing.assert_allclose(I.score_targets(loss[1:], keep[1:], pop[1:], loss[:1], pop[:1], tokens=True,
                                             mask_NxT=mask, pop_mask_ZxT=pop_mask),
                             np.where(valid, s, 0.0).sum(axis=2) / valid.sum(axis=1), rtol=0, atol=1e-12)


def test_the_population_correction_centres_the_population_at_zero_bits():
  # Scored as canaries (all OUT), the population's own sequence scores average 0 bits per target; the token form's
  # population tokens average 0 bits.
  loss, keep, pop, mask, pop_mask = run(seed=6, ragged=True)
  as_canaries = np.zeros((loss.shape[0], pop.shape[1]), bool)
  for online in (True, False):
    options = rmia.RMIA(online=online, balance_counts=False)
    seq = I.leave_one_out(pop, as_canaries, pop, options, mask_NxT=pop_mask, pop_mask_ZxT=pop_mask)
    np.testing.assert_allclose(seq.mean(axis=1), 0.0, rtol=0, atol=1e-12)
    s, valid = I.token_scores(pop, as_canaries, pop, options, mask_NxT=pop_mask, pop_mask_ZxT=pop_mask)
    np.testing.assert_allclose(np.where(valid, s, 0.0).sum(axis=(1, 2)) / valid.sum(), 0.0, rtol=0, atol=1e-12)


def test_scores_are_in_log_space_and_members_score_higher():
  loss, keep, pop, _, _ = run(seed=7, M=10, N=60, Z=40)
  for tokens in (False, True):
    want = I.leave_one_out(loss, keep, pop, tokens=tokens)
    assert want[keep].mean() > want[~keep].mean() + 0.1
    # exp(-800) underflows: the log-space marginals do not care
    np.testing.assert_allclose(I.leave_one_out(loss + 800.0, keep, pop + 800.0, tokens=tokens), want, rtol=0,
                               atol=1e-9)


def test_undefined_canaries_raise_or_give_nan():
  loss, keep, pop, mask, pop_mask = run(seed=8, ragged=True)
  keep[:, 3] = False
  keep[0, 3] = True  # one IN model: online balanced has no IN reference model for target 0
  for tokens, name in ((False, "InfoRMIA"), (True, "InfoRMIA token-level")):
    with pytest.raises(InputError, match=f"canary 3: {name} needs an IN and an OUT reference model"):
      I.leave_one_out(loss, keep, pop, tokens=tokens, mask_NxT=mask, pop_mask_ZxT=pop_mask)
    got = I.leave_one_out(loss, keep, pop, tokens=tokens, mask_NxT=mask, pop_mask_ZxT=pop_mask, on_undefined="nan")
    assert np.isnan(got[:, 3]).all() and np.isfinite(np.delete(got, 3, axis=1)).all()
    want, _ = ref.leave_one_out(loss.tolist(), keep.tolist(), pop.tolist(), SETTINGS["online balanced"], tokens,
                                mask, pop_mask)
    np.testing.assert_allclose(np.delete(got, 3, axis=1), np.delete(np.array(want), 3, axis=1), **CLOSE)
  s, valid = I.token_scores(loss, keep, pop, mask_NxT=mask, pop_mask_ZxT=pop_mask, on_undefined="nan")
  assert np.isnan(s[:, 3]).all() and np.isfinite(s[:, np.arange(10) != 3][:, valid[np.arange(10) != 3]]).all()
  with pytest.raises(InputError, match="canary 3: InfoRMIA token-level needs"):
    I.token_scores(loss, keep, pop, mask_NxT=mask, pop_mask_ZxT=pop_mask)
  # offline needs OUT models only, the plain mean any model
  assert np.isfinite(I.leave_one_out(loss, keep, pop, rmia.RMIA(online=False), mask_NxT=mask,
                                     pop_mask_ZxT=pop_mask)).all()
  assert np.isfinite(I.leave_one_out(loss, keep, pop, rmia.RMIA(balance_counts=False), mask_NxT=mask,
                                     pop_mask_ZxT=pop_mask)).all()
  with pytest.raises(InputError, match="canary 3: InfoRMIA needs an IN and an OUT"):  # separate targets: all raise
    I.score_targets(loss[1:], keep[1:], pop[1:], loss[:1], pop[:1], mask_NxT=mask, pop_mask_ZxT=pop_mask)
  with pytest.raises(InputError, match="on_undefined must be 'raise' or 'nan'"):
    I.leave_one_out(loss, keep, pop, on_undefined="skip")


def test_informia_is_not_a_monotone_transform_of_rmias_count():
  # Two separate targets, one canary, one position. Every shadow model has loss 20 everywhere, so Pr(x) = Pr(z) =
  # exp(-20) and r = 20 - the target's loss. Target A: r(z) = 0, 0, 0, 10 and r(x) = 5 (RMIA 3/4; InfoRMIA
  # (5 - 2.5) / ln 2 = 3.61 bits). Target B: r(z) = 1, 1, 1, 1 and r(x) = 1.5 (RMIA 1; InfoRMIA 0.5 / ln 2 = 0.72).
  # RMIA ranks B's pair above A's, InfoRMIA A's above B's.
  shadow = np.full((2, 1, 1), 20.0)
  keep = np.array([[True], [False]])
  shadow_pop = np.full((2, 4, 1), 20.0)
  target = np.array([[[15.0]], [[18.5]]])
  target_pop = np.array([[20.0, 20.0, 20.0, 10.0], [19.0, 19.0, 19.0, 19.0]])[:, :, None]
  count = rmia.score_targets(shadow, keep, shadow_pop, target, target_pop)[:, 0]
  bits = I.score_targets(shadow, keep, shadow_pop, target, target_pop)[:, 0]
  np.testing.assert_array_equal(count, [0.75, 1.0])
  np.testing.assert_allclose(bits, [2.5 / math.log(2), 0.5 / math.log(2)], rtol=1e-14)
  assert (count[1] > count[0]) and (bits[0] > bits[1])


def _features(seed=9, N=40, T=12, T_ref=10):
  """lp and ref_lp as a features folder holds them: NaN at position 0 and after each text's end; members likelier
  under the target."""
  rng = np.random.default_rng(seed)
  labels = rng.random(N) < 0.5
  lp = -rng.gamma(2.0, 1.0, (N, T)) + 0.5 * labels[:, None]
  ref_lp = -rng.gamma(2.0, 1.0, (N, T))
  lp[:, 0] = np.nan
  lp[np.arange(T) >= rng.integers(3, T + 1, size=N)[:, None]] = np.nan
  same_ref = np.where(np.isnan(lp), np.nan, ref_lp)  # the reference on lp's tokens
  other_ref = -rng.gamma(2.0, 1.0, (N, T_ref))  # another tokenizer: its own widths and lengths
  other_ref[:, 0] = np.nan
  other_ref[np.arange(T_ref) >= rng.integers(2, T_ref + 1, size=N)[:, None]] = np.nan
  return lp.astype(np.float32), same_ref.astype(np.float32), other_ref, labels


def test_texts_equal_the_loop_and_rank_as_the_reference_attack():
  lp, same_ref, other_ref, labels = _features()
  for ref_lp, forms in ((same_ref, (False, True)), (other_ref, (False,))):
    base = attacks.reference(lp, ref_lp)
    for tokens in forms:
      got = I.texts(lp, ref_lp, tokens=tokens)
      want, maps = ref.texts(lp.astype(np.float64).tolist(), np.asarray(ref_lp, np.float64).tolist(), tokens)
      np.testing.assert_allclose(got, want, **CLOSE)
      np.testing.assert_array_equal(np.argsort(got, kind="stable"), np.argsort(base, kind="stable"))
      assert roc_auc_score(labels, got) == roc_auc_score(labels, base)
      if tokens:
        s = I.text_token_scores(lp, ref_lp)
        np.testing.assert_array_equal(np.isnan(s), np.isnan(lp))
        np.testing.assert_allclose(np.where(np.isnan(s), 0.0, s),
                                   [[0.0 if v is None else v for v in row] for row in maps], **CLOSE)
        assert abs(np.nanmean(s)) < 1e-12  # centred on the texts' own tokens


def test_texts_token_form_with_ref_kl_is_the_vocabulary_expectation_of_the_definition():
  """lp, ref_lp and ref_kl as extract_features stores them, from two random next-token distributions per position;
  the token scores against a loop over the vocabulary (the population at each context is p_ref's)."""
  rng = np.random.default_rng(4)
  N, T, V = 30, 7, 11
  logits, ref_logits = rng.normal(0, 2, (N, T, V)), rng.normal(0, 2, (N, T, V))
  p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  q = np.exp(ref_logits) / np.exp(ref_logits).sum(-1, keepdims=True)
  tokens = rng.integers(0, V, (N, T))
  scored = np.ones((N, T), bool)
  scored[:, 0] = False
  scored[2, 5:] = False
  pick = lambda d: np.take_along_axis(np.log(d), tokens[..., None], -1)[..., 0]  # noqa: E731
  lp, ref_lp = np.where(scored, pick(p), np.nan), np.where(scored, pick(q), np.nan)
  ref_kl = np.where(scored, (q * (np.log(q) - np.log(p))).sum(-1), np.nan)
  s = I.text_token_scores(lp, ref_lp, ref_kl)
  want = ref.token_scores_from_distributions(p.tolist(), q.tolist(),
                                             [[int(x) if ok else None for x, ok in zip(row, m)]
                                              for row, m in zip(tokens, scored)])
  np.testing.assert_allclose(s, [[np.nan if v is None else v for v in row] for row in want], **CLOSE, equal_nan=True)
  got = I.texts(lp, ref_lp, tokens=True, ref_kl_NxT=ref_kl)
  np.testing.assert_allclose(got, [np.mean([v for v in row if v is not None]) for row in want], **CLOSE)
  # its own correction per context: not the Reference attack's ranking
  assert not np.array_equal(np.argsort(got), np.argsort(attacks.reference(lp, ref_lp)))
  bad = ref_kl.copy()
  bad[2, 6] = 0.0  # a position text 2 does not score
  with pytest.raises(InputError, match=r"ref_kl must be finite exactly where lp is scored: text 2 differs \(1 texts\)"):
    I.text_token_scores(lp, ref_lp, bad)


def test_texts_token_form_needs_the_reference_on_lps_tokens():
  lp, same_ref, other_ref, _ = _features()
  bad = same_ref.copy()
  bad[5, 1] = np.nan
  with pytest.raises(InputError, match=r"ref_lp must hold the reference's log-probabilities of lp's tokens .*: "
                                       r"text 5 is scored at \d+ positions in lp and \d+ in ref_lp"):
    I.texts(lp, bad, tokens=True)
  with pytest.raises(InputError, match="text 0"):
    I.text_token_scores(lp, other_ref)
  wider = np.pad(same_ref, ((0, 0), (0, 3)), constant_values=np.nan)  # padded wider: the same scored positions
  np.testing.assert_array_equal(I.texts(lp, wider, tokens=True), I.texts(lp, same_ref, tokens=True))
  with pytest.raises(InputError, match="ref_lp: 3 rows, but lp has 40"):
    I.texts(lp, same_ref[:3])


class FakeRun:
  """What a record reads of a shadow run (attacks.shadow.ShadowRun's attributes and methods)."""

  def __init__(self, loss, keep, mask, pop, pop_mask, scoring=None):
    self.loss_MxNxT, self.keep_MxN, self.mask_NxT = loss, keep, mask
    self._population = (pop, pop_mask)
    self.model_ids = None
    self.scoring = Scoring() if scoring is None else scoring

  @property
  def num_models(self):
    return self.loss_MxNxT.shape[0]

  def population(self):
    return self._population

  def check_defined(self, undefined_N, name, why):
    if np.any(undefined_N):
      raise InputError(f"canary {int(np.flatnonzero(undefined_N)[0])} has too few models for {name}: {why}")


def test_registry_records():
  loss, keep, pop, mask, pop_mask = run(seed=10, T=7, ragged=True)
  records = {a.name: a for a in I.ATTACKS}
  assert list(records) == ["informia", "informia_tokens"]
  assert [records[n].title for n in records] == ["InfoRMIA", "InfoRMIA token-level"]
  for name, attack in records.items():
    assert ATTACKS.attacks[name] is attack  # registered in attacks/catalogue.py
    assert attack.needs == ("population",) and attack.uses == ()
    assert attack.features == (("lp", "ref_lp", "ref_kl") if name == "informia_tokens" else ("lp", "ref_lp"))
    assert "{names}" in attack.note and attack.label({}) == attack.title
    assert all(attack.can(w) for w in ("leave_one_out", "targets", "texts"))
  others = [a.color for a in ATTACKS.attacks.values() if a.name not in records]
  assert len({a.color for a in records.values()}) == 2 and not {a.color for a in records.values()} & set(others)

  scoring = Scoring(reduction="group:3", balance_counts=False)
  fake = FakeRun(loss, keep, mask, pop, pop_mask, scoring)
  for name, tokens in (("informia", False), ("informia_tokens", True)):
    attack = records[name]
    attack.check(fake, {})
    options = rmia.RMIA.named("rmia_tokens" if tokens else "rmia", scoring)
    want = I.leave_one_out(loss, keep, pop, options, tokens=tokens, mask_NxT=mask, pop_mask_ZxT=pop_mask)
    np.testing.assert_array_equal(attack.leave_one_out(fake, {}), want)
    loop, _ = ref.leave_one_out(loss.tolist(), keep.tolist(), pop.tolist(),
                                dict(online=True, balance_counts=False, reduction="group:3"), tokens, mask, pop_mask)
    np.testing.assert_allclose(want, loop, **CLOSE)  # the run's reduction and balance_counts acted
    target_K = np.nan_to_num(loss[:2], nan=1.0)
    target_pop_K = np.nan_to_num(pop[:2], nan=1.0)
    np.testing.assert_array_equal(
        attack.targets(fake, target_K, target_pop_K, {}),
        I.score_targets(loss, keep, pop, target_K, target_pop_K, options, tokens=tokens, mask_NxT=mask,
                        pop_mask_ZxT=pop_mask))
  # undefined canaries: check refuses, leave_one_out raises or gives NaN
  bad = keep.copy()
  bad[:, 4] = False
  bad[0, 4] = True
  fake = FakeRun(loss, bad, mask, pop, pop_mask)
  for attack in records.values():
    with pytest.raises(InputError, match=f"canary 4 has too few models for {attack.title}: it needs an IN and an OUT"):
      attack.check(fake, {})
    with pytest.raises(InputError, match="canary 4"):
      attack.leave_one_out(fake, {})
    assert np.isnan(attack.leave_one_out(fake, {}, on_undefined="nan")[:, 4]).all()
  # a features folder
  lp, same_ref, other_ref, labels = _features()
  ref_kl = np.where(np.isnan(lp), np.nan, np.random.default_rng(0).exponential(0.3, lp.shape))
  arrays = {"lp": lp, "ref_lp": same_ref, "ref_kl": ref_kl}
  assert records["informia_tokens"].features == ("lp", "ref_lp", "ref_kl")
  for name, tokens in (("informia", False), ("informia_tokens", True)):
    (row,) = records[name].texts(arrays, labels, {})
    assert row["name"] == records[name].title and row["attack"] == name and not row["tuned"] and row["plotted"]
    np.testing.assert_array_equal(row["scores"], I.texts(lp, same_ref, tokens=tokens,
                                                         ref_kl_NxT=ref_kl if tokens else None))
  assert records["informia"].check_texts is None
  records["informia_tokens"].check_texts(arrays, labels, {})
  with pytest.raises(InputError, match="text 0"):
    records["informia_tokens"].check_texts({"lp": lp, "ref_lp": other_ref}, labels, {})
