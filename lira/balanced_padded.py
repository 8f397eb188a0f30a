"""Balanced leave-one-out with the IN count k a traced value: one program for every count of a run (the jax backend).

lira.balanced.sorted_balanced has shapes that depend on k (each class's rows, each target's removed rows), so a run
with canaries of many IN counts (a model subset of a shadow sweep, a keep matrix drawn per canary) would compile one
program per count. Here every count runs in one program of fixed shapes (a `Layout` of the run's counts): the
sorted rows are laid out as n_in IN slots then n_out OUT slots, the slots beyond a canary's own k and M - k holding
rows of zeros, which change nothing (they add nothing to a class mean taken over its real rows, to a scatter or a
Gram matrix: an eigenvalue 0, cut as null space by lira.gram.Fit). Each target's removed rows are read one at a time
by loops whose trip counts are the block's largest removal counts (lira/removal_stream.py), so a block of canaries
near half pays for the rows it removes, not for the run's largest; the removal count L and the counts s_own, s_oth
are traced scalars. The formulas are those of lira.balanced_removal.removal_scores, the numpy backend's. OAS runs
one stream per fit over the targets of both classes (`_oas_scores`): from a class's fit every target removes a
window of that class's rows, so near a count k one fit's loops run to about |M - 2k| + 1 rows and the other's to
one, and the program holds one copy of the loops per fit instead of one per fit and target class.

Counts where a class would drop more rows than it keeps (lira.balanced fits those kept rows directly) keep their
own static program. A block of the jax backend mixes counts (`per_canary`: the program of one canary, its count a
traced scalar, mapped over the block's canaries; the loops' trip counts are the block's).
"""

import dataclasses

import numpy as np
from array_api_compat import array_namespace

from lira import balanced
from lira import balanced_removal
from lira import gaussian
from lira import gram
from lira import removal_stream


@dataclasses.dataclass(frozen=True)
class Layout:
  """The fixed shapes of a run's program: slots per class and the most rows a target of each class removes."""
  M: int
  n_in: int  # IN slots (the run's largest k)
  n_out: int  # OUT slots (M minus its smallest k)
  sizes_in: tuple  # (S_own, S_oth) of IN targets
  sizes_out: tuple  # (S_own, S_oth) of OUT targets
  unions: tuple = (0, 0)  # the most rows an IN / an OUT target removes in all (s_own + s_oth: a pooled fit's)

  @property
  def factor_rows(self):
    """The rows of the buffer that holds OAS's factor of K in every stream of the program (the most rows any
    target removes from one fit): one buffer serves the program's streams and variants in turn."""
    return max(max(self.unions), *self.sizes_in, *self.sizes_out)


def downdated(k, M):
  """Whether count k's scores come from downdates only (no class drops more rows than it keeps), so that it can
  run in a padded program."""
  return 0 < k < M and all(max(s_own, s_oth) <= L for s_own, s_oth, L in balanced.removal_counts(k, M))


def _round_up(d):
  """The power of two at or above d >= 1."""
  return 1 << (d - 1).bit_length()


def covered(counts, M):
  """The counts a Layout of `counts` serves: those whose distance d = M - 2k from half lies in the range of the given
  counts' d widened to powers of two on either side of 0, so that model subsets of one size (a sweep's draws, whose
  counts differ a little) share one Layout, and so one compiled program (half, d = 0, always among them)."""
  d = [M - 2 * int(k) for k in counts]
  lo, hi = min(min(d), 0), max(max(d), 0)
  lo = -_round_up(-lo) if lo < 0 else lo
  hi = _round_up(hi) if hi > 0 else hi
  return [k for k in range(1, M) if lo <= M - 2 * k <= hi]


def layout(counts, M, widen=True):
  """The Layout of the `downdated` counts `covered` by `counts` (slots for the largest class of each, buffers for the
  most rows a target of each class removes); widen=False: of `counts` alone."""
  ks = sorted({int(k) for k in counts if downdated(int(k), M)})
  if not ks:
    raise ValueError(f"no IN count of {sorted(set(map(int, counts)))} of {M} models has a padded program "
                     "(lira.balanced_padded.downdated)")
  ks = [k for k in covered(ks, M) if downdated(k, M)] if widen else ks
  sizes = [tuple(max(balanced.removal_counts(j, M)[t][i] for j in ks) for i in (0, 1)) for t in (0, 1)]
  unions = tuple(max(sum(balanced.removal_counts(j, M)[t][:2]) for j in ks) for t in (0, 1))
  return Layout(M, max(ks), M - min(ks), sizes[0], sizes[1], unions)


