"""InfoRMIA (Tao and Shokri, ICLR 2026, arXiv 2510.05582) on per-token losses: RMIA's likelihood ratio read as an
information gain in bits, at the sequence level and at the token level; higher = member.

For a target model theta, a candidate x and population samples z that no model trained on, with RMIA's log
likelihood ratio r(x) = ln Pr(x | theta) - ln Pr(x) (lira/rmia.py; Pr(x) the marginal over the reference models):

  InfoRMIA(x; theta) = [ r(x) - E_z r(z) ] / ln 2     (bits)

i.e. log2 Pr(x | theta) / Pr(x), corrected by the population's shift - E_z log2 Pr(z | theta) / Pr(z), which is
+ D_KL(Pr(z) || Pr(z | theta)) when z is drawn from Pr(z). RMIA instead counts the fraction of z with
r(z) <= r(x) - ln gamma: InfoRMIA keeps the margin by which x beats the population (the count saturates at 1) and
measures it against the population's mean rather than its quantiles, so across target models the two rank pairs
differently (it is not a monotone transform of RMIA's score in general). E_z is the mean over the population samples,
each sample one unit. gamma plays no part.

- Pr(x | theta) of a sequence is RMIA's in this project: its geometric-mean token probability exp(mean_t ln p_t) over
  the scored positions, after a length reduction over the values it keeps (group:K, min:K or max:K), so the sequence
  score is in bits per token.
- Pr(x) is RMIA's: online (every reference model), Pr(x) = (Pr_IN(x) + Pr_OUT(x)) / 2, the means over the reference
  models that trained on x and over those that did not (balance_counts, the default: a leave-one-out target's label
  cannot move Pr(x)), or the plain mean over all of them (balance_counts=False); offline, ((1 + a) Pr_OUT(x) + (1 - a))
  / 2. A population sample is OUT for every model: Pr(z) is the mean over all reference models (offline: the same
  formula). Leave-one-out: model m the target, the other M - 1 its reference models; separate targets: every shadow
  model a reference.

Token level: every token position u of x gets its own score

  s_u(x; theta) = [ ln p_u(x | theta) - ln Pr_u(x) ] / ln 2 - c_theta,

Pr_u(x) the per-position marginal over the reference models (RMIA's tokens=True marginal), and c_theta the
population's expected per-token gain: the mean over every valid population unit (z, u) of
[ln p_u(z | theta) - ln Pr_u(z)] / ln 2, each population token one sample (a sample with more scored positions weighs
more). The units are the scored positions, or with group:K the K chunk means. The sequence score of the token form is
the mean of s_u over x's valid units; `token_scores` gives the per-token array [M, N, U], which shows which tokens of a
canary carry the leakage.

Departures from the paper:
- The paper's token-level correction is an expectation over the vocabulary at the same context. A shadow run's stored
  per-token arrays hold only the true token's probability (the marginal mixes M - 1 models' distributions, which are
  never in memory together), so the population tokens' mean gain c_theta (one constant per target model) stands in
  for it there; a features folder has the expectation itself (ref_kl, below).
- Pr(x | theta) of a sequence is the geometric mean over its tokens (above), not the product, so sequences of
  different lengths are compared per token.

On a features folder (`texts`: one target model, lp, and one reference model, ref_lp) Pr(x) is the reference model's
and no membership label is read. The sequence form is r(x) = mean scored lp - mean scored ref_lp (each over its own
scored positions, as attacks.likelihood.reference), less its mean over the evaluated texts: one constant, so it ranks
the texts exactly as the Reference attack does. The token form needs ref_lp on lp's tokens and takes the paper's
per-context correction from ref_kl (KL(p_ref || p) over the vocabulary at each position, which extract_features
computes when both models read the texts as the same token ids):

  s_t = [ lp_t - ref_lp_t + KL_t ] / ln 2 = log2 p(t_i) / p_ref(t_i) - E_{v ~ p_ref} log2 p(v) / p_ref(v),

so each token is measured against what the target gains over the reference at that context, and the ranking is its
own. (text_token_scores without ref_kl uses the texts' tokens as the population: one constant again.)
"""

