"""PixelCNN++: the discretized logistic mixture against scipy, normalisation, autoregressive order, dropout, greyscale.

The likelihood reference is a float64 loop over pixels and components on scipy.stats.logistic (bin edges, the two
edge bins, the official pdf-at-centre branch below 1e-5) that shares no code with models/discretized_logistic.py.
Models are tiny (8 x 8 images, 8 filters, 1 block per stage, 3 components) and every jitted function is compiled once.
"""

import functools
import importlib.util
import itertools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from flax import nnx

from lira.errors import InputError
from models import discretized_logistic as dl
from models.pixelcnn_pp import PixelCNNConfig, PixelCNNPP, check_images

K = 3
EPS32 = float(np.finfo(np.float32).eps)
RGB = PixelCNNConfig(image_shape=(8, 8, 3), num_levels=256, nr_resnet=1, nr_filters=8, nr_logistic_mix=K,
                     dropout_p=0.5)
GREY = PixelCNNConfig(image_shape=(8, 8, 1), num_levels=17, nr_resnet=1, nr_filters=8, nr_logistic_mix=K,
                      dropout_p=0.5)


# ---------------------------------------------------------------- float64 reference


def component_means(rest_CxJ, x_C, K, k):
  """Component k's channel means, RGB ones coupled to the observed earlier channels (float64)."""
  m_C = rest_CxJ[:, k].copy()
  if len(x_C) == 3:
    a, b, g = np.tanh(rest_CxJ[:, 2 * K + k])
    m_C[1] += a * x_C[0]
    m_C[2] += b * x_C[0] + g * x_C[1]
  return m_C


def reference_channel_probs(levels_C, params_P, L, K):
  """Per channel and component: exact bin probability, whether the tiny branch applies, log-prob used, max |u|."""
  C = len(levels_C)
  params_P = np.asarray(params_P, np.float64)
  logits_K = params_P[:K]
  rest_CxJ = params_P[K:].reshape(C, -1)
  h = 1.0 / (L - 1)
  x_C = 2.0 * np.asarray(levels_C) / (L - 1) - 1.0
  prob_CxK, tiny_CxK, lp_CxK = np.zeros((C, K)), np.zeros((C, K), bool), np.zeros((C, K))
  max_u = 0.0
  for k in range(K):
    m_C = component_means(rest_CxJ, x_C, K, k)
    for c in range(C):
      s = np.exp(max(rest_CxJ[c, K + k], -7.0))
      lo, hi = x_C[c] - h, x_C[c] + h
      max_u = max(max_u, abs(lo - m_C[c]) / s, abs(hi - m_C[c]) / s)
      if levels_C[c] == 0:
        prob_CxK[c, k] = scipy.stats.logistic.cdf(hi, m_C[c], s)
        lp_CxK[c, k] = scipy.stats.logistic.logcdf(hi, m_C[c], s)
      elif levels_C[c] == L - 1:
        prob_CxK[c, k] = scipy.stats.logistic.sf(lo, m_C[c], s)
        lp_CxK[c, k] = scipy.stats.logistic.logsf(lo, m_C[c], s)
      else:
        # Both cdfs taken on the side of the mean where they are small, so the float64 difference keeps its digits.
        if x_C[c] > m_C[c]:
          prob_CxK[c, k] = scipy.stats.logistic.sf(lo, m_C[c], s) - scipy.stats.logistic.sf(hi, m_C[c], s)
        else:
          prob_CxK[c, k] = scipy.stats.logistic.cdf(hi, m_C[c], s) - scipy.stats.logistic.cdf(lo, m_C[c], s)
        tiny_CxK[c, k] = prob_CxK[c, k] <= dl.TINY_PROB
        lp_CxK[c, k] = (scipy.stats.logistic.logpdf(x_C[c], m_C[c], s) + np.log(2 * h) if tiny_CxK[c, k]
                        else np.log(prob_CxK[c, k]))
  log_pi_K = logits_K - scipy.special.logsumexp(logits_K)
  return log_pi_K, prob_CxK, tiny_CxK, lp_CxK, max_u


