"""The removal windows' sums and dot products (lira.balanced_removal.Windows) and woodbury.Removal's closed forms
for them equal the definitions on gathered rows and an explicit C matrix, on numpy and jax."""

import contextlib

import numpy as np
import pytest

from lira import balanced_removal
from lira import gram
from lira import woodbury
from lira.loo_jax import x64_context

B, D = 3, 5


def windows(s_own, s_oth, n_own=9, n_oth=7, seed=0, width=D):
  """(Windows of a class of n_own rows (first) and one of n_oth, the other class's starts drawn in 0.. n_oth (n_oth:
  the first model after the target wraps to the class's first), rows [B, N, width])."""
  rng = np.random.default_rng(seed)
  first = rng.integers(0, n_oth + 1, size=(B, n_own)).astype(np.int32)
  first[:, 0] = n_oth
  return balanced_removal.Windows(0, n_own, s_own, n_own, n_oth, s_oth, first), \
      rng.normal(size=(B, n_own + n_oth, width))


def xp_of(backend):
  """(array namespace, the context its float64 needs)."""
  if backend == "numpy":
    return np, contextlib.nullcontext()
  return pytest.importorskip("jax.numpy"), x64_context("float64")


@pytest.mark.parametrize("backend", ["numpy", "jax"])
@pytest.mark.parametrize("width", [1, 8])  # sums of narrow rows gathered, of wide ones shifted adds
@pytest.mark.parametrize("s_own,s_oth", [(1, 2), (1, 6), (5, 0), (2, 0), (4, 3)])
def test_window_sums_and_grams_equal_the_gathered_rows(backend, width, s_own, s_oth):
  xp, context = xp_of(backend)
  with context:
    check_windows(xp, s_own, s_oth, width)