import math

import numpy as np

from attacks.likelihood import reference
from attacks.rows import as_rows, same_rows
from lira import rmia
from lira.errors import InputError

LN2 = math.log(2.0)
NAME = "InfoRMIA"


def _options(options, tokens):
  """RMIA's options with tokens set when either the argument or the options ask for the token form."""
  options = rmia.RMIA.of(options)
  return rmia.RMIA.of(options, tokens=True) if tokens and not options.tokens else options


def _check_on_undefined(on_undefined):
  if on_undefined not in ("raise", "nan"):
    raise InputError(f"on_undefined must be 'raise' or 'nan', got {on_undefined!r}")


def _name(options):
  return NAME + (" token-level" if options.tokens else "")


def _unit_mean(r_KxZxU, valid_ZxU):
  """[K]: the mean of r over every valid (z, u)."""
  return np.where(valid_ZxU[None], r_KxZxU, 0.0).sum(axis=(1, 2)) / valid_ZxU.sum()


def _loo_center(pop_MxZxT, pop_mask_ZxT, options):
  """E_z r(z) [M] in nats of every leave-one-out target: the mean over the samples (sequence form) or over every valid
  population unit (token form), block by block of samples."""
  if not options.tokens:
    return rmia.loo_ratios(pop_MxZxT, None, pop_mask_ZxT, options).mean(axis=1)
  total, count = 0.0, 0
  for _, r_MxBxU, valid_BxU in rmia.loo_unit_blocks(pop_MxZxT, None, pop_mask_ZxT, options):
    total = total + np.where(valid_BxU[None], r_MxBxU, 0.0).sum(axis=(1, 2))
    count += int(valid_BxU.sum())
  return total / count


def _loo_setup(loss_MxNxT, keep_MxN, pop_MxZxT, options, tokens, mask_NxT, pop_mask_ZxT, on_undefined, model_ids):
  """(options, keep, undefined_N, center_M): the inputs checked and the population's mean log-ratio per target."""
  _check_on_undefined(on_undefined)
  options = _options(options, tokens)
  keep, undefined_N = rmia.check_leave_one_out(loss_MxNxT, keep_MxN, pop_MxZxT, options, mask_NxT=mask_NxT,
                                               pop_mask_ZxT=pop_mask_ZxT, on_undefined=on_undefined,
                                               model_ids=model_ids, name=_name(options))
  return options, keep, undefined_N, _loo_center(pop_MxZxT, pop_mask_ZxT, options)


def leave_one_out(loss_MxNxT, keep_MxN, pop_MxZxT, options=None, *, tokens=False, mask_NxT=None, pop_mask_ZxT=None,
                  on_undefined="raise", model_ids=None):
  """Leave-one-out InfoRMIA [M, N] in bits (per token; higher = member): model m the target, the other M - 1 its
  reference models, pop_MxZxT the population's per-token losses on every model.

  options: a lira.rmia.RMIA (online, a, balance_counts, reduction; gamma is not used; default online balanced).
  tokens=True, or options with tokens=True (RMIA.named("rmia_tokens")): the token form, the mean of token_scores over
  each canary's valid units. A canary whose Pr(x) is undefined (rmia.undefined_canaries) raises InputError, or scores
  NaN for every target with on_undefined="nan". Every input is checked first; the arrays may be memory-mapped.
  """
  options, keep, undefined_N, center_M = _loo_setup(loss_MxNxT, keep_MxN, pop_MxZxT, options, tokens, mask_NxT,
                                                    pop_mask_ZxT, on_undefined, model_ids)
  r_MxN = rmia.loo_ratios(loss_MxNxT, keep, mask_NxT, options)
  score_MxN = (r_MxN - center_M[:, None]) / LN2
  score_MxN[:, undefined_N] = np.nan
  return score_MxN