def reference_nll(levels_C, params_P, L, K):
  log_pi_K, _, _, lp_CxK, max_u = reference_channel_probs(levels_C, params_P, L, K)
  return -scipy.special.logsumexp(log_pi_K + lp_CxK.sum(axis=0)), max_u


def tolerance(max_u, C):
  # float32 rounds each logistic argument u = (x - m +- h) / s by a few eps * |u|; every log-probability term
  # (log sigma, softplus, log pdf) has slope at most 1 in u, C channels add, and log-sum-exp over components is
  # 1-Lipschitz. 8 eps (1 + |u|) per channel covers the ~4 roundings of u and of the log terms with margin.
  return 8 * C * EPS32 * (1.0 + max_u)


def random_params(rng, n, C, K, log_scale_range):
  """Random mixture parameters [n, P]: logits N(0, 2^2), means U(-1.2, 1.2), log-scales uniform, coeffs N(0, 1)."""
  params = np.zeros((n, dl.num_params(C, K)))
  params[:, :K] = 2 * rng.normal(size=(n, K))
  rest = np.zeros((n, C, 3 if C == 3 else 2, K))
  rest[:, :, 0] = rng.uniform(-1.2, 1.2, (n, C, K))
  rest[:, :, 1] = rng.uniform(*log_scale_range, (n, C, K))
  if C == 3:
    rest[:, :, 2] = rng.normal(size=(n, C, K))
  params[:, K:] = rest.reshape(n, -1)
  return params.astype(np.float32)


nll_jit = jax.jit(dl.pixel_nll, static_argnums=(2, 3))


# ---------------------------------------------------------------- the likelihood alone


@pytest.mark.parametrize("C, L", [(3, 5), (1, 17)])
def test_level_probabilities_sum_to_one(C, L):
  """Every pixel's probabilities over all L^C level combinations (RGB: through the coupling) sum to 1."""
  rng = np.random.default_rng(0)
  n = 6
  # Scales >= e^-1 keep every interior bin above the 1e-5 tiny-probability switch (asserted below), where the
  # official pdf-at-centre approximation would break exact normalisation.
  params_NxP = random_params(rng, n, C, K, (-1.0, 0.5))
  combos_MxC = np.array(list(itertools.product(range(L), repeat=C)))
  M = len(combos_MxC)
  nll_NxM = np.asarray(nll_jit(np.tile(combos_MxC, (n, 1)), np.repeat(params_NxP, M, axis=0), L, K)).reshape(n, M)
  for i in range(n):
    refs = [reference_channel_probs(levels, params_NxP[i], L, K) for levels in combos_MxC]
    assert not any(r[2].any() for r in refs), "precondition: no bin in the tiny-probability branch"
    total = np.exp(-nll_NxM[i].astype(np.float64)).sum()
    # Each term's relative float32 error is at most tolerance(max |u|), so the sum of terms that add to 1 is within it.
    assert abs(total - 1.0) <= tolerance(max(r[4] for r in refs), C), (i, total)


@pytest.mark.parametrize("C, L", [(3, 256), (3, 7), (1, 17)])
def test_pixel_nll_matches_scipy(C, L):
  """Per-pixel NLL (nats) equals the float64 scipy computation, with edge bins, the clamp and the tiny branch hit."""
  rng = np.random.default_rng(1)
  n = 400
  params_NxP = random_params(rng, n, C, K, (-8.0, 1.0))  # below -7 exercises the clamp; small scales the tiny branch
  levels_NxC = rng.integers(0, L, (n, C))
  levels_NxC[:60] = rng.choice([0, L - 1], (60, C))  # edge bins on every channel for the first rows
  got_N = np.asarray(nll_jit(levels_NxC, params_NxP, L, K))
  tiny = edges = 0
  for i in range(n):
    ref, max_u = reference_nll(levels_NxC[i], params_NxP[i], L, K)
    _, prob_CxK, tiny_CxK, _, _ = reference_channel_probs(levels_NxC[i], params_NxP[i], L, K)
    interior_C = (levels_NxC[i] > 0) & (levels_NxC[i] < L - 1)
    # precondition: float32 and float64 pick the same branch (no interior probability within 1% of the switch)
    assert not (interior_C[:, None] & (np.abs(prob_CxK / dl.TINY_PROB - 1) < 1e-2)).any()
    tiny += int(tiny_CxK.any())
    edges += int((~interior_C).any())
    assert got_N[i] >= 0 and abs(got_N[i] - ref) <= tolerance(max_u, C), (i, got_N[i], ref)
  assert tiny > 10 and edges >= 60  # the tiny-probability branch and the edge bins were exercised


