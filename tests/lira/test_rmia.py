"""RMIA against the paper's formula written directly (loops over z, probabilities, not logs), and its leave-one-out
against a refit per target."""

import dataclasses

import numpy as np
import pytest

import lira
from lira import rmia
from lira.errors import InputError


def _runs(seed=0, M=9, N=12, Z=15, T=5, tail=0.6):
  rng = np.random.default_rng(seed)
  loss = rng.gamma(2.0, tail, (M, N, T))
  keep = rng.random((M, N)) < 0.5
  keep[:4] = np.array([True, False, True, False])[:, None]  # an IN and an OUT model beside any target
  loss = loss - 0.3 * keep[:, :, None] * loss  # members have lower losses
  pop = rng.gamma(2.0, tail, (M, Z, T))
  return loss, keep, pop


def _seq_prob(loss_T, valid_T):
  """Pr(x | theta): the geometric-mean token probability over the scored positions."""
  return np.exp(-loss_T[valid_T].mean())


def _paper_scores(t_loss_NxT, t_pop_ZxT, r_loss_RxNxT, r_keep_RxN, r_pop_RxZxT, online, gamma, a, balanced,
                  tokens=False, mask_NxT=None, pop_mask_ZxT=None):
  """Zarifzadeh et al. 2024: score(x) = Pr_z[LR(x) / LR(z) >= gamma], LR(x) = Pr(x | theta) / Pr(x)."""
  N, T = t_loss_NxT.shape
  Z = t_pop_ZxT.shape[0]
  mask = np.ones((N, T), bool) if mask_NxT is None else mask_NxT
  pmask = np.ones((Z, T), bool) if pop_mask_ZxT is None else pop_mask_ZxT

  def marginal(probs, members):  # Pr(x) from the reference models' probabilities; members None: z, OUT everywhere
    probs = np.asarray(probs)
    if members is None:
      return probs.mean() if online else ((1 + a) * probs.mean() + (1 - a)) / 2
    if not online:
      return ((1 + a) * probs[~members].mean() + (1 - a)) / 2
    if balanced:
      return (probs[members].mean() + probs[~members].mean()) / 2
    return probs.mean()

  def lr(t_loss, r_loss, members, valid):
    if not tokens:
      return _seq_prob(t_loss, valid) / marginal([_seq_prob(r, valid) for r in r_loss], members)
    ratios = [np.exp(-t_loss[t]) / marginal(np.exp(-r_loss[:, t]), members) for t in range(T) if valid[t]]
    return np.prod(ratios) ** (1 / len(ratios))  # the geometric mean of the per-position ratios

  lr_z = [lr(t_pop_ZxT[z], r_pop_RxZxT[:, z], None, pmask[z]) for z in range(Z)]
  out = np.empty(N)
  for n in range(N):
    lr_x = lr(t_loss_NxT[n], r_loss_RxNxT[:, n], r_keep_RxN[:, n], mask[n])
    out[n] = np.mean([lr_x / lr_z[z] >= gamma for z in range(Z)])
  return out


SETTINGS = [dict(online=True, gamma=1.0, a=0.3, balance_counts=True),
            dict(online=True, gamma=2.0, a=0.3, balance_counts=False),
            dict(online=True, gamma=0.5, a=0.3, balance_counts=True),
            dict(online=False, gamma=1.0, a=0.3, balance_counts=True),
            dict(online=False, gamma=2.0, a=0.0, balance_counts=True),
            dict(online=False, gamma=1.5, a=1.0, balance_counts=True),
            dict(online=False, gamma=1.0, a=0.6, balance_counts=True)]