def token_scores(loss_MxNxT, keep_MxN, pop_MxZxT, options=None, *, mask_NxT=None, pop_mask_ZxT=None,
                 on_undefined="raise", model_ids=None):
  """Leave-one-out token-level InfoRMIA per unit: (s_MxNxU in bits, NaN at invalid units and at undefined canaries
  with on_undefined="nan", valid_NxU). The units are the T positions, or the K groups of a group:K reduction (min:K and
  max:K are refused: the positions must be aligned across models). leave_one_out(..., tokens=True) is the mean of
  s over each canary's valid units. Arguments as leave_one_out's; the token form whatever options.tokens says."""
  options, keep, undefined_N, center_M = _loo_setup(loss_MxNxT, keep_MxN, pop_MxZxT, options, True, mask_NxT,
                                                    pop_mask_ZxT, on_undefined, model_ids)
  r_MxNxU, valid_NxU = rmia.loo_unit_ratios(loss_MxNxT, keep, mask_NxT, options)
  s_MxNxU = (r_MxNxU - center_M[:, None, None]) / LN2
  s_MxNxU[:, undefined_N] = np.nan
  return s_MxNxU, valid_NxU


def _targets_setup(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                   options, tokens, mask_NxT, pop_mask_ZxT):
  """(options, target_KxNxT, keep, center_K): the inputs checked and each target's population mean log-ratio."""
  options = _options(options, tokens)
  target, target_pop, keep = rmia.check_score_targets(
      shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT, options,
      mask_NxT=mask_NxT, pop_mask_ZxT=pop_mask_ZxT, name=_name(options))
  if options.tokens:
    center_K = _unit_mean(*rmia.target_unit_ratios(shadow_pop_MxZxT, None, target_pop, pop_mask_ZxT, options))
  else:
    center_K = rmia.target_ratios(shadow_pop_MxZxT, None, target_pop, pop_mask_ZxT, options).mean(axis=1)
  return options, target, keep, center_K


def score_targets(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                  options=None, *, tokens=False, mask_NxT=None, pop_mask_ZxT=None):
  """InfoRMIA [K, N] in bits of K separate targets ([N, T] and [Z, T] for one), every one of the M shadow models a
  reference model. A canary whose Pr(x) is undefined raises InputError. Options and tokens as leave_one_out's."""
  options, target, keep, center_K = _targets_setup(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT,
                                                   target_loss_KxNxT, target_pop_KxZxT, options, tokens, mask_NxT,
                                                   pop_mask_ZxT)
  r_KxN = rmia.target_ratios(shadow_loss_MxNxT, keep, target, mask_NxT, options)
  return (r_KxN - center_K[:, None]) / LN2


def target_token_scores(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                        options=None, *, mask_NxT=None, pop_mask_ZxT=None):
  """Token-level InfoRMIA per unit of K separate targets: (s_KxNxU in bits, NaN at invalid units, valid_NxU), as
  token_scores for leave-one-out; score_targets(..., tokens=True) is the mean over the valid units."""
  options, target, keep, center_K = _targets_setup(shadow_loss_MxNxT, shadow_keep_MxN, shadow_pop_MxZxT,
                                                   target_loss_KxNxT, target_pop_KxZxT, options, True, mask_NxT,
                                                   pop_mask_ZxT)
  r_KxNxU, valid_NxU = rmia.target_unit_ratios(shadow_loss_MxNxT, keep, target, mask_NxT, options)
  return (r_KxNxU - center_K[:, None, None]) / LN2, valid_NxU


# ---- a features folder: one target model (lp) and one reference model (ref_lp) ----

