"""InfoRMIA written from its equations as a plain loop over models, samples and units (the reference tests/attacks/
test_informia.py checks attacks/informia.py against; attacks/informia.py's docstring states the score). Python floats,
math.log and math.exp, no logsumexp and no use of lira.rmia.

For a target model theta with reference models theta' (membership keep' of each canary):
- a sequence's units under a model are its scored log-probabilities lp = -loss in order, or with group:K the means of
  the K chunks numpy.array_split makes of them, or with min:K / max:K the lp of its K lowest / highest losses;
- ln Pr(x | theta) of the sequence is the mean of its units; Pr(x) the marginal of exp of that over the reference
  models (online balanced: (mean over IN + mean over OUT) / 2; online plain: the mean over all; offline:
  ((1 + a) mean over OUT + (1 - a)) / 2; a population sample: the mean over all, offline through the same formula);
- sequence form: r(x) = ln Pr(x | theta) - ln Pr(x), score = (r(x) - mean_z r(z)) / ln 2;
- token form: r_u(x) = lp_u(x | theta) - ln Pr_u(x), Pr_u the same marginal of exp(lp_u) position by position,
  c = the mean of r_u(z) / ln 2 over every unit of every population sample, s_u = r_u(x) / ln 2 - c and the
  sequence score the mean of s_u over x's units.
A canary whose marginal has no model to average is undefined: NaN here.
"""

import math

LN2 = math.log(2.0)


def _mean(values):
  return sum(values) / len(values)


def units(loss_row, mask_row, reduction=None):
  """The log-probability units of one sequence under one model (see the module docstring)."""
  lps = [-float(v) for v, scored in zip(loss_row, mask_row) if scored]
  if reduction is None:
    return lps
  kind, k = reduction.split(":")
  k = int(k)
  if kind == "min":
    return sorted(lps, reverse=True)[:k]  # the lowest losses are the highest log-probabilities
  if kind == "max":
    return sorted(lps)[:k]
  q, rem = divmod(len(lps), k)
  out, start = [], 0
  for i in range(k):
    size = q + 1 if i < rem else q
    out.append(_mean(lps[start:start + size]))
    start += size
  return out


def marginal(probs, keeps, setting):
  """Pr(x) from the reference models' probabilities; keeps None: a population sample (OUT for every model)."""
  online, balanced, a = setting["online"], setting.get("balance_counts", True), setting.get("a", 0.3)
  if keeps is None:
    out = _mean(probs)
    return out if online else ((1 + a) * out + (1 - a)) / 2
  ins = [p for p, k in zip(probs, keeps) if k]
  outs = [p for p, k in zip(probs, keeps) if not k]
  if not online:
    return ((1 + a) * _mean(outs) + (1 - a)) / 2
  if balanced:
    return (_mean(ins) + _mean(outs)) / 2
  return _mean(probs)


def gains(target_row, reference_rows, keeps, mask_row, setting, tokens):
  """[r] (the sequence) or [r_u per unit], in nats; None where the marginal is undefined."""
  reduction = setting.get("reduction")
  mine = units(target_row, mask_row, reduction)
  theirs = [units(row, mask_row, reduction) for row in reference_rows]
  try:
    if not tokens:
      return [_mean(mine) - math.log(marginal([math.exp(_mean(u)) for u in theirs], keeps, setting))]
    return [mine[u] - math.log(marginal([math.exp(t[u]) for t in theirs], keeps, setting)) for u in range(len(mine))]
  except ZeroDivisionError:  # no reference model of a class the marginal needs
    return None


