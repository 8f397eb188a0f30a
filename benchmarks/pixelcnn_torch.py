"""PyTorch twin of models/pixelcnn_pp.py (same layers, weight norm, likelihood): the speed peer and a parity check.

Layer for layer the network of models/pixelcnn_pp.py (whose docstring states the architecture), in torch's native
NCHW layout and kernels: conv weights [O, I, kh, kw], transposed [I, O, kh, kw], each weight-normalised per output
channel on every forward pass as the JAX model does. `load_nnx_weights` copies a JAX model's weights given as a flat
{dotted name: array} dict (names as in the NNX state, e.g. "down_ul.3.conv2.v"), so both give the same per-pixel
losses. Needs only torch and numpy; nothing here imports the seqlira packages.
Letters: B batch, H height, W width, C channels, F filters, P mixture parameters per pixel, K components.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

LOG_SCALE_MIN = -7.0
TINY_PROB = 1e-5


def concat_elu(x_BxFxHxW):
  return F.elu(torch.cat([x_BxFxHxW, -x_BxFxHxW], dim=1))


def down_shift(x_BxFxHxW):
  return F.pad(x_BxFxHxW[:, :, :-1], (0, 0, 1, 0))


def right_shift(x_BxFxHxW):
  return F.pad(x_BxFxHxW[:, :, :, :-1], (1, 0, 0, 0))


class Conv(torch.nn.Module):
  """Weight-normalised "down" / "down_right" shifted convolution (optionally transposed) or 1x1 "nin"."""

  def __init__(self, c_in, c_out, kernel_hw, kind, stride=1, transposed=False, init_scale=1.0):
    super().__init__()
    kh, kw = kernel_hw
    self.kind, self.stride, self.transposed, self.kernel_hw = kind, stride, transposed, kernel_hw
    shape = (c_in, c_out, kh, kw) if transposed else (c_out, c_in, kh, kw)
    v = torch.randn(shape) / math.sqrt(c_in * kh * kw)
    self.v = torch.nn.Parameter(v)
    self.g = torch.nn.Parameter(init_scale * v.pow(2).sum(self._norm_dims()).sqrt())
    self.b = torch.nn.Parameter(torch.zeros(c_out))

  def _norm_dims(self):
    return (0, 2, 3) if self.transposed else (1, 2, 3)

  def kernel(self):
    scale_O = self.g / self.v.pow(2).sum(self._norm_dims()).sqrt()
    return self.v * (scale_O[None, :, None, None] if self.transposed else scale_O[:, None, None, None])

  def forward(self, x_BxIxHxW):
    w = self.kernel()
    (kh, kw), s = self.kernel_hw, self.stride
    if self.kind == "nin":
      return F.conv2d(x_BxIxHxW, w, self.b)
    if not self.transposed:
      left, right = ((kw - 1) // 2, (kw - 1) // 2) if self.kind == "down" else (kw - 1, 0)
      return F.conv2d(F.pad(x_BxIxHxW, (left, right, kh - 1, 0)), w, self.b, stride=s)
    H, W = x_BxIxHxW.shape[2:]
    y = F.conv_transpose2d(x_BxIxHxW, w, self.b, stride=s)  # (H - 1) s + kh rows, cropped as the official code
    c0 = (kw - 1) // 2 if self.kind == "down" else 0
    assert y.shape[2] >= H * s and y.shape[3] >= c0 + W * s
    return y[:, :, :H * s, c0:c0 + W * s]


class GatedResnet(torch.nn.Module):
  def __init__(self, filters, kind, aux_filters, dropout_p):
    super().__init__()
    kernel = (2, 3) if kind == "down" else (2, 2)
    self.dropout_p = dropout_p
    self.conv1 = Conv(2 * filters, filters, kernel, kind)
    self.nin_aux = Conv(2 * aux_filters, filters, (1, 1), "nin") if aux_filters else None
    self.conv2 = Conv(2 * filters, 2 * filters, kernel, kind, init_scale=0.1)

  def forward(self, x, aux=None):
    c = self.conv1(concat_elu(x))
    if aux is not None:
      c = c + self.nin_aux(concat_elu(aux))
    c = F.dropout(concat_elu(c), self.dropout_p, training=self.training)
    p, q = self.conv2(c).chunk(2, dim=1)
    return x + p * torch.sigmoid(q)


class PixelCNNPP(torch.nn.Module):
  """`forward(images_BxHxWxC) -> params_BxHxWxP`; `per_position_loss(images) -> loss_BxT` (nats); train() = dropout."""

  def __init__(self, image_shape, num_levels=256, nr_resnet=5, nr_filters=160, nr_logistic_mix=10, dropout_p=0.5):
    super().__init__()
    H, W, C = image_shape
    if C not in (1, 3) or H % 4 or W % 4:
      raise ValueError(f"image_shape {image_shape}: C must be 1 or 3, H and W multiples of 4")
    self.image_shape, self.num_levels, self.nr_resnet, self.num_mix = tuple(image_shape), num_levels, nr_resnet, \
        nr_logistic_mix
    Fl, R, P = nr_filters, nr_resnet, nr_logistic_mix * (10 if C == 3 else 3)

    def blocks(n, kind, aux):
      return torch.nn.ModuleList([GatedResnet(Fl, kind, aux, dropout_p) for _ in range(n)])

    self.u_first = Conv(C + 1, Fl, (2, 3), "down")
    self.ul_first_down = Conv(C + 1, Fl, (1, 3), "down")
    self.ul_first_right = Conv(C + 1, Fl, (2, 1), "down_right")
    self.up_u, self.up_ul = blocks(3 * R, "down", 0), blocks(3 * R, "down_right", Fl)
    self.downsample_u = torch.nn.ModuleList([Conv(Fl, Fl, (2, 3), "down", stride=2) for _ in range(2)])
    self.downsample_ul = torch.nn.ModuleList([Conv(Fl, Fl, (2, 2), "down_right", stride=2) for _ in range(2)])
    self.down_u, self.down_ul = blocks(3 * R + 2, "down", Fl), blocks(3 * R + 2, "down_right", 2 * Fl)
    self.upsample_u = torch.nn.ModuleList([Conv(Fl, Fl, (2, 3), "down", 2, True) for _ in range(2)])
    self.upsample_ul = torch.nn.ModuleList([Conv(Fl, Fl, (2, 2), "down_right", 2, True) for _ in range(2)])
    self.out = Conv(Fl, P, (1, 1), "nin")

  def rescale(self, images_BxHxWxC):
    return images_BxHxWxC.float() * (2.0 / (self.num_levels - 1)) - 1.0

  def forward(self, images_BxHxWxC):
    R = self.nr_resnet
    x = self.rescale(images_BxHxWxC).permute(0, 3, 1, 2)
    x_pad = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
    u_list = [down_shift(self.u_first(x_pad))]
    ul_list = [down_shift(self.ul_first_down(x_pad)) + right_shift(self.ul_first_right(x_pad))]
    for i in range(3 * R):
      if i and i % R == 0:
        u_list.append(self.downsample_u[i // R - 1](u_list[-1]))
        ul_list.append(self.downsample_ul[i // R - 1](ul_list[-1]))
      u_list.append(self.up_u[i](u_list[-1]))
      ul_list.append(self.up_ul[i](ul_list[-1], u_list[-1]))
    u, ul = u_list.pop(), ul_list.pop()
    for j in range(3 * R + 2):
      if j in (R, 2 * R + 1):
        stage = 0 if j == R else 1
        u, ul = self.upsample_u[stage](u), self.upsample_ul[stage](ul)
      u = self.down_u[j](u, u_list.pop())
      ul = self.down_ul[j](ul, torch.cat([u, ul_list.pop()], dim=1))
    return self.out(F.elu(ul)).permute(0, 2, 3, 1)

  def per_position_loss(self, images_BxHxWxC):
    params = self(images_BxHxWxC)
    nll_BxHxW = pixel_nll(images_BxHxWxC, params, self.num_levels, self.num_mix)
    return nll_BxHxW.reshape(nll_BxHxW.shape[0], -1)


def pixel_nll(levels_xC, params_xP, num_levels, K):
  """Discretized logistic mixture NLL per pixel (the formulas of models/discretized_logistic.py)."""
  C = levels_xC.shape[-1]
  logits_xK = params_xP[..., :K]
  rest = params_xP[..., K:].reshape(params_xP.shape[:-1] + (C, -1))
  means_xCxK = rest[..., :K]
  log_s_xCxK = rest[..., K:2 * K].clamp(min=LOG_SCALE_MIN)
  x_xC = levels_xC.float() * (2.0 / (num_levels - 1)) - 1.0
  if C == 3:
    coeffs_x3xK = torch.tanh(rest[..., 2 * K:])
    r, g = x_xC[..., 0:1], x_xC[..., 1:2]
    means_xCxK = torch.stack([means_xCxK[..., 0, :],
                              means_xCxK[..., 1, :] + coeffs_x3xK[..., 0, :] * r,
                              means_xCxK[..., 2, :] + coeffs_x3xK[..., 1, :] * r + coeffs_x3xK[..., 2, :] * g], dim=-2)
  centred = x_xC[..., None] - means_xCxK
  inv_s = torch.exp(-log_s_xCxK)
  half = 1.0 / (num_levels - 1)
  plus_in, min_in = inv_s * (centred + half), inv_s * (centred - half)
  log_cdf_plus = F.logsigmoid(plus_in)
  log_one_minus_cdf_min = -F.softplus(min_in)
  log_delta = log_cdf_plus + F.logsigmoid(-min_in) + torch.log(-torch.expm1(-2.0 * half * inv_s))
  mid_in = inv_s * centred
  log_pdf_mid = mid_in - log_s_xCxK - 2.0 * F.softplus(mid_in)
  interior = torch.where(log_delta > math.log(TINY_PROB), log_delta, log_pdf_mid + math.log(2.0 * half))
  level = levels_xC[..., None]
  lp_xCxK = torch.where(level == 0, log_cdf_plus, torch.where(level == num_levels - 1, log_one_minus_cdf_min, interior))
  return -torch.logsumexp(torch.log_softmax(logits_xK, dim=-1) + lp_xCxK.sum(-2), dim=-1)


def load_nnx_weights(model, flat):
  """Copy JAX weights {dotted NNX name: array in JAX layout [kh, kw, I, O]} into the twin, asserting every shape."""
  own = dict(model.named_parameters())
  if set(own) != set(flat):
    raise ValueError(f"names differ: only torch {sorted(set(own) - set(flat))[:5]}, "
                     f"only jax {sorted(set(flat) - set(own))[:5]}")
  with torch.no_grad():
    for name, array in flat.items():
      array = np.asarray(array, np.float32)
      if name.endswith(".v"):  # JAX [kh, kw, I, O] -> torch [O, I, kh, kw] or, transposed, [I, O, kh, kw]
        module = model.get_submodule(name[:-2])
        array = array.transpose(2, 3, 0, 1) if module.transposed else array.transpose(3, 2, 0, 1)
      if tuple(own[name].shape) != array.shape:
        raise ValueError(f"{name}: torch shape {tuple(own[name].shape)}, jax gives {array.shape}")
      own[name].copy_(torch.from_numpy(np.ascontiguousarray(array)))