def program_keys(counts, M, balanced=True):
  """{k: its program's static key}: the run's Layout where the counts are several and k is `downdated`, else k.
  balanced=False (plain leave-one-out, whose OAS removes each target's own row only, lira.gram.padded_loo): one
  Layout of slots for every count where they are several."""
  if len(counts) < 2:
    return {k: k for k in counts}
  if not balanced:
    ks = [k for k in covered(counts, M) if 0 < k < M]
    lay = Layout(M, max(ks), M - min(ks), (0, 0), (0, 0))
    return {k: lay for k in counts}
  ks = [k for k in counts if downdated(k, M)]
  lay = layout(ks, M) if ks else None
  return {k: lay if downdated(k, M) else k for k in counts}


def removed_rows(key, M):
  """The most rows a target removes (or, fitted on its kept rows, gathers: 2L) in the program of `key` (an IN count
  or a Layout): what a block's memory grows with beyond LiRA's half/half split (lira.loo_device.bytes_per_canary)."""
  if isinstance(key, Layout):
    return max(key.unions)
  return max(s_own + s_oth if max(s_own, s_oth) <= L else 2 * L for s_own, s_oth, L in balanced.removal_counts(key, M))


def removal_trips(k, M):
  """{target_in: (s_own, s_oth, s_own + s_oth)} of count k (a number, or traced values of any shape): the removal
  counts whose largest over a block are its loops' trip counts."""
  xp = array_namespace(k) if not isinstance(k, (int, np.integer)) else np
  out = {}
  for target_in in (True, False):
    n_own, n_oth = (k, M - k) if target_in else (M - k, k)
    L = xp.minimum(n_own - 1, n_oth)
    out[target_in] = (n_own - L, n_oth - L, n_own + n_oth - 2 * L)
  return out


def padded_balanced(x_BxMxD, k, first_BxM, valid_BxD, lay, *, oas, shared, offline, floor, offline_shift="std",
                    trips=None):
  """lira.balanced.sorted_balanced of canaries whose first k models are IN, k a traced integer scalar, one of the
  counts of `lay`: scores [B, M] in the sorted order. trips: `removal_trips` of the largest counts the loops run to
  (a block's, `per_canary`); default k's own. shared: a flag, or with oas=False a tuple of flags: then [scores per
  flag], the class-wise and the shared fit scored from one set of the windows' sums."""
  return _padded_balanced(x_BxMxD, k, first_BxM, valid_BxD, lay, oas=oas, shared=shared, offline=offline,
                          floor=floor, offline_shift=offline_shift, trips=trips)[0]