def _same_tokens(lp_NxT, ref_lp_NxT):
  """(lp, ref_lp) as float64 [N, T] on one width, after checking that ref_lp is scored at exactly lp's positions
  (the reference's log-probabilities of lp's tokens): InputError naming the first text that is not."""
  lp_NxT = np.asarray(as_rows("lp", lp_NxT), dtype=np.float64)
  ref_lp_NxT = np.asarray(as_rows("ref_lp", ref_lp_NxT), dtype=np.float64)
  same_rows("ref_lp", ref_lp_NxT, lp_NxT)
  T = max(lp_NxT.shape[1], ref_lp_NxT.shape[1])
  lp_NxT, ref_lp_NxT = (np.pad(a, ((0, 0), (0, T - a.shape[1])), constant_values=np.nan) for a in (lp_NxT, ref_lp_NxT))
  differ_N = (np.isfinite(lp_NxT) != np.isfinite(ref_lp_NxT)).any(axis=1)
  if differ_N.any():
    n = int(np.flatnonzero(differ_N)[0])
    raise InputError(f"token-level InfoRMIA compares the target and reference models token by token, so ref_lp must "
                     f"hold the reference's log-probabilities of lp's tokens (the same tokenizer, the same scored "
                     f"positions): text {n} is scored at {int(np.isfinite(lp_NxT[n]).sum())} positions in lp and "
                     f"{int(np.isfinite(ref_lp_NxT[n]).sum())} in ref_lp, not the same ones "
                     f"({int(differ_N.sum())} texts differ)")
  return lp_NxT, ref_lp_NxT


def text_token_scores(lp_NxT, ref_lp_NxT, ref_kl_NxT=None):
  """Token-level InfoRMIA of a features folder's texts, s_NxT in bits (NaN at unscored positions).

  With ref_kl (KL(p_ref || p) at each position, nats: the features folder's ref_kl.npy), the paper's per-context
  correction: s_t = [lp_t - ref_lp_t + KL_t] / ln 2, i.e. the true token's gain less the expected gain
  E_{v ~ p_ref(. | t_<i)} ln p(v | t_<i) / p_ref(v | t_<i) over the vocabulary. Without it, the evaluated texts'
  tokens stand in for the expectation: s_t = (lp_t - ref_lp_t) / ln 2 - c, c the mean of (lp - ref_lp) / ln 2 over
  every scored token of every text. ref_lp (and ref_kl) must be scored at lp's positions (InputError naming the text
  otherwise)."""
  lp_NxT, ref_lp_NxT = _same_tokens(lp_NxT, ref_lp_NxT)
  gain_NxT = (lp_NxT - ref_lp_NxT) / LN2
  scored_NxT = np.isfinite(gain_NxT)
  if ref_kl_NxT is not None:
    ref_kl_NxT = np.asarray(ref_kl_NxT, dtype=np.float64)
    if ref_kl_NxT.ndim != 2 or ref_kl_NxT.shape[0] != lp_NxT.shape[0] or ref_kl_NxT.shape[1] > lp_NxT.shape[1]:
      raise InputError(f"ref_kl must be shaped like lp [N, T] = {list(np.shape(lp_NxT))}, got "
                       f"{list(np.shape(ref_kl_NxT))}")
    ref_kl_NxT = np.pad(ref_kl_NxT, ((0, 0), (0, lp_NxT.shape[1] - ref_kl_NxT.shape[1])), constant_values=np.nan)
    differ_N = (np.isfinite(ref_kl_NxT) != scored_NxT).any(axis=1)
    if differ_N.any():
      raise InputError(f"ref_kl must be finite exactly where lp is scored: text {int(np.flatnonzero(differ_N)[0])} "
                       f"differs ({int(differ_N.sum())} texts)")
    return np.where(scored_NxT, gain_NxT + ref_kl_NxT / LN2, np.nan)
  c = np.where(scored_NxT, gain_NxT, 0.0).sum() / scored_NxT.sum()
  return np.where(scored_NxT, gain_NxT - c, np.nan)