def check_windows(xp, s_own, s_oth, width):
  win, z = windows(s_own, s_oth, width=width)
  idx = win.idx()
  # the definition: row j of the own class, then the next (cyclically); the other class from its start
  n_own, n_oth = win.own[1], win.oth[1]
  for j in range(n_own):
    assert list(idx[1, j, :s_own]) == [(j + a) % n_own for a in range(s_own)]
    assert list(idx[1, j, s_own:]) == [n_own + (int(win.first_BxJ[1, j]) + c) % n_oth for c in range(s_oth)]
  Z = np.take_along_axis(z[:, None], idx[..., None], axis=2)  # [B, J, S, D]
  win.first_BxJ = xp.asarray(win.first_BxJ)
  for own, rows in ((True, Z[:, :, :s_own]), (False, Z[:, :, s_own:])):
    if not rows.shape[2]:
      assert win.sums(xp.asarray(z), own) == (None, None)
      continue
    g, sq = win.sums(xp.asarray(z), own)
    np.testing.assert_allclose(np.asarray(g), rows.sum(axis=2), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(sq), (rows**2).sum(axis=2), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(np.asarray(win.gram(xp.asarray(z), own)), rows @ np.swapaxes(rows, -1, -2),
                               rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("sizes", [(3,), (1, 5), (4, 0), (2, 3)])
def test_removal_traces_equal_the_explicit_products(sizes):
  rng = np.random.default_rng(3)
  S, L = sum(sizes), 7.0
  Z = rng.normal(size=(B, 4, S, D))
  G = Z @ np.swapaxes(Z, -1, -2)
  C = woodbury.removal_matrix(sizes, L)
  trace, fro2 = woodbury._removal_traces(G, sizes, L)
  CG = C @ G
  np.testing.assert_allclose(trace, np.trace(CG, axis1=-2, axis2=-1), rtol=1e-13)
  np.testing.assert_allclose(fro2, np.trace(CG @ CG, axis1=-2, axis2=-1), rtol=1e-13)


def removal(sizes, *, zwz, n=12, seed=5):
  """A woodbury.Removal of the first S rows of a class of n rows, each target its own removed rows (numpy)."""
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(B, n, D))
  z -= z.mean(axis=1, keepdims=True)
  fit = gram.Fit(z, np.full(B, float(D)))
  S, L = sum(sizes), float(n - sum(sizes))
  J = 4
  idx = (np.arange(J)[:, None] + np.arange(S)[None]) % n
  P = fit.project(z)[:, idx]  # [B, J, S, R]
  G = z[:, idx] @ np.swapaxes(z[:, idx], -1, -2)
  C = woodbury.removal_matrix(sizes, L)
  W = (fit.v * fit.lam[:, None, :]) @ np.swapaxes(fit.v, -1, -2)  # [B, D, D]
  c_zwz = np.sum(C * (z[:, idx] @ W[:, None] @ np.swapaxes(z[:, idx], -1, -2)), axis=(-2, -1)) if zwz else None
  rem = woodbury.Removal(fit, P, G, C, L, 1e-10, blocks=(sizes, L, c_zwz))
  return rem, z[:, idx], P, L


@pytest.mark.parametrize("lu", [False, True])
@pytest.mark.parametrize("sizes", [(4,), (1, 3)])
def test_removal_forms_and_logdet_equal_the_downdated_covariance(sizes, lu, monkeypatch):
  """Against S' = alpha' I + beta' W' formed explicitly (W' the scatter less Z_S^T C Z_S; alpha', beta' OAS's from
  its trace and norm): the bordered Cholesky's forms and log-determinant, the traces from row sums; lu: as where K
  is not numerically positive definite (LU solves)."""
  rem, Z, P, L = removal(sizes, zwz=True)
  plain = removal(sizes, zwz=False)[0]
  fit, S = rem.fit, sum(sizes)
  W = (fit.v * fit.lam[:, None, :]) @ np.swapaxes(fit.v, -1, -2)  # [B, D, D]
  W_rm = W[:, None] - np.swapaxes(Z, -1, -2) @ woodbury.removal_matrix(sizes, L) @ Z  # [B, J, D, D]
  alpha, beta = fit.params(L, np.trace(W_rm, axis1=-2, axis2=-1), np.sum(W_rm**2, axis=(-2, -1)), 1e-10)
  for r in (rem, plain):
    np.testing.assert_allclose(r.alpha, alpha, rtol=1e-12)
    np.testing.assert_allclose(r.beta, beta, rtol=1e-12)
  if lu:
    def refuse(a):
      raise np.linalg.LinAlgError("not positive definite")
    monkeypatch.setattr(np.linalg, "cholesky", refuse)
  rem.basis([(Z, P)])
  a = np.linspace(0.5, 1.5, S)
  b = np.linspace(-1.0, 1.0, S)
  ab, aa = rem.forms([(a, b), (a, a)])
  Sig = alpha[..., None, None] * np.eye(D) + beta[..., None, None] * W_rm
  u, v = np.einsum("s,bjsd->bjd", a, Z), np.einsum("s,bjsd->bjd", b, Z)
  np.testing.assert_allclose(ab, np.einsum("bjd,bjd->bj", u, np.linalg.solve(Sig, v[..., None])[..., 0]),
                             rtol=1e-10)
  np.testing.assert_allclose(aa, np.einsum("bjd,bjd->bj", u, np.linalg.solve(Sig, u[..., None])[..., 0]),
                             rtol=1e-10)
  np.testing.assert_allclose(rem.logdet(), np.linalg.slogdet(Sig)[1], rtol=1e-10)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("target_in", [True, False])
@pytest.mark.parametrize("s_own,s_oth,width", [(1, 4, 5), (3, 0, 5), (4, 2, 5), (4, 3, 8), (6, 0, 8)])
def test_windows_zwz_equals_the_gathered_rows_on_their_fits(shared, target_in, s_own, s_oth, width):
  """sum(C_b * Z_b W Z_b^T) of each window on its fit (the pooled one, or its class's), L rows kept; the classes
  have more rows than positions (n_own 9 and n_oth 7 against width 5), or fewer (8: Gram space)."""
  win, z = windows(s_own, s_oth, width=width)
  n_own, L = win.own[1], 5.0
  z = z - np.concatenate([np.repeat(z[:, :n_own].mean(axis=1, keepdims=True), n_own, axis=1),
                          np.repeat(z[:, n_own:].mean(axis=1, keepdims=True), z.shape[1] - n_own, axis=1)], axis=1)
  p_B = np.full(B, float(width))
  if shared:
    fits = {None: gram.Fit(z, p_B)}
    P = fits[None].project(z)
  else:  # the own class's rows first: the IN class for IN targets
    own_fit, oth_fit = gram.Fit.pair(z[:, :n_own], z[:, n_own:], p_B)
    fits = {target_in: own_fit, not target_in: oth_fit}
    P = np.concatenate([own_fit.project(z[:, :n_own]), oth_fit.project(z[:, n_own:])], axis=1)
  got = balanced_removal._windows_zwz(fits, P, win, target_in, L)
  idx = win.idx()
  for own, cols, s in ((True, slice(0, s_own), s_own), (False, slice(s_own, None), s_oth)):
    if not s:
      assert got[own] == 0.0
      continue
    fit = fits[None] if shared else fits[target_in if own else not target_in]
    W = (fit.v * fit.lam[:, None, :]) @ np.swapaxes(fit.v, -1, -2)
    Z = np.take_along_axis(z[:, None], idx[:, :, cols, None], axis=2)  # [B, J, s, D]
    want = np.sum(woodbury.removal_matrix((s,), L) * (Z @ W[:, None] @ np.swapaxes(Z, -1, -2)), axis=(-2, -1))
    np.testing.assert_allclose(got[own], want, rtol=1e-12)
