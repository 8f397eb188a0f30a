"""Discretized logistic mixture likelihood of PixelCNN++ (Salimans et al. 2017, Sec. 2.1-2.2), for L pixel levels.

Levels l in 0..L-1 are rescaled to x = 2 l / (L - 1) - 1 in [-1, 1], so every bin has half-width h = 1 / (L - 1)
(L = 256: x = l / 127.5 - 1, as the official code). A pixel's C channels share one mixture of K components with
weights pi = softmax(logits). Within component k, channel c is a logistic with mean m_ck and scale
s_ck = exp(max(log_s_ck, -7)); for RGB the means are coupled to the observed earlier channels (Sec. 2.2):

  m_red = mu_r,   m_green = mu_g + a * x_red,   m_blue = mu_b + b * x_red + g * x_green,   a, b, g = tanh(raw).

With sigma the logistic cdf, u_+ = (x - m + h) / s and u_- = (x - m - h) / s, a channel's log-probability is

  l = 0:      log sigma(u_+)                                    (bin extends to -inf)
  l = L - 1:  log(1 - sigma(u_-)) = -softplus(u_-)               (bin extends to +inf)
  otherwise:  log(sigma(u_+) - sigma(u_-))                       if that probability exceeds 1e-5,
              log pdf((x - m) / s) - log s + log(2 h)            else (the pdf at the bin centre times the bin width)

and the pixel's negative log-likelihood (nats) is -log sum_k pi_k prod_c p_ck, a log-sum-exp over components.
A well-predicted pixel has p = sum_k pi_k prod_c p_ck within ~1e-7 of 1, where a float32 log-sum-exp keeps only
the rounding error of 1 (negative or zero losses; 12% of the pixels of a trained digits model were below 1e-6
nats). So below log 2 nats the NLL is taken from the complement instead, -log(1 - q) with
q = 1 - p = sum_k pi_k (1 - prod_c p_ck) and 1 - prod_c p_c = sum_c (prod_{c' < c} p_c') (1 - p_c), each 1 - p_c
from the logistic's other tail (level 0: sigma(-u_+); level L - 1: sigma(u_-); interior: sigma(-u_+) + sigma(u_-);
tiny branch: 1 - p). No term cancels, so the NLL keeps float32 relative precision down to the smallest normal
float and is never negative.
These are exactly the branches of the official discretized_mix_logistic_loss. One difference of evaluation, not of
value: the official code forms sigma(u_+) - sigma(u_-) directly, whose float32 cancellation error is ~1e-7 absolute;
here log(sigma(u_+) - sigma(u_-)) = log sigma(u_+) + log sigma(-u_-) + log(1 - exp(u_- - u_+)), which has no
cancellation, so the 1e-5 switch and the interior values are accurate in float32 too. Because the tiny-probability
branch approximates bins below 1e-5, the levels' probabilities sum to 1 only up to that approximated mass (as in the
official model); bins above 1e-5 are exact.

Parameter layout per pixel (P numbers; the official layout for RGB): K logits, then for each channel c in turn
K means, K log-scales and (RGB only) K raw coupling coefficients. RGB: P = 10 K (coefficient slots of red, green,
blue hold a, b, g). Greyscale: P = 3 K (logits, means, log-scales).
Letters: B batch, H height, W width, C channels, K mixture components, P parameters per pixel.
"""

import jax
import jax.numpy as jnp

from lira.errors import InputError

LOG_SCALE_MIN = -7.0  # the official clamp of log-scales
TINY_PROB = 1e-5  # below this an interior bin's probability is replaced by the pdf at its centre (official)


def num_params(channels, num_mix):
  """P, the mixture parameters per pixel: 10 K for RGB, 3 K for greyscale."""
  if channels not in (1, 3):
    raise InputError(f"image channels must be 1 (greyscale) or 3 (RGB), got {channels}")
  return num_mix * (10 if channels == 3 else 3)


def rescale(levels, num_levels):
  """Integer levels 0..L-1 -> float32 x = 2 l / (L - 1) - 1 in [-1, 1]."""
  return jnp.asarray(levels, jnp.float32) * (2.0 / (num_levels - 1)) - 1.0


def unpack(params_xP, channels, num_mix):
  """Split [..., P] into logits [..., K], means and clamped log-scales [..., C, K], RGB coefficients [..., 3, K]."""
  K = num_mix
  if params_xP.shape[-1] != num_params(channels, K):
    raise InputError(f"mixture parameters have {params_xP.shape[-1]} entries per pixel; "
                     f"{channels} channels and {K} components need {num_params(channels, K)}")
  logits_xK = params_xP[..., :K]
  per_channel = 3 if channels == 3 else 2
  rest_xCxJ = params_xP[..., K:].reshape(params_xP.shape[:-1] + (channels, per_channel * K))
  means_xCxK = rest_xCxJ[..., :K]
  log_scales_xCxK = jnp.maximum(rest_xCxJ[..., K:2 * K], LOG_SCALE_MIN)
  coeffs_x3xK = jnp.tanh(rest_xCxJ[..., 2 * K:]) if channels == 3 else None
  return logits_xK, means_xCxK, log_scales_xCxK, coeffs_x3xK