def texts(lp_NxT, ref_lp_NxT, tokens=False, ref_kl_NxT=None):
  """InfoRMIA score_N in bits per token of a features folder's texts: lp (the target model's per-token
  log-probabilities, NaN at unscored positions) against one reference model's ref_lp, the population the evaluated
  texts themselves, unlabelled.

  Sequence form: r = mean scored lp - mean scored ref_lp, each over its own scored positions (the Reference attack's
  score; ref_lp may tokenize differently), less its mean over the texts, / ln 2: it ranks the texts exactly as
  attacks.reference does (the correction is one constant). Token form (tokens=True): the mean of text_token_scores
  over each text's scored tokens (ref_lp, and ref_kl when given, on lp's tokens); with ref_kl each token has its own
  correction, so the ranking is its own, and without it the Reference attack's again.
  """
  if tokens:
    s_NxT = text_token_scores(lp_NxT, ref_lp_NxT, ref_kl_NxT)
    scored_NxT = np.isfinite(s_NxT)
    return np.where(scored_NxT, s_NxT, 0.0).sum(axis=1) / scored_NxT.sum(axis=1)
  r_N = reference(lp_NxT, ref_lp_NxT)
  return (r_N - r_N.mean()) / LN2


# ---- the registry's records (attacks/catalogue.py registers them) ----

def _records():
  from attacks.registry import Attack, text_row  # here: attacks.registry imports nothing of this module's users
  note = ("{names}: InfoRMIA, the information gain log2 Pr(x | theta) / Pr(x) in bits per token (RMIA's likelihood "
          "ratio, model m the target, the other M - 1 its reference models, online) less its mean over the run's "
          "population (population_losses.npy).")
  tokens_note = ("{names}: token-level InfoRMIA, each token's gain log2 p_t(x | theta) / Pr_t(x) against its own "
                 "position's marginal over the other M - 1 models (online), less the mean gain of the run's population "
                 "tokens (population_losses.npy), averaged over the canary's tokens.")

  def record(name, title, color, rmia_name, tokens, note):
    def options(run):
      return rmia.RMIA.named(rmia_name, run.scoring)

    def check(run, settings):
      del settings
      run.check_defined(rmia.undefined_canaries(run.keep_MxN, options(run)), title,
                        "it needs an IN and an OUT reference model besides each target")

    def leave_one_out_(run, settings, on_undefined="raise"):
      del settings
      pop_MxZxT, pop_mask_ZxT = run.population()
      return leave_one_out(run.loss_MxNxT, run.keep_MxN, pop_MxZxT, options(run), tokens=tokens,
                           mask_NxT=run.mask_NxT, pop_mask_ZxT=pop_mask_ZxT, on_undefined=on_undefined,
                           model_ids=run.model_ids)

    def targets(run, target_loss_KxNxT, target_pop_KxZxT, settings):
      del settings
      pop_MxZxT, pop_mask_ZxT = run.population()
      return score_targets(run.loss_MxNxT, run.keep_MxN, pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                           options(run), tokens=tokens, mask_NxT=run.mask_NxT, pop_mask_ZxT=pop_mask_ZxT)

    def texts_(arrays, labels_N, settings):
      del labels_N, settings  # no labels read: the texts' own tokens or the reference's vocabulary are the population
      scores_N = texts(arrays["lp"], arrays["ref_lp"], tokens=tokens, ref_kl_NxT=arrays.get("ref_kl"))
      return [text_row(name, title, scores_N)]

    def check_texts(arrays, labels_N, settings):
      del labels_N, settings
      _same_tokens(arrays["lp"], arrays["ref_lp"])

    return Attack(name, title, color, line="--", needs=("population",), leave_one_out=leave_one_out_, check=check,
                  note=note, targets=targets, features=("lp", "ref_lp", "ref_kl") if tokens else ("lp", "ref_lp"),
                  texts=texts_, check_texts=check_texts if tokens else None)

  return (record("informia", "InfoRMIA", "olivedrab", "rmia", False, note),
          record("informia_tokens", "InfoRMIA token-level", "deeppink", "rmia_tokens", True, tokens_note))


ATTACKS = _records()
