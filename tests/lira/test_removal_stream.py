"""lira/removal_stream.py's passes over the removed rows equal their definitions on gathered rows: a class's band of
dot products, each window's sums, and the dot products of any two rows of a target's union of windows (from the
bands within a window, the cross products across), with a start and a count per target, on numpy and jax (loops of
traced trip counts, the class's row count traced)."""

import contextlib

import numpy as np
import pytest

from lira import gram
from lira import removal_stream
from lira.loo_jax import x64_context

B, D = 2, 4
N_IN, N_OUT = 7, 6  # slots per class; the real rows are n_in <= N_IN, n_out <= N_OUT, the rest zero rows
J = N_IN + N_OUT  # targets: every slot


def xp_of(backend):
  """(array namespace, the context its float64 needs)."""
  if backend == "numpy":
    return np, contextlib.nullcontext()
  return pytest.importorskip("jax.numpy"), x64_context("float64")


def rows_and_windows(n_in, n_out, seed=0):
  """(z [B, N, D] with zero rows in empty slots; the two classes' windows of every target, as numpy arguments): each
  target removes from one class one row (s0 <= 1) and up to 3 from the other, or 2-3 from the first and none from
  the other, per target, as balanced counts do."""
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(B, J, D))
  z[:, n_in:N_IN] = 0.0
  z[:, N_IN + n_out:] = 0.0
  start_in = rng.integers(0, n_in, size=(B, J)).astype(np.int32)
  start_out = rng.integers(0, n_out, size=(B, J)).astype(np.int32)
  s_in = np.where(np.arange(J) % 3 == 0, 3, np.where(np.arange(J) % 3 == 1, 1, 2))
  s_out = np.where(s_in <= 1, 3, np.where(np.arange(J) % 2 == 0, 1, 0))
  s_out = np.where(s_in == 3, 0, s_out)
  return z, (0, N_IN, n_in, start_in, s_in[None]), (N_IN, N_OUT, n_out, start_out, s_out[None])


def window(xp, spec, trip, S):
  at, cap, n, start, s = spec
  return removal_stream.Window(at, cap, xp.asarray(n), xp.asarray(start), xp.asarray(s), trip, S)


def union_rows(z, specs):
  """Each target's removed rows in union order ([B, J, S_total, D]) and whether each is real ([B, J, S_total])."""
  out, real = [], []
  for at, cap, n, start, s in specs:
    for t in range(3):
      out.append(z[np.arange(B)[:, None], at + (start + t) % n])
      real.append(np.broadcast_to(t < s, (B, J)))
  # union order: window 0's real rows, then window 1's
  Z = np.stack(out, axis=2)
  R = np.stack(real, axis=2)
  order = np.argsort(~R, axis=2, kind="stable")
  return np.take_along_axis(Z, order[..., None], axis=2), np.take_along_axis(R, order, axis=2)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_band_equals_the_class_dot_products(backend):
  xp, ctx = xp_of(backend)
  z, spec_in, _ = rows_and_windows(5, 4)
  with ctx:
    w = window(xp, spec_in, 3, 4)
    band = np.asarray(w.band(xp.asarray(z)))  # [S, B, cap]
  n = 5
  for o in range(4):
    for i in range(N_IN):
      want = z[:, i] @ z[:, (i + o) % n].T if i < n and o < 3 else np.zeros((B, B))
      np.testing.assert_allclose(band[o, :, i], np.diag(want), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_sums_and_pairs_of_per_target_windows_equal_the_gathered_rows(backend):
  xp, ctx = xp_of(backend)
  z, spec_in, spec_out = rows_and_windows(5, 4, seed=1)
  Z, real = union_rows(z, [spec_in, spec_out])  # [B, J, 6, D]
  with ctx:
    fit = gram.Fit(xp.asarray(z), xp.asarray(np.full(B, D)))
    P = fit.project(xp.asarray(z))
    w_in, w_out = window(xp, spec_in, 3, 3), window(xp, spec_out, 3, 3)
    sets = removal_stream.Sets([w_in, w_out], 4)
    (g_in, g_out), sq = removal_stream.window_sums(xp.asarray(z), sets)
    st = removal_stream.Stream(fit, xp.asarray(z), P, None, sets, 10.0, 20.0, 1e-8, 4)
    pairs = {(a, b): np.asarray(st._pair(a, b)) for a in range(4) for b in range(a)}
  on = real[..., None]
  first = np.arange(6) < np.broadcast_to(spec_in[4], (B, J))[..., None]  # union rows of the IN window
  np.testing.assert_allclose(np.asarray(g_in), np.sum(Z * (on & first[..., None]), axis=2), atol=1e-13)
  np.testing.assert_allclose(np.asarray(g_out), np.sum(Z * (on & ~first[..., None]), axis=2), atol=1e-13)
  np.testing.assert_allclose(np.asarray(sq), np.sum(Z * Z * on, axis=2), atol=1e-13)
  for (a, b), got in pairs.items():
    both = real[:, :, a] & real[:, :, b]
    want = np.sum(Z[:, :, a] * Z[:, :, b], axis=-1)
    np.testing.assert_allclose(got[both], want[both], rtol=1e-12, atol=1e-12)
  assert sum(int(np.sum(real[:, :, a] & real[:, :, b])) for a, b in pairs) > 2 * B * J  # pairs within and across