@pytest.mark.parametrize("tokens", [False, True])
@pytest.mark.parametrize("setting", SETTINGS)
def test_targets_equal_the_paper_formula(setting, tokens):
  loss, keep, pop = _runs(seed=1)
  options = rmia.RMIA(tokens=tokens, **setting)
  got_KxN = rmia.score_targets(loss[2:], keep[2:], pop[2:], loss[:2], pop[:2], options)
  for k in range(2):
    want = _paper_scores(loss[k], pop[k], loss[2:], keep[2:], pop[2:], setting["online"], setting["gamma"],
                         setting["a"], setting["balance_counts"], tokens)
    np.testing.assert_array_equal(got_KxN[k], want)
  assert 0 < got_KxN.mean() < 1


@pytest.mark.parametrize("tokens", [False, True])
@pytest.mark.parametrize("setting", SETTINGS[:2] + SETTINGS[3:5])
def test_leave_one_out_equals_each_target_refitted(setting, tokens):
  loss, keep, pop = _runs(seed=2)
  options = rmia.RMIA(tokens=tokens, **setting)
  got_MxN = rmia.leave_one_out(loss, keep, pop, options)
  for m in range(len(loss)):
    others = np.arange(len(loss)) != m
    refit = rmia.score_targets(loss[others], keep[others], pop[others], loss[m], pop[m], options)[0]
    np.testing.assert_array_equal(got_MxN[m], refit)
    if m < 2:  # and the formula itself, for two of the targets
      want = _paper_scores(loss[m], pop[m], loss[others], keep[others], pop[others], setting["online"],
                           setting["gamma"], setting["a"], setting["balance_counts"], tokens)
      np.testing.assert_array_equal(got_MxN[m], want)


def test_masks_and_group_reduction_equal_the_formula_on_the_kept_positions():
  loss, keep, pop = _runs(seed=3, T=6)
  rng = np.random.default_rng(0)
  mask = rng.random(loss.shape[1:]) < 0.7
  mask[:, 0] = True
  pmask = rng.random(pop.shape[1:]) < 0.7
  pmask[:, 0] = True
  for tokens in (False, True):
    got = rmia.leave_one_out(loss, keep, pop, tokens=tokens, mask_NxT=mask, pop_mask_ZxT=pmask)
    others = np.arange(1, len(loss))
    want = _paper_scores(loss[0], pop[0], loss[others], keep[others], pop[others], True, 1.0, 0.3, True, tokens,
                         mask, pmask)
    np.testing.assert_array_equal(got[0], want)
  # group:T is one value per position: the same scores as no reduction
  np.testing.assert_array_equal(rmia.leave_one_out(loss, keep, pop, reduction="group:6", tokens=True),
                                rmia.leave_one_out(loss, keep, pop, tokens=True))


def test_min_reduction_keeps_each_models_lowest_losses():
  loss, keep, pop = _runs(seed=4)
  got = rmia.score_targets(loss[1:], keep[1:], pop[1:], loss[:1], pop[:1], reduction="min:2")[0]
  low = np.sort(loss, axis=2)[:, :, :2]
  low_pop = np.sort(pop, axis=2)[:, :, :2]
  want = _paper_scores(low[0], low_pop[0], low[1:], keep[1:], low_pop[1:], True, 1.0, 0.3, True)
  np.testing.assert_array_equal(got, want)


def test_scores_are_computed_in_log_space():
  """Adding a constant to every loss leaves online scores unchanged, even where exp(-loss) underflows to 0."""
  loss, keep, pop = _runs(seed=5)
  want = rmia.leave_one_out(loss, keep, pop)
  np.testing.assert_array_equal(rmia.leave_one_out(loss + 800.0, keep, pop + 800.0), want)
  assert np.isfinite(rmia.leave_one_out(loss + 800.0, keep, pop + 800.0, online=False)).all()


def test_members_score_higher():
  loss, keep, pop = _runs(seed=6, M=12, N=200, Z=100)
  for name in rmia.ATTACKS:
    score = rmia.leave_one_out(loss, keep, pop, rmia.RMIA.named(name))
    assert score[keep].mean() > score[~keep].mean() + 0.1, name