def reference_small_nll(levels_C, params_P, L, K):
  """float64 NLL of a well-predicted pixel from the complements: -log(1 - q), q = sum_k pi_k (1 - prod_c p_ck).

  Each 1 - p_ck is the logistic mass outside the bin, taken from scipy's tails (sf / cdf are accurate where they
  are tiny), and 1 - prod_c p_c = sum_c prod_{c' < c} p_c' (1 - p_c); nothing cancels, so q keeps float64
  relative precision however small it is (a log-sum-exp of log p would keep only its absolute precision)."""
  log_pi_K, prob_CxK, tiny_CxK, _, max_u = reference_channel_probs(levels_C, params_P, L, K)
  assert not tiny_CxK.any(), "precondition: a well-predicted pixel has no bin in the tiny branch"
  C = len(levels_C)
  params_P = np.asarray(params_P, np.float64)
  rest_CxJ = params_P[K:].reshape(C, -1)
  h = 1.0 / (L - 1)
  x_C = 2.0 * np.asarray(levels_C) / (L - 1) - 1.0
  q = 0.0
  for k in range(K):
    m_C = component_means(rest_CxJ, x_C, K, k)
    q_k, p_before = 0.0, 1.0
    for c in range(C):
      s = np.exp(max(rest_CxJ[c, K + k], -7.0))
      below = scipy.stats.logistic.cdf(x_C[c] - h, m_C[c], s) if levels_C[c] > 0 else 0.0
      above = scipy.stats.logistic.sf(x_C[c] + h, m_C[c], s) if levels_C[c] < L - 1 else 0.0
      q_k += p_before * (below + above)
      p_before *= prob_CxK[c, k]
    q += np.exp(log_pi_K[k]) * q_k
  return -np.log1p(-q), max_u