def one_target(t_loss, t_pop, r_loss, r_keep, r_pop, mask, pop_mask, setting, tokens):
  """(scores [N] in bits, token scores [N][U] in bits) of one target against its reference models r.

  t_loss [N][T], t_pop [Z][T]: the target's losses; r_loss [R][N][T], r_keep [R][N], r_pop [R][Z][T]: the references'.
  """
  pop = [gains(t_pop[z], [r[z] for r in r_pop], None, pop_mask[z], setting, tokens) for z in range(len(t_pop))]
  flat = [g for sample in pop for g in sample]  # token form: each population unit one sample; sequence: one per z
  c = _mean([g / LN2 for g in flat])
  scores, token_lists = [], []
  for n in range(len(t_loss)):
    g = gains(t_loss[n], [r[n] for r in r_loss], [k[n] for k in r_keep], mask[n], setting, tokens)
    if g is None:
      scores.append(float("nan"))
      token_lists.append(None)
      continue
    s = [v / LN2 - c for v in g]
    token_lists.append(s)
    scores.append(_mean(s))
  return scores, token_lists


def _full(mask, rows, T):
  return [[True] * T for _ in range(rows)] if mask is None else [[bool(v) for v in row] for row in mask]


def leave_one_out(loss, keep, pop, setting, tokens=False, mask=None, pop_mask=None):
  """(scores [M][N], token scores [M][N][U]): model m the target, the other models its references."""
  M, N, T = len(loss), len(loss[0]), len(loss[0][0])
  mask, pop_mask = _full(mask, N, T), _full(pop_mask, len(pop[0]), T)
  scores, token_lists = [], []
  for m in range(M):
    others = [r for r in range(M) if r != m]
    s, t = one_target(loss[m], pop[m], [loss[r] for r in others], [keep[r] for r in others],
                      [pop[r] for r in others], mask, pop_mask, setting, tokens)
    scores.append(s)
    token_lists.append(t)
  return scores, token_lists


def targets(shadow_loss, shadow_keep, shadow_pop, target_loss, target_pop, setting, tokens=False, mask=None,
            pop_mask=None):
  """(scores [K][N], token scores [K][N][U]) of separate targets, every shadow model a reference."""
  N, T = len(shadow_loss[0]), len(shadow_loss[0][0])
  mask, pop_mask = _full(mask, N, T), _full(pop_mask, len(shadow_pop[0]), T)
  out = [one_target(t_loss, t_pop, shadow_loss, shadow_keep, shadow_pop, mask, pop_mask, setting, tokens)
         for t_loss, t_pop in zip(target_loss, target_pop)]
  return [s for s, _ in out], [t for _, t in out]


def texts(lp, ref_lp, tokens=False):
  """(scores [N], token scores [N][T] with None at unscored positions) of a features folder's texts: lp against one
  reference model's ref_lp (NaN = unscored), the population the texts themselves."""
  def scored(row):
    return [float(v) for v in row if not math.isnan(v)]

  if not tokens:
    r = [_mean(scored(a)) - _mean(scored(b)) for a, b in zip(lp, ref_lp)]
    c = _mean(r)
    return [(v - c) / LN2 for v in r], None
  all_gains = [(float(a) - float(b)) / LN2 for row, ref in zip(lp, ref_lp) for a, b in zip(row, ref)
               if not math.isnan(a)]
  c = _mean(all_gains)
  maps = [[None if math.isnan(a) else (float(a) - float(b)) / LN2 - c for a, b in zip(row, ref)]
          for row, ref in zip(lp, ref_lp)]
  return [_mean([v for v in row if v is not None]) for row in maps], maps


def token_scores_from_distributions(p_rows, p_ref_rows, tokens):
  """Token-level InfoRMIA from the definition, with the vocabulary as the population at each context: for each
  text and predicted position, p and p_ref the two models' next-token distributions (lists of probabilities) and x
  the true token, s = log2 p(x) / p_ref(x) - sum_v p_ref(v) log2 p(v) / p_ref(v). None where no token is given."""
  out = []
  for p_row, q_row, x_row in zip(p_rows, p_ref_rows, tokens):
    row = []
    for p, q, x in zip(p_row, q_row, x_row):
      if x is None:
        row.append(None)
        continue
      expected = sum(qv * math.log2(pv / qv) for pv, qv in zip(p, q))
      row.append(math.log2(p[x] / q[x]) - expected)
    out.append(row)
  return out