def _padded_balanced(x_BxMxD, k, first_BxM, valid_BxD, lay, *, oas, shared, offline, floor, offline_shift="std",
                     trips=None, scratch=None):
  """(`padded_balanced`'s scores, the buffer of OAS's factors [lay.factor_rows, B, N, lay.factor_rows] or None):
  scratch, where given, is such a buffer from another call, whose values are never read."""
  xp = array_namespace(x_BxMxD)
  dt = x_BxMxD.dtype
  M = lay.M
  kk = xp.asarray(k, dtype=xp.int32)
  n = {True: kk, False: M - kk}
  # sorted row of each slot (IN slots first), and whether the slot holds a row
  in_slot, real_N, src_N = gram.slot_rows(xp, lay.n_in, lay.n_out, M, kk)
  realf_N = xp.astype(real_N, dt)
  x_BxNxD = xp.take(x_BxMxD, src_N, axis=1) * realf_N[:, None]
  first_BxN = xp.take(first_BxM, src_N, axis=1)

  # centred rows (zeros in empty slots), the gap between the class means and each class's diag(W)
  kf = xp.astype(kk, dt)
  mean_in = xp.sum(x_BxNxD[:, :lay.n_in], axis=1) / kf
  mean_out = xp.sum(x_BxNxD[:, lay.n_in:], axis=1) / (M - kf)
  z_BxNxD = (x_BxNxD - xp.where(in_slot[None, :, None], mean_in[:, None], mean_out[:, None])) * realf_N[:, None]
  delta_BxD = mean_in - mean_out
  diag_w = {True: xp.sum(z_BxNxD[:, :lay.n_in] ** 2, axis=1), False: xp.sum(z_BxNxD[:, lay.n_in:] ** 2, axis=1)}

  fitted = balanced_removal.oas_fits(z_BxNxD, lay.n_in, delta_BxD, valid_BxD, shared) if oas else None
  floored = balanced_removal.floor_variance(xp, valid_BxD, floor, False)
  counts = removal_trips(kk, M)  # this canary's (s_own, s_oth, their sum) per target class
  trips = counts if trips is None else trips
  if oas:
    scores, scratch = _oas_scores(z_BxNxD, delta_BxD, diag_w, fitted, first_BxN, n, counts, trips, lay, valid_BxD,
                                  scratch, shared=shared, offline=offline, floor=floor, offline_shift=offline_shift)
    return gram.slots_to_sorted(xp, scores, lay.n_in, M, kk), scratch
  flags = shared if isinstance(shared, tuple) else (shared,)  # the diagonal fits score several from one set of sums
  scores = []
  for target_in in (True, False):
    n_own, n_oth = n[target_in], n[not target_in]
    s_own, s_oth, _ = counts[target_in]
    L = n_own - s_own
    trips_c = trips[target_in]
    own_at, oth_at = (0, lay.n_in) if target_in else (lay.n_in, 0)
    J, J_oth = (lay.n_in, lay.n_out) if target_in else (lay.n_out, lay.n_in)
    j_J = xp.asarray(np.arange(J), dtype=xp.int32)
    first_BxJ = first_BxN[:, own_at:own_at + J]
    B = x_BxMxD.shape[0]
    # the target and the next s_own - 1 of its class (cyclically), then the first s_oth of the other after it
    own = removal_stream.Window(own_at, J, n_own, xp.broadcast_to(j_J, (B, J)), s_own, trips_c[0], 0)
    oth = removal_stream.Window(oth_at, J_oth, n_oth, first_BxJ, s_oth, trips_c[1], 0)
    scores.append(_diagonal_scores(z_BxNxD, delta_BxD, diag_w, target_in, own, oth, own_at, J, xp.astype(L, dt),
                                   valid_BxD, floored, shared=flags, offline=offline, floor=floor,
                                   offline_shift=offline_shift))
  out = [gram.slots_to_sorted(xp, xp.concat(per_class, axis=1), lay.n_in, M, kk) for per_class in zip(*scores)]
  return (out if isinstance(shared, tuple) else out[0]), scratch


def _diagonal_scores(z_BxNxD, delta_BxD, diag_w, target_in, own, oth, own_at, J, L, valid_BxD, floored, *, shared,
                     offline, floor, offline_shift):
  """[Scores [B, J] per flag of `shared`] of one class's J target slots under the diagonal estimators, each fitted
  without its removed rows (own: the target and the next of its class, oth: the first of the other class after it,
  `Window`s), both classes left with L rows: lira.balanced_removal.removal_scores' diagonal branch, streamed. The
  windows' sums are made once for the class-wise and the shared fit."""
  xp = array_namespace(z_BxNxD)
  z_t = z_BxNxD[:, own_at:own_at + J]
  sgn = 1.0 if target_in else -1.0
  (g_own,), sq_own = removal_stream.window_sums(z_BxNxD, removal_stream.Sets([own], own.trip))
  (g_oth,), sq_oth = removal_stream.window_sums(z_BxNxD, removal_stream.Sets([oth], oth.trip))
  removed_own, removed_oth = sq_own + g_own * g_own / L, sq_oth + g_oth * g_oth / L
  r_own = z_t + g_own / L
  r_oth = z_t + sgn * delta_BxD[:, None, :] + g_oth / L
  if offline:  # the OUT fit: the own one for OUT targets, the other one for IN targets (shared or not)
    r, scat = (r_oth, diag_w[False][:, None] - removed_oth) if target_in else \
        (r_own, diag_w[False][:, None] - removed_own)
    z = gaussian.offline_z(r, floored(scat / L), valid_BxD, 1.0, offline_shift, model_axis=1)
    return [z for _ in shared]
  out = []
  for pooled in shared:
    if pooled:  # unscored positions: zero residuals, so the floor there adds nothing
      inv_var = (2.0 * L) / xp.maximum((diag_w[True] + diag_w[False])[:, None] - (removed_own + removed_oth),
                                       2.0 * L * floor)
      q_own = xp.sum(r_own * r_own * inv_var, axis=2)
      q_oth = xp.sum(r_oth * r_oth * inv_var, axis=2)  # the same covariance for both classes: logdets cancel
    else:
      var_own = floored((diag_w[target_in][:, None] - removed_own) / L)
      var_oth = floored((diag_w[not target_in][:, None] - removed_oth) / L)
      q_own = xp.sum(r_own * r_own / var_own + xp.log(var_own), axis=2)
      q_oth = xp.sum(r_oth * r_oth / var_oth + xp.log(var_oth), axis=2)
    own_minus_oth = -0.5 * (q_own - q_oth)
    out.append(own_minus_oth if target_in else -own_minus_oth)
  return out