@pytest.mark.parametrize("C, L", [(1, 17), (3, 256)])
def test_pixel_nll_keeps_relative_precision_for_well_predicted_pixels(C, L):
  """Pixels predicted with probability 1 - 1e-30 .. 1 - 1e-2: the float32 NLL is >= 0 and within a few float32
  eps of the float64 value relative to itself (a plain log-sum-exp returns 0 or -6e-8 for most of them)."""
  rng = np.random.default_rng(2)
  n = 300
  levels_NxC = rng.integers(0, L, (n, C))
  levels_NxC[: n // 3] = 0
  levels_NxC[n // 3: 2 * n // 3] = L - 1
  x_NxC = 2.0 * levels_NxC / (L - 1) - 1.0
  h = 1.0 / (L - 1)
  interior_NxCx1 = ((levels_NxC > 0) & (levels_NxC < L - 1))[..., None]
  # Every component puts its bin u0 ~ U(3, 65) logistic scales from its mean (the same u0 for a pixel's components
  # and channels, so the pixel's 1 - p is about e^-u0, from 5e-2 down to 6e-29): edge bins by a mean u0 scales
  # inside the edge, interior bins by a scale of h / u0 (centred means). The scale clamp e^-7 caps an interior
  # u0 at h e^7 (68 for L = 17, 4.3 for L = 256, whose interior pixels stay poorly predicted).
  u0_Nx1x1 = rng.uniform(3.0, 65.0, (n, 1, 1))
  s_NxCxK = np.where(interior_NxCx1, np.maximum(h / u0_Nx1x1, np.exp(-7.0)), np.exp(rng.uniform(-7.0, -3.0, (n, C, K))))
  log_s_NxCxK = np.log(s_NxCxK)
  m_NxCxK = np.where((levels_NxC == 0)[..., None], x_NxC[..., None] + h - u0_Nx1x1 * s_NxCxK,
                     np.where((levels_NxC == L - 1)[..., None], x_NxC[..., None] - h + u0_Nx1x1 * s_NxCxK,
                              x_NxC[..., None] + rng.uniform(-0.2, 0.2, (n, C, K)) * s_NxCxK))
  raw_NxCxK = rng.normal(size=(n, C, K))
  if C == 3:  # coupled means: store mu so that mu + coupling lands on the chosen mean
    a, b, g = np.tanh(raw_NxCxK[:, 0]), np.tanh(raw_NxCxK[:, 1]), np.tanh(raw_NxCxK[:, 2])
    m_NxCxK[:, 1] -= a * x_NxC[:, [0]]
    m_NxCxK[:, 2] -= b * x_NxC[:, [0]] + g * x_NxC[:, [1]]
  rest = np.stack([m_NxCxK, log_s_NxCxK] + ([raw_NxCxK] if C == 3 else []), axis=2)  # [n, C, J, K]
  params_NxP = np.concatenate([2 * rng.normal(size=(n, K)), rest.reshape(n, -1)], axis=1).astype(np.float32)
  got_N = np.asarray(nll_jit(levels_NxC, params_NxP, L, K)).astype(np.float64)
  refs = [reference_small_nll(levels_NxC[i], params_NxP[i], L, K) for i in range(n)]
  ref_N = np.array([r[0] for r in refs])
  assert ref_N.min() < 1e-25 and ref_N.max() > 1e-3 and (ref_N < 1e-7).mean() > 0.4  # the range the test is about
  assert (got_N >= 0).all()
  # Relative error: every log-domain term v (log sigma of u, log pi, their sums and log-sum-exps) is rounded to a
  # few eps (1 + |v|) absolutely, i.e. q and -log(1 - q) ~ q to that much relatively; |v| <= max |u| + |log q|
  # (+ the log-weights, |logits| <= ~8). 16 C eps (10 + max |u| + |log ref|) covers that with margin.
  for i in range(n):
    bound = 16 * C * EPS32 * (10 + refs[i][1] + abs(np.log(ref_N[i])))
    assert abs(got_N[i] - ref_N[i]) <= bound * ref_N[i], (i, got_N[i], ref_N[i])


def test_pixel_nll_gradients_are_finite_at_extremes():
  """Certain pixels (p = 1 in float32), impossible ones and the tiny branch: the NLL and its gradient are finite."""
  L = 17
  levels_NxC = np.array([[0], [L - 1], [8], [0], [8]])
  params_NxP = np.zeros((5, dl.num_params(1, K)), np.float32)
  params_NxP[:, K:2 * K] = [[-5.0] * K, [5.0] * K, [0.0] * K, [5.0] * K, [0.7] * K]  # means
  params_NxP[:, 2 * K:] = -9.0  # log-scales below the clamp
  nll_N, grad_NxP = jax.vmap(jax.value_and_grad(dl.pixel_nll, argnums=1), (0, 0, None, None))(
      levels_NxC, params_NxP, L, K)
  assert np.isfinite(nll_N).all() and np.isfinite(grad_NxP).all()
  # edge pixels 4,452 scales inside their bin: q underflows to 0; the interior one 68.5 scales: 2 e^-68.5
  assert (nll_N[:2] == 0).all() and 0 < nll_N[2] < 1e-29 and (nll_N[3:] > 10).all()


def test_unpack_rejects_wrong_parameter_count():
  with pytest.raises(InputError, match="need 30"):
    dl.unpack(jnp.zeros((2, 29)), 3, 3)
  with pytest.raises(InputError, match="1 .greyscale. or 3"):
    dl.num_params(2, 3)


# ---------------------------------------------------------------- the model


def random_state(config, seed=0):
  """Random weights far from init (nonzero biases, gains around 1), drawn in numpy.

  Not PixelCNNPP's own init: its ~170 tensors cost one random-number compilation each on the CPU (seconds in all),
  which these structural tests do not need.
  """
  graphdef, abstract = nnx.split(nnx.eval_shape(lambda: PixelCNNPP(config, rngs=nnx.Rngs(0))))
  rng = np.random.default_rng(seed)

  def draw(path, leaf):
    name = path[-2].key
    if name == "v":
      return (rng.normal(size=leaf.shape) / np.sqrt(np.prod(leaf.shape[:-1]))).astype(np.float32)
    if name == "g":
      return rng.uniform(0.5, 1.5, leaf.shape).astype(np.float32)
    return (0.1 * rng.normal(size=leaf.shape)).astype(np.float32)

  return graphdef, jax.tree_util.tree_map_with_path(draw, abstract)


@functools.lru_cache(maxsize=None)
def model_fns(config):
  """Jitted functions of one model (random weights), compiled once per config."""
  graphdef, state = random_state(config)

  def network(state, x_BxHxWxC):
    return nnx.merge(graphdef, state).network(x_BxHxWxC)

  def call_and_loss(state, images):
    model = nnx.merge(graphdef, state)
    return model(images), model.per_position_loss(images)

  def loss(state, images, train, key):
    return nnx.merge(graphdef, state).per_position_loss(images, train=train, key=key)

  return dict(state=state, network=network, call_and_loss=jax.jit(call_and_loss),
              loss=jax.jit(loss, static_argnums=2))


def images(config, B=4, seed=0):  # one batch size everywhere: one compilation per config
  return np.random.default_rng(seed).integers(0, config.num_levels, (B,) + config.image_shape)


def test_autoregressive_order():
  """d params(pixel t) / d x(pixel s) is exactly 0 for all s >= t (every t), nonzero for the left and upper pixel."""
  config = RGB  # greyscale differs only in the first layer's input channels; test_greyscale_model checks its order
  fns = model_fns(config)
  H, W, C = config.image_shape
  T = H * W
  rng = np.random.default_rng(2)
  proj_HxWxP = jnp.asarray(rng.normal(size=(H, W, config.num_params)), jnp.float32)
  x_1xHxWxC = jnp.asarray(rng.uniform(-1, 1, (1, H, W, C)), jnp.float32)

  def projected(x):  # one scalar per pixel: a random projection of its P parameters
    return (fns["network"](fns["state"], x)[0] * proj_HxWxP).sum(-1).reshape(T)

  jac_TxTxC = np.asarray(jax.jit(jax.jacrev(projected))(x_1xHxWxC)).reshape(T, T, C)
  for t in range(T):
    assert (jac_TxTxC[t, t:] == 0).all(), f"pixel {t} depends on pixels {np.flatnonzero(jac_TxTxC[t, t:].any(-1)) + t}"
    r, c = divmod(t, W)
    if c:
      assert (jac_TxTxC[t, t - 1] != 0).all(), t
    if r:
      assert (jac_TxTxC[t, t - W] != 0).all(), t


def test_within_pixel_channel_order():
  """Red's distribution ignores the pixel's own green and blue, green's ignores blue; green's depends on red."""
  config = RGB
  fns = model_fns(config)
  r, c = 3, 5
  base = images(config, B=1, seed=3)[0]
  variants = [base.copy() for _ in range(4)]
  variants[1][r, c, 1:] = (base[r, c, 1:] + 100) % 256  # green and blue changed
  variants[2][r, c, 2] = (base[r, c, 2] + 100) % 256  # blue changed
  variants[3][r, c, 0] = (base[r, c, 0] + 100) % 256  # red changed
  batch = np.stack(variants)
  params_VxP = fns["call_and_loss"](fns["state"], batch)[0][:, r, c]
  channel_log_probs = jax.jit(dl.channel_log_probs, static_argnums=(2, 3))
  log_pi_VxK, lp_VxCxK = channel_log_probs(batch[:, r, c], params_VxP, config.num_levels, K)
  log_red_V = np.asarray(jax.nn.logsumexp(log_pi_VxK + lp_VxCxK[:, 0], axis=-1))
  log_red_green_V = np.asarray(jax.nn.logsumexp(log_pi_VxK + lp_VxCxK[:, :2].sum(1), axis=-1))
  # Exact equality: the network never reads pixel (r, c) for its own parameters, and red's term reads no channel.
  assert log_red_V[1] == log_red_V[0]
  assert log_red_green_V[2] == log_red_green_V[0]
  # Not vacuous: the same green level has another conditional probability once red changes (the coupling is live).
  log_green_given_red_V = log_red_green_V - log_red_V
  assert abs(log_green_given_red_V[3] - log_green_given_red_V[0]) > 1e-3


@pytest.mark.parametrize("config", [RGB, GREY], ids=["rgb", "grey"])
def test_per_position_loss_is_the_raster_order_nll(config):
  """per_position_loss[b, r * W + c] is the scipy NLL of pixel (r, c) under the parameters __call__ returns."""
  fns = model_fns(config)
  H, W, C = config.image_shape
  x = images(config, seed=4)
  params_BxHxWxP, loss_BxT = map(np.asarray, fns["call_and_loss"](fns["state"], x))
  assert loss_BxT.shape == (4, H * W) and loss_BxT.dtype == np.float32
  for b, t in itertools.product(range(2), range(0, H * W, 5)):
    ref, max_u = reference_nll(x[b, t // W, t % W], params_BxHxWxP[b, t // W, t % W], config.num_levels, K)
    assert abs(loss_BxT[b, t] - ref) <= tolerance(max_u, C), (b, t)


def test_dropout_only_in_training():
  fns = model_fns(RGB)
  x = images(RGB, seed=5)
  state, loss = fns["state"], fns["loss"]
  key = functools.partial(jax.random.key, impl="rbg")  # threefry's bits for 32 blocks cost ~9 s more to compile here
  eval_a = np.asarray(fns["call_and_loss"](state, x)[1])
  np.testing.assert_array_equal(eval_a, np.asarray(fns["call_and_loss"](state, x)[1]))
  k1 = np.asarray(loss(state, x, True, key(1)))
  np.testing.assert_array_equal(k1, np.asarray(loss(state, x, True, key(1))))
  assert not np.array_equal(k1, eval_a)
  assert not np.array_equal(k1, np.asarray(loss(state, x, True, key(2))))
  assert np.isfinite(k1).all()
  with pytest.raises(InputError, match="dropout key"):
    loss(state, x, True, None)


def test_greyscale_model():
  """Shapes, finite positive losses, and order: changing pixel t leaves every parameter of pixels <= t unchanged."""
  fns = model_fns(GREY)
  base = np.repeat(images(GREY, B=1, seed=6), 4, axis=0)
  x = base.copy()
  for b, t in enumerate((0, 7, 8, 27)):  # first pixel, end of the first row, start of the second, an inner one
    x[b, t // 8, t % 8, 0] = (x[b, t // 8, t % 8, 0] + 8) % 17
  params_BxHxWxP, loss_BxT = map(np.asarray, fns["call_and_loss"](fns["state"], x))
  assert params_BxHxWxP.shape == (4, 8, 8, 3 * K)
  assert np.isfinite(loss_BxT).all() and (loss_BxT > 0).all()
  base_BxTxP = np.asarray(fns["call_and_loss"](fns["state"], base)[0])
  base_BxTxP, params_BxTxP = base_BxTxP.reshape(4, 64, -1), params_BxHxWxP.reshape(4, 64, -1)
  for b, t in enumerate((0, 7, 8, 27)):
    np.testing.assert_array_equal(params_BxTxP[b, :t + 1], base_BxTxP[b, :t + 1])
    assert (params_BxTxP[b, t + 1:] != base_BxTxP[b, t + 1:]).any()  # not vacuous: later pixels do see it


def test_bad_input():
  with pytest.raises(InputError, match="multiples of 4"):
    PixelCNNConfig(image_shape=(6, 8, 3))
  with pytest.raises(InputError, match="1 .greyscale. or 3"):
    PixelCNNConfig(image_shape=(8, 8, 2))
  with pytest.raises(InputError, match="num_levels"):
    PixelCNNConfig(num_levels=1)
  with pytest.raises(InputError, match="dropout_p"):
    PixelCNNConfig(dropout_p=1.0)
  assert PixelCNNConfig(image_shape=[8, 8, 1]).image_shape == (8, 8, 1)
  with pytest.raises(InputError, match="outside num_levels"):
    check_images(np.full((1, 8, 8, 1), 17), GREY)
  with pytest.raises(InputError, match="do not match image_shape"):
    check_images(np.zeros((1, 8, 8, 3), int), GREY)
  with pytest.raises(InputError, match="integer"):
    check_images(np.zeros((1, 8, 8, 1)), GREY)
  check_images(np.full((1, 8, 8, 1), 16), GREY)
  fns = model_fns(GREY)
  with pytest.raises(InputError, match="do not match image_shape"):
    fns["call_and_loss"](fns["state"], np.zeros((4, 4, 8, 1), int))


# ---------------------------------------------------------------- the PyTorch twin (the speed peer)


@pytest.mark.parametrize("config", [RGB, GREY], ids=["rgb", "grey"])
def test_torch_twin_gives_the_same_losses(config):
  """benchmarks/pixelcnn_torch.py with the same weights gives the same parameters and per-pixel losses."""
  torch = pytest.importorskip("torch")
  path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "pixelcnn_torch.py"
  spec = importlib.util.spec_from_file_location("pixelcnn_torch", path)
  twin_module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(twin_module)
  fns = model_fns(config)
  flat = {".".join(str(k.key) for k in p[:-1]): np.asarray(leaf)
          for p, leaf in jax.tree_util.tree_leaves_with_path(fns["state"])}
  twin = twin_module.PixelCNNPP(config.image_shape, config.num_levels, config.nr_resnet, config.nr_filters, K,
                                config.dropout_p).eval()
  twin_module.load_nnx_weights(twin, flat)
  x = images(config, seed=8)
  params_BxHxWxP, loss_BxT = map(np.asarray, fns["call_and_loss"](fns["state"], x))
  with torch.no_grad():
    twin_params = twin(torch.from_numpy(x)).numpy()
    twin_loss = twin.per_position_loss(torch.from_numpy(x)).numpy()
  # float32 sums taken in another order (other conv kernels): each of the ~40 layers rounds at a few eps of its
  # O(1) activations, ~40 * 4 * 6e-8 ~ 1e-5 of the largest parameter in all (seen: ~5e-7 of it).
  scale = float(np.abs(params_BxHxWxP).max())
  np.testing.assert_allclose(twin_params, params_BxHxWxP, rtol=0, atol=1e-5 * scale)
  # Each channel's log-probability moves by at most (1 / s) |d mean| + (1 + |u|) |d log s|; with |u| bounded by the
  # same 1 / s here (|x - m| <= ~2), C channels move the NLL by at most C (2 + 2 / s) times the parameter error.
  log_s = params_BxHxWxP[..., K:].reshape(x.shape + (-1,))[..., K:2 * K]
  inv_s = float(np.exp(-np.maximum(log_s, -7.0)).max())
  np.testing.assert_allclose(twin_loss, loss_BxT, rtol=0, atol=1e-5 * scale * config.image_shape[2] * (2 + 2 * inv_s))