def coupled_means(means_xCxK, coeffs_x3xK, x_xC):
  """Means after the RGB coupling (Sec. 2.2): green shifted by a x_red, blue by b x_red + g x_green."""
  if coeffs_x3xK is None:
    return means_xCxK
  r_x1, g_x1 = x_xC[..., 0:1], x_xC[..., 1:2]
  m_green = means_xCxK[..., 1, :] + coeffs_x3xK[..., 0, :] * r_x1
  m_blue = means_xCxK[..., 2, :] + coeffs_x3xK[..., 1, :] * r_x1 + coeffs_x3xK[..., 2, :] * g_x1
  return jnp.stack([means_xCxK[..., 0, :], m_green, m_blue], axis=-2)


def channel_log_probs(levels_xC, params_xP, num_levels, num_mix):
  """Log mixture weights [..., K] and each component's log-probability of each observed channel [..., C, K]."""
  log_pi_xK, lp_xCxK, _ = _channel_log_probs_and_complements(levels_xC, params_xP, num_levels, num_mix)
  return log_pi_xK, lp_xCxK


def _channel_log_probs_and_complements(levels_xC, params_xP, num_levels, num_mix):
  """channel_log_probs and log(1 - p_ck) [..., C, K], each from its own tail (no 1 - p cancellation)."""
  C = levels_xC.shape[-1]
  logits_xK, means_xCxK, log_s_xCxK, coeffs_x3xK = unpack(params_xP, C, num_mix)
  x_xC = rescale(levels_xC, num_levels)
  centred_xCxK = x_xC[..., None] - coupled_means(means_xCxK, coeffs_x3xK, x_xC)
  inv_s_xCxK = jnp.exp(-log_s_xCxK)
  half = 1.0 / (num_levels - 1)
  plus_in = inv_s_xCxK * (centred_xCxK + half)
  min_in = inv_s_xCxK * (centred_xCxK - half)
  log_cdf_plus = jax.nn.log_sigmoid(plus_in)  # level 0: mass of (-inf, x + h]
  log_sf_plus = jax.nn.log_sigmoid(-plus_in)  # its complement: mass of (x + h, inf)
  log_one_minus_cdf_min = -jax.nn.softplus(min_in)  # level L-1: mass of [x - h, +inf)
  log_cdf_min = jax.nn.log_sigmoid(min_in)  # its complement: mass of (-inf, x - h)
  # log(sigma(b) - sigma(a)) = log sigma(b) + log sigma(-a) + log(1 - e^(a - b)), with a - b = -2 h / s exactly.
  log_delta = log_cdf_plus + jax.nn.log_sigmoid(-min_in) + jnp.log(-jnp.expm1(-2.0 * half * inv_s_xCxK))
  mid_in = inv_s_xCxK * centred_xCxK
  log_pdf_mid = mid_in - log_s_xCxK - 2.0 * jax.nn.softplus(mid_in)
  exact = log_delta > jnp.log(TINY_PROB)
  interior = jnp.where(exact, log_delta, log_pdf_mid + jnp.log(2.0 * half))
  # Complement of an interior bin: both outer tails when exact; 1 - p of the tiny-branch value otherwise (its
  # argument clipped below the switch so the branch not taken has finite gradients).
  tiny_lp = jnp.minimum(interior, jnp.log(TINY_PROB))
  interior_c = jnp.where(exact, jnp.logaddexp(log_sf_plus, log_cdf_min), jnp.log(-jnp.expm1(tiny_lp)))
  level_xCx1 = jnp.asarray(levels_xC)[..., None]
  is_low, is_high = level_xCx1 == 0, level_xCx1 == num_levels - 1
  lp_xCxK = jnp.where(is_low, log_cdf_plus, jnp.where(is_high, log_one_minus_cdf_min, interior))
  lq_xCxK = jnp.where(is_low, log_sf_plus, jnp.where(is_high, log_cdf_min, interior_c))
  return jax.nn.log_softmax(logits_xK, axis=-1), lp_xCxK, lq_xCxK


def pixel_nll(levels_xC, params_xP, num_levels, num_mix):
  """Negative log-likelihood in nats of every pixel (all its channels): -log sum_k pi_k prod_c p_ck, shape [...].

  Below log 2 nats from the complement q = 1 - p (module docstring), with float32 relative precision; >= 0 always.
  """
  log_pi_xK, lp_xCxK, lq_xCxK = _channel_log_probs_and_complements(levels_xC, params_xP, num_levels, num_mix)
  nll_lse = -jax.nn.logsumexp(log_pi_xK + lp_xCxK.sum(axis=-2), axis=-1)
  # log(1 - prod_c p_c) = log sum_c exp(sum_{c' < c} log p_c' + log(1 - p_c))
  before_xCxK = jnp.concatenate([jnp.zeros_like(lp_xCxK[..., :1, :]), jnp.cumsum(lp_xCxK[..., :-1, :], axis=-2)],
                                axis=-2)
  log_q_xK = jax.nn.logsumexp(before_xCxK + lq_xCxK, axis=-2)
  log_q = jax.nn.logsumexp(log_pi_xK + log_q_xK, axis=-1)
  small = log_q < jnp.log(0.5)
  nll_small = -jnp.log1p(-jnp.exp(jnp.where(small, log_q, jnp.log(0.25))))  # branch not taken: finite gradients
  return jnp.where(small, nll_small, nll_lse)