def _oas_scores(z_BxNxD, delta_BxD, diag_w, fitted, first_BxN, n, counts, trips, lay, valid_BxD, scratch, *, shared,
                offline, floor, offline_shift):
  """OAS scores [B, N] of every target slot (the IN slots, then the OUT ones): lira.balanced_removal.removal_scores,
  streamed (lira/removal_stream.py), with one stream per fit over the targets of both classes. From class c's fit
  each target removes a window of c's rows: a target of c itself and the next s_own - 1, a target of the other
  class the s_oth rows of c from its first one after it (`Window`s with a start and a count per target). A block
  whose counts lie on one side of half removes many rows from one class and at most one from the other, so one of
  the two streams runs its loops to about |M - 2k| + 1 rows and the other to one; each target class keeps its own
  L. n: {class: its row count}; counts, trips: `removal_trips` of the canary and of the block. Every stream factors
  K in one buffer of lay.factor_rows rows (`scratch`, or zeros): (scores, that buffer)."""
  xp = array_namespace(z_BxNxD)
  dt = z_BxNxD.dtype
  B = z_BxNxD.shape[0]
  fits, P_BxNxR, R_BxNxD, proj_delta = fitted
  n_in, n_out = lay.n_in, lay.n_out
  in_J = xp.asarray(np.arange(n_in + n_out) < n_in)

  def per_target(v_in, v_out):  # [1, J] from the IN targets' value and the OUT targets'
    return xp.where(in_J, v_in, v_out)[None]
  L_J = xp.astype(per_target(n[True] - counts[True][0], n[False] - counts[False][0]), dt)
  L_Jx1 = L_J[..., None]

  def window(c):  # class c's rows, from each target's start: its own position in c, or its first row of c after it
    at, cap = (0, n_in) if c else (n_in, n_out)
    i = 0 if c else 1  # IN targets remove s_own of IN, s_oth of OUT; OUT targets the other way round
    own_start = xp.broadcast_to(xp.asarray(np.arange(cap), dtype=first_BxN.dtype), (B, cap))
    parts = [own_start, first_BxN[:, n_in:]] if c else [first_BxN[:, :n_in], own_start]
    s = per_target(counts[True][i], counts[False][1 - i])
    trip = xp.maximum(trips[True][i], trips[False][1 - i])
    return removal_stream.Window(at, cap, n[c], xp.concat(parts, axis=1), s, trip,
                                 max(lay.sizes_in[i], lay.sizes_out[1 - i]))

  def gap(c, v_BxXxY):  # each target's class mean minus class c's: 0, or +-v (the gap between the means, IN - OUT)
    sign = xp.astype(per_target(0.0 if c else 1.0, -1.0 if c else 0.0), dt)[..., None]
    return sign * v_BxXxY

  def projected(c):  # every target's row projected on class c's fit: its own P where c is its class
    at, cap, o_at, o_cap = (0, n_in, n_in, n_out) if c else (n_in, n_out, 0, n_in)
    mine, other = P_BxNxR[:, at:at + cap], fits[c].project(z_BxNxD[:, o_at:o_at + o_cap])
    return xp.concat([mine, other] if c else [other, mine], axis=1)

  S = lay.factor_rows
  if scratch is None:
    scratch = xp.zeros((S, B, n_in + n_out, S), dtype=dt)

  def stream(fit, windows, trip, n_after):
    return removal_stream.Stream(fit, z_BxNxD, P_BxNxR, R_BxNxD, removal_stream.Sets(windows, trip), L_J, n_after,
                                 floor, S, scratch)

  delta_b = delta_BxD[:, None, :]
  if offline:  # the OUT fit without each target's OUT rows
    fit, w = fits[False], window(False)
    st = stream(fit, [w], w.trip, L_J)
    g = st.gs[0]
    r = st.vector(z_BxNxD + gap(False, delta_b) + g / L_Jx1,
                  projected(False) + gap(False, proj_delta[False]) + st.pgs[0] / L_Jx1)
    valid = xp.astype(valid_BxD, dt)[:, None, :]
    if offline_shift == "uniform":
      u_v = xp.broadcast_to(valid, z_BxNxD.shape)
    else:  # sqrt(diag S') per target: diag(W') = diag(W) - sum of squared removed rows - g^2 / L
      diag = diag_w[False][:, None] - (st.sq + g * g / L_Jx1)
      u_v = xp.sqrt(st.alpha[..., None] + st.beta[..., None] * xp.maximum(diag, 0.0)) * valid
    u = st.vector(u_v, fit.project(u_v))
    u_r, u_u = st.forms([(u, r), (u, u)])
    return u_r / xp.sqrt(u_u), st.scratch
  if shared:  # the pooled fit without both windows
    w_in, w_out = window(True), window(False)
    st = stream(fits[None], [w_in, w_out], xp.maximum(trips[True][2], trips[False][2]), 2.0 * L_J)
    r = [st.vector(z_BxNxD + gap(c, delta_b) + st.gs[i] / L_Jx1,
                   P_BxNxR + gap(c, proj_delta[None]) + st.pgs[i] / L_Jx1) for i, c in enumerate((True, False))]
    q_in, q_out = st.forms([(r[0], r[0]), (r[1], r[1])])  # logdets cancel
    return -0.5 * (q_in - q_out), st.scratch
  q = {}
  for c in (True, False):  # each class's fit without each target's window of its rows
    w = window(c)
    st = stream(fits[c], [w], w.trip, L_J)
    r = st.vector(z_BxNxD + gap(c, delta_b) + st.gs[0] / L_Jx1,
                  projected(c) + gap(c, proj_delta[c]) + st.pgs[0] / L_Jx1)
    q[c] = st.forms([(r, r)])[0] + st.logdet()
    scratch = st.scratch  # the next stream factors in the same buffer
  return -0.5 * (q[True] - q[False]), scratch  # every target's llr: IN fit against OUT fit