def test_undefined_canaries_raise_or_give_nan():
  loss, keep, pop = _runs(seed=7)
  keep[:, 3] = False
  keep[0, 3] = True  # one IN model: online balanced has no IN reference model for it
  with pytest.raises(InputError, match="canary 3: RMIA needs an IN and an OUT reference model"):
    rmia.leave_one_out(loss, keep, pop)
  score = rmia.leave_one_out(loss, keep, pop, on_undefined="nan")
  assert np.isnan(score[:, 3]).all() and np.isfinite(np.delete(score, 3, axis=1)).all()
  assert np.isfinite(rmia.leave_one_out(loss, keep, pop, online=False)).all()  # offline needs OUT models only
  assert np.isfinite(rmia.leave_one_out(loss, keep, pop, balance_counts=False)).all()


@pytest.mark.parametrize("fields, message", [
    (dict(gamma=0.0), "gamma must be > 0"),
    (dict(gamma=float("nan")), "gamma must be a finite number"),
    (dict(gamma=float("inf")), "gamma must be a finite number"),
    (dict(a=1.5), r"a must be in \[0, 1\]"),
    (dict(tokens=True, reduction="min:2"), "aligned positions"),
    (dict(reduction="mean:2"), "reduction must be"),
])
def test_bad_options(fields, message):
  with pytest.raises(InputError, match=message):
    rmia.RMIA(**fields)


def test_bad_population():
  loss, keep, pop = _runs(seed=8)
  with pytest.raises(InputError, match=r"population losses must be shaped \[M, Z, T\]"):
    rmia.leave_one_out(loss, keep, pop[:, :, :3])
  with pytest.raises(InputError, match="Z = 0"):
    rmia.leave_one_out(loss, keep, pop[:, :0])
  bad = pop.copy()
  bad[4, 6, 2] = np.nan
  with pytest.raises(InputError, match="loss of model 4 on population sample 6 at position 2 is nan"):
    rmia.leave_one_out(loss, keep, bad)
  with pytest.raises(InputError, match="population mask must be shaped"):
    rmia.leave_one_out(loss, keep, pop, pop_mask_ZxT=np.ones((3, 3), bool))
  with pytest.raises(InputError, match="unknown RMIA attack"):
    rmia.RMIA.named("rmia_online")


def test_names():
  assert rmia.RMIA().name == "RMIA"
  assert rmia.RMIA.named("rmia_offline").name == "RMIA offline (a=0.3)"
  assert rmia.RMIA.named("rmia_tokens", gamma=2).name == "RMIA token-wise (gamma=2)"


def test_the_settings_shared_with_lira_are_scorings_and_come_from_the_runs_scoring():
  scoring_fields = {f.name: f for f in dataclasses.fields(lira.Scoring)}
  for f in dataclasses.fields(rmia.RMIA):
    if f.name in rmia.RMIA.SHARED:  # default, choices, range and normal form are Scoring's; the help is RMIA's own
      same = scoring_fields[f.name]
      assert f.default == same.default
      assert {k: v for k, v in f.metadata.items() if k != "help"} == {
          k: v for k, v in same.metadata.items() if k != "help"}
  assert rmia.RMIA(reduction="none").reduction is None and rmia.RMIA(reduction="group:04").reduction == "group:4"
  scoring = lira.Scoring(reduction="group:4", balance_counts=False, covariance="independent")
  options = rmia.RMIA.named("rmia_tokens", scoring, gamma=2.0)
  assert (options.reduction, options.balance_counts, options.tokens, options.gamma) == ("group:4", False, True, 2.0)
  assert rmia.RMIA.named("rmia", scoring, reduction=None).reduction is None  # a field given wins over the scoring
  with pytest.raises(InputError, match="aligned positions"):  # the run's min:K cannot go to token-wise RMIA
    rmia.RMIA.named("rmia_tokens", lira.Scoring(reduction="min:2"))
