"""EZ-MIA of one text from its definition, a plain loop (the reference tests/attacks/test_ez_mia.py checks
attacks/ez_mia.py against; attacks/ez_mia.py and docs/conventions.md state the conventions).

For a text, walk its scored positions in order, skipping the first one. A position is in the error zone when the
target's top-1 token is not the true token there. With fewer than min_tokens error-zone positions the score is 0.
Otherwise, with d = target lp - reference lp at each of them, P is the sum of the d > 0 and Q the sum of |d| for
the d < 0 (a d of exactly 0 is in neither); Q == 0 scores 0, else the score is P / (Q + 1e-12), and a NaN, infinite
or negative score is 0.
"""

import math


def ez_text(target, reference, top1, scored, min_tokens=2):
  """The EZ-MIA score of one text from its per-position lists (target lp, reference lp, top-1 right, scored)."""
  deltas = []
  seen_first = False
  for lp, ref, right, keep in zip(target, reference, top1, scored):
    if not keep:
      continue
    if not seen_first:  # the official ignore_bos: the first scored position is dropped
      seen_first = True
      continue
    if not right:
      deltas.append(float(lp) - float(ref))
  if len(deltas) < min_tokens:
    return 0.0
  positive = 0.0
  negative = 0.0
  for d in deltas:
    if d > 0:
      positive += d
    elif d < 0:
      negative += -d
  if negative == 0:
    return 0.0
  score = positive / (negative + 1e-12)
  if math.isnan(score) or math.isinf(score) or score < 0:
    return 0.0
  return score


def ez_rows(target_lp, reference_lp, top1, scored, min_tokens=2):
  """[score per text] of per-token rows (lists or arrays; each value read as a Python float)."""
  return [ez_text([float(x) for x in t], [float(x) for x in r], [bool(x) for x in o], [bool(x) for x in s],
                  min_tokens)
          for t, r, o, s in zip(target_lp, reference_lp, top1, scored)]


def ez_shadow_loop(loss, keep, top1, mask, min_tokens=2):
  """Leave-one-out [M][N] (None where undefined): target m on canary n against the mean lp of n's OUT models other
  than m, that mean taken by its own loop over those models."""
  M, N = len(loss), len(loss[0])
  T = len(loss[0][0])
  out = [[None] * N for _ in range(M)]
  for m in range(M):
    for n in range(N):
      refs = [r for r in range(M) if not keep[r][n] and r != m]
      if not refs:
        continue
      scored = [True] * T if mask is None else [bool(x) for x in mask[n]]
      reference = []
      for t in range(T):
        total = 0.0
        for r in refs:
          total += -float(loss[r][n][t]) if scored[t] else 0.0
        reference.append(total / len(refs))
      target = [-float(x) if s else 0.0 for x, s in zip(loss[m][n], scored)]
      out[m][n] = ez_text(target, reference, [bool(x) for x in top1[m][n]], scored, min_tokens)
  return out