def per_canary(x_BxMxD, k_B, first_BxM, valid_BxD, lay, scratch=None, **options):
  """`padded_balanced` of canaries with one IN count each (k_B [B] int, counts of `lay`), by jax.vmap over the
  canaries: (scores [B, M] in each canary's sorted order, or a list of them where `shared` is a tuple of flags, the
  buffer of OAS's factors or None). The loops run to the block's largest removal counts. scratch: that buffer from
  the call of another variant on the same block (its values are never read), so that the variants of a program share
  one. options: padded_balanced's keywords."""
  import jax
  import jax.numpy as jnp
  t = removal_trips(jnp.asarray(k_B, dtype=jnp.int32), lay.M)
  trips = {c: tuple(jnp.max(s) for s in t[c]) for c in t}

  def one(x_MxD, k, first_M, valid_D, scratch):
    scores, scratch = _padded_balanced(x_MxD[None], k, first_M[None], valid_D[None], lay, trips=trips,
                                       scratch=None if scratch is None else scratch[:, None], **options)
    scores = [s[0] for s in scores] if isinstance(scores, list) else scores[0]
    return scores, None if scratch is None else scratch[:, 0]
  if scratch is None:
    return jax.vmap(lambda *a: one(*a, None))(x_BxMxD, k_B, first_BxM, valid_BxD)
  return jax.vmap(one)(x_BxMxD, k_B, first_BxM, valid_BxD, scratch)
