"""PixelCNN++ in Flax NNX (Salimans et al. 2017; the official openai/pixel-cnn `pixel_cnn_pp/model.py` and `nn.py`).

The network maps an image x in [-1, 1] (levels rescaled, models/discretized_logistic.py) to P mixture parameters per
pixel such that pixel t (raster order t = row * W + col) sees only pixels before t. Two streams make that hold without
masks (Sec. 2.5): u, the down stream, sees only rows above; ul, the down-right stream, sees rows above and pixels to
the left on the same row. Their convolutions pad only above (and left), so an output never reads below (or right):

  down_shifted_conv      kernel (kh, kw): pad kh-1 rows on top, (kw-1)/2 columns on each side, VALID.
  down_right_shifted     kernel (kh, kw): pad kh-1 rows on top, kw-1 columns on the left, VALID.
  *_deconv (stride 2)    transposed convolution, then crop the rows below / columns outside, so output row r reads
                         only low-resolution row floor(r / 2) (whose content is already shifted).
  down_shift / right_shift  move a map one row down / one column right, zero-filled, so a pixel's own value is out.

Input: x with a channel of ones appended (distinguishes the image from the zero padding). First layer:
u = down_shift(down_conv_2x3(x)), ul = down_shift(down_conv_1x3(x)) + right_shift(down_right_conv_2x1(x)).
Gated ResNet block (Sec. 2.4), concat_elu(y) = elu([y, -y]) on channels, a the auxiliary (skip) input:

  c = conv(concat_elu(x)) + nin(concat_elu(a));   c = dropout(concat_elu(c));   [p, q] = conv(c);   x + p sigmoid(q).

Up pass: three resolutions (H, H/2, H/4) of nr_resnet blocks each, u-blocks without aux, ul-blocks with aux u,
stride-2 down_shifted (2x3) / down_right_shifted (2x2) convolutions between resolutions; every intermediate map is
kept. Down pass, consuming the kept maps in reverse (the skip connections): nr_resnet blocks at H/4, a stride-2
deconvolution, nr_resnet + 1 blocks at H/2, a deconvolution, nr_resnet + 1 blocks at H; u-blocks take aux = kept u,
ul-blocks aux = [u, kept ul]. Output: nin(elu(ul)) -> P = 10 K (RGB) or 3 K (greyscale) parameters per pixel; the
likelihood (discretized logistic mixture, RGB coupling) and its formulas are in models/discretized_logistic.py.

Parameters (two deliberate differences from the official code, otherwise the same): every convolution and nin is
weight-normalised, w = g v / |v| (norm per output channel), as published, but initialised plainly, not from data: v is
LeCun-normal, g = |v| (so w = v at init, as torch's weight_norm does) and biases are zero; the official init_scale
0.1 of each block's second convolution becomes g = 0.1 |v|, keeping the residual branches small at init as the
data-dependent init would. No Polyak averaging (a trainer's choice). `weight_norm=False` gives plain kernels.
Compute dtype (`PixelCNNConfig.dtype`, models/precision.py): every convolution computes in its input's dtype. In
bfloat16 the image enters as bfloat16, and so do both streams, every block's activations and the convolution
operands (the weight-normalised kernels are formed in float32, then rounded). The output nin returns the mixture
parameters in float32, from float32 sums (precision.float32_output), and the likelihood is float32.
Letters: B batch, H height, W width, C channels, F filters, P mixture parameters per pixel, T = H * W positions.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lira.errors import InputError
from models import discretized_logistic as dl
from models import precision


@dataclasses.dataclass(frozen=True)
class PixelCNNConfig:
  """PixelCNN++ settings; defaults are the official CIFAR-10 model (160 filters, 5 blocks per stage, 10 components)."""

  image_shape: tuple[int, int, int] = (32, 32, 3)  # (H, W, C); H and W divisible by 4, C 1 or 3
  num_levels: int = 256  # pixel levels 0..num_levels-1 (256 for CIFAR, 17 for sklearn digits)
  nr_resnet: int = 5  # gated ResNet blocks per stage of the up pass
  nr_filters: int = 160
  nr_logistic_mix: int = 10
  dropout_p: float = 0.5  # applied only with train=True
  weight_norm: bool = True
  dtype: str = "float32"  # compute dtype, "float32" or "bfloat16" (models/precision.py); parameters stay float32

  def __post_init__(self):
    precision.check(self.dtype, "PixelCNNConfig.dtype")
    object.__setattr__(self, "image_shape", tuple(int(n) for n in self.image_shape))  # JSON gives a list
    if len(self.image_shape) != 3:
      raise InputError(f"image_shape must be (H, W, C), got {self.image_shape}")
    H, W, C = self.image_shape
    if H <= 0 or W <= 0 or H % 4 or W % 4:
      raise InputError(f"image_shape {self.image_shape}: H and W must be positive multiples of 4 (two stride-2 stages)")
    dl.num_params(C, self.nr_logistic_mix)  # raises unless C is 1 or 3
    for name in ("num_levels", "nr_resnet", "nr_filters", "nr_logistic_mix"):
      if getattr(self, name) < (2 if name == "num_levels" else 1):
        raise InputError(f"{name} must be at least {2 if name == 'num_levels' else 1}, got {getattr(self, name)}")
    if not 0.0 <= self.dropout_p < 1.0:
      raise InputError(f"dropout_p must be in [0, 1), got {self.dropout_p}")

  @property
  def num_params(self):
    return dl.num_params(self.image_shape[2], self.nr_logistic_mix)


def check_images(images_BxHxWxC, config):
  """InputError unless images are integers shaped [B, H, W, C] of the config with levels in 0..num_levels-1."""
  images = np.asarray(images_BxHxWxC)
  if images.ndim != 4 or images.shape[1:] != config.image_shape:
    raise InputError(f"images shaped {images.shape} do not match image_shape {config.image_shape} (as [B, H, W, C])")
  if not np.issubdtype(images.dtype, np.integer):
    raise InputError(f"images must hold integer pixel levels, got dtype {images.dtype}")
  if images.size and (images.min() < 0 or images.max() >= config.num_levels):
    raise InputError(f"pixel levels span {images.min()}..{images.max()}, outside num_levels 0..{config.num_levels - 1}")


def concat_elu(x_BxHxWxF):
  """elu([x, -x]) on channels (the official resnet nonlinearity), from one expm1 per entry: where x > 0 the halves
  are (x, expm1(-x)), elsewhere (expm1(x), -x); values and gradients (also at 0) are jax.nn.elu's (tested), ~10%
  faster training steps on CPU than elu of the concatenation."""
  pos = x_BxHxWxF > 0
  e = jnp.expm1(jnp.where(pos, -x_BxHxWxF, x_BxHxWxF))
  return jnp.concatenate([jnp.where(pos, x_BxHxWxF, e), jnp.where(pos, e, -x_BxHxWxF)], axis=-1)


def down_shift(x_BxHxWxF):
  return jnp.pad(x_BxHxWxF[:, :-1], ((0, 0), (1, 0), (0, 0), (0, 0)))


def right_shift(x_BxHxWxF):
  return jnp.pad(x_BxHxWxF[:, :, :-1], ((0, 0), (0, 0), (1, 0), (0, 0)))


def mask_bits(keep_p):
  """Bits per mask entry: the fewest b in 1, 2, 4, 8, 16 with keep_p 2^b an integer (exact), else 32."""
  for b in (1, 2, 4, 8, 16):
    if float(keep_p * 2 ** b).is_integer():
      return b
  return 32


def dropout_keep(key, keep_p, shape):
  """Boolean mask, True with probability keep_p, from the fewest threefry bits: b-bit fields of jax.random.bits.

  A field u of b uniform bits keeps iff u < keep_p 2^b, exact when keep_p 2^b is an integer (b = 1 for the published
  p = 0.5: 32 entries per 32-bit draw, where jax.random.bernoulli spends a whole draw on each); otherwise b = 32 and
  the threshold round(keep_p 2^32) is within 2^-33 of keep_p. Threefry bits do not depend on vmap, so a model's masks
  are the same in any group.
  """
  b = mask_bits(keep_p)
  n = int(np.prod(shape))
  per_word = 32 // b
  words = jax.random.bits(key, (-(-n // per_word),), jnp.uint32)
  if b == 32:
    fields = words
  else:
    shifts = jnp.arange(per_word, dtype=jnp.uint32) * b
    fields = ((words[:, None] >> shifts) & jnp.uint32(2 ** b - 1)).reshape(-1)
  threshold = min(int(round(keep_p * 2.0 ** b)), 2 ** 32 - 1)
  return (fields[:n] < jnp.uint32(threshold)).reshape(shape)


DIMS = ("NHWC", "HWIO", "NHWC")


def transposed_conv(x_BxHxWxI, w_KhxKwxIxO, s):
  """Full stride-s transposed convolution, y[s r + i, s c + j] += x[r, c] w[i, j] (torch's ConvTranspose2d), shaped
  [B, s (H + dh), s (W + dw), O] with dh = (kh - 1) // s (the first s (H - 1) + kh rows are the full output).

  Sub-pixel form: output phase (p, q) = (row % s, col % s) at block (a, b) sums taps i = s d + p, j = s e + q of
  x[a - d, b - e], a stride-1 convolution of x with all s^2 phases as output channels, then depth-to-space. Same
  sums as the input-dilated convolution, whose weight gradient XLA's CPU backend runs on a slow generic path.
  In x's dtype.
  """
  kh, kw, I, O = w_KhxKwxIxO.shape
  B, H, W, _ = x_BxHxWxI.shape
  dh, dw = (kh - 1) // s, (kw - 1) // s
  w_KhxKwxIxO = w_KhxKwxIxO.astype(x_BxHxWxI.dtype)
  zero_IxO = jnp.zeros((I, O), w_KhxKwxIxO.dtype)

  def tap(i, j):  # kernel entry [a, b] of phase (p, q) holds tap (s (dh - a) + p, s (dw - b) + q), zero past the edge
    return w_KhxKwxIxO[i, j] if i < kh and j < kw else zero_IxO

  k = jnp.stack([jnp.stack([jnp.stack([jnp.stack([tap(s * (dh - a) + p, s * (dw - b) + q) for q in range(s)], axis=1)
                                       for p in range(s)], axis=1) for b in range(dw + 1)]) for a in range(dh + 1)])
  if dh == dw == 0:  # a 1 x 1 kernel is a matmul; as a convolution, vmapped and sharded over models, XLA's CPU SPMD
    y = x_BxHxWxI @ k.reshape(I, s * s * O)  # partitioner computed it wrongly (jax 0.10.2; the sharded test caught it)
  else:  # padded here, VALID below: with the padding inside the convolution XLA's CPU backend computes the weight
    # gradient as a reversed-kernel convolution on its slow generic path (8x slower at 16 x 16 x 32 -> 32 x 32 x 32)
    x = jnp.pad(x_BxHxWxI, ((0, 0), (dh, dh), (dw, dw), (0, 0)))
    y = jax.lax.conv_general_dilated(x, k.reshape(dh + 1, dw + 1, I, s * s * O), (1, 1), "VALID",
                                     dimension_numbers=DIMS)
  return y.reshape(B, H + dh, W + dw, s, s, O).transpose(0, 1, 3, 2, 4, 5).reshape(B, s * (H + dh), s * (W + dw), O)


class Conv(nnx.Module):
  """Weight-normalised convolution of one causal kind: "down", "down_right" (shifted, optionally transposed) or "nin".

  Kernel v_KhxKwxIxO: a plain convolution reads input (r + i, c + j) for tap (i, j) after padding; a transposed one
  adds input (r, c) times tap (i, j) to output (s r + i, s c + j) (torch's ConvTranspose2d convention).
  """

  def __init__(self, c_in, c_out, kernel_hw, kind, *, stride=1, transposed=False, init_scale=1.0,
               weight_norm=True, rngs: nnx.Rngs):
    if kind not in ("down", "down_right", "nin"):
      raise InputError(f"unknown conv kind {kind!r}")
    kh, kw = kernel_hw
    v = nnx.initializers.lecun_normal(in_axis=(0, 1, 2), out_axis=3)(rngs.params(), (kh, kw, c_in, c_out))
    norm_O = jnp.sqrt(jnp.sum(v ** 2, axis=(0, 1, 2)))
    self.kind, self.stride, self.transposed, self.weight_norm = kind, stride, transposed, weight_norm
    self.v = nnx.Param(v if weight_norm else init_scale * v)
    self.g = nnx.Param(init_scale * norm_O if weight_norm else jnp.ones(c_out))  # unused without weight norm
    self.b = nnx.Param(jnp.zeros(c_out))

  def kernel(self):
    v = self.v[...]
    if not self.weight_norm:
      return v
    return v * (self.g[...] / jnp.sqrt(jnp.sum(v ** 2, axis=(0, 1, 2))))

  def __call__(self, x_BxHxWxI, float32_out=False):
    """The convolution in x's dtype; with `float32_out` (a nin) a float32 result from float32 sums."""
    dtype = x_BxHxWxI.dtype
    w = self.kernel().astype(dtype)
    b = self.b[...] if float32_out else self.b[...].astype(dtype)
    kh, kw, _, _ = w.shape
    s = self.stride
    if self.kind == "nin":
      if float32_out and dtype != jnp.float32:
        return precision.float32_output(lambda x, v, p: jnp.matmul(x, v, preferred_element_type=p),
                                        x_BxHxWxI, w[0, 0]) + b
      return x_BxHxWxI @ w[0, 0] + b
    cols = ((kw - 1) // 2, (kw - 1) // 2) if self.kind == "down" else (kw - 1, 0)
    if self.transposed:
      H, W = x_BxHxWxI.shape[1:3]
      c0 = (kw - 1) // 2 if self.kind == "down" else 0
      return transposed_conv(x_BxHxWxI, w, s)[:, :H * s, c0:c0 + W * s] + b
    y = jax.lax.conv_general_dilated(x_BxHxWxI, w, (s, s), ((kh - 1, 0), cols), dimension_numbers=DIMS)
    return y + b


class GatedResnet(nnx.Module):
  """x + p sigmoid(q), [p, q] = conv(dropout(concat_elu(conv(concat_elu(x)) + nin(concat_elu(aux))))) (Sec. 2.4)."""

  def __init__(self, filters, kind, aux_filters, dropout_p, weight_norm, *, rngs: nnx.Rngs):
    F = filters
    kernel = (2, 3) if kind == "down" else (2, 2)
    self.dropout_p = dropout_p
    self.conv1 = Conv(2 * F, F, kernel, kind, weight_norm=weight_norm, rngs=rngs)
    self.nin_aux = Conv(2 * aux_filters, F, (1, 1), "nin", weight_norm=weight_norm, rngs=rngs) if aux_filters else None
    self.conv2 = Conv(2 * F, 2 * F, kernel, kind, init_scale=0.1, weight_norm=weight_norm, rngs=rngs)

  def __call__(self, x_BxHxWxF, aux=None, key=None):
    c_BxHxWxF = self.conv1(concat_elu(x_BxHxWxF))
    if aux is not None:
      c_BxHxWxF = c_BxHxWxF + self.nin_aux(concat_elu(aux))
    c_BxHxWx2F = concat_elu(c_BxHxWxF)
    if key is not None:  # inverted dropout, as tf.nn.dropout
      keep = dropout_keep(key, 1.0 - self.dropout_p, c_BxHxWx2F.shape)
      c_BxHxWx2F = jnp.where(keep, c_BxHxWx2F / (1.0 - self.dropout_p), 0.0)
    p, q = jnp.split(self.conv2(c_BxHxWx2F), 2, axis=-1)
    return x_BxHxWxF + p * jax.nn.sigmoid(q)


class PixelCNNPP(nnx.Module):
  """PixelCNN++: `__call__(images) -> params_BxHxWxP`, `per_position_loss(images) -> loss_BxT` (nats per pixel)."""

  def __init__(self, config: PixelCNNConfig, *, rngs: nnx.Rngs):
    self.config = config
    F, R, (_, _, C) = config.nr_filters, config.nr_resnet, config.image_shape
    wn = config.weight_norm

    def conv(c_in, c_out, kernel, kind, **kw):
      return Conv(c_in, c_out, kernel, kind, weight_norm=wn, rngs=rngs, **kw)

    def blocks(n, kind, aux):
      return nnx.List([GatedResnet(F, kind, aux, config.dropout_p, wn, rngs=rngs) for _ in range(n)])

    self.u_first = conv(C + 1, F, (2, 3), "down")
    self.ul_first_down = conv(C + 1, F, (1, 3), "down")
    self.ul_first_right = conv(C + 1, F, (2, 1), "down_right")
    self.up_u, self.up_ul = blocks(3 * R, "down", 0), blocks(3 * R, "down_right", F)
    self.downsample_u = nnx.List([conv(F, F, (2, 3), "down", stride=2) for _ in range(2)])
    self.downsample_ul = nnx.List([conv(F, F, (2, 2), "down_right", stride=2) for _ in range(2)])
    self.down_u, self.down_ul = blocks(3 * R + 2, "down", F), blocks(3 * R + 2, "down_right", 2 * F)
    self.upsample_u = nnx.List([conv(F, F, (2, 3), "down", stride=2, transposed=True) for _ in range(2)])
    self.upsample_ul = nnx.List([conv(F, F, (2, 2), "down_right", stride=2, transposed=True) for _ in range(2)])
    self.out = conv(F, config.num_params, (1, 1), "nin")

  def network(self, x_BxHxWxC, key=None):
    """Mixture parameters [B, H, W, P] from a float image in [-1, 1]; dropout in every block when key is given."""
    R = self.config.nr_resnet
    block_keys = iter(jax.random.split(key, 12 * R + 4)) if key is not None else None

    def next_key():
      return next(block_keys) if block_keys is not None else None

    ones_BxHxWx1 = jnp.ones(x_BxHxWxC.shape[:-1] + (1,), x_BxHxWxC.dtype)
    x_pad = jnp.concatenate([x_BxHxWxC, ones_BxHxWx1], axis=-1)
    u_list = [down_shift(self.u_first(x_pad))]
    ul_list = [down_shift(self.ul_first_down(x_pad)) + right_shift(self.ul_first_right(x_pad))]
    for i in range(3 * R):  # up pass
      if i and i % R == 0:
        u_list.append(self.downsample_u[i // R - 1](u_list[-1]))
        ul_list.append(self.downsample_ul[i // R - 1](ul_list[-1]))
      u_list.append(self.up_u[i](u_list[-1], key=next_key()))
      ul_list.append(self.up_ul[i](ul_list[-1], u_list[-1], key=next_key()))
    u, ul = u_list.pop(), ul_list.pop()
    for j in range(3 * R + 2):  # down pass: R blocks, then R + 1 after each upsampling
      if j in (R, 2 * R + 1):
        stage = 0 if j == R else 1
        u, ul = self.upsample_u[stage](u), self.upsample_ul[stage](ul)
      u = self.down_u[j](u, u_list.pop(), key=next_key())
      ul = self.down_ul[j](ul, jnp.concatenate([u, ul_list.pop()], axis=-1), key=next_key())
    assert not u_list and not ul_list
    return self.out(jax.nn.elu(ul), float32_out=True)

  def __call__(self, images_BxHxWxC, train=False, key=None):
    """Mixture parameters [B, H, W, P] of every pixel given the pixels before it; train=True needs a dropout key."""
    if tuple(images_BxHxWxC.shape[1:]) != self.config.image_shape:
      raise InputError(f"images shaped {tuple(images_BxHxWxC.shape)} do not match image_shape "
                       f"{self.config.image_shape}")
    dropout = train and self.config.dropout_p > 0
    if dropout and key is None:
      raise InputError("train=True with dropout_p > 0 needs a dropout key")
    x_BxHxWxC = dl.rescale(images_BxHxWxC, self.config.num_levels).astype(self.config.dtype)
    return self.network(x_BxHxWxC, key if dropout else None)

  def per_position_loss(self, images_BxHxWxC, train=False, key=None):
    """Negative log-likelihood in nats of each pixel (all channels), [B, T = H * W] in raster order, float32."""
    params_BxHxWxP = self(images_BxHxWxC, train=train, key=key)
    c = self.config
    nll_BxHxW = dl.pixel_nll(images_BxHxWxC, params_BxHxWxP, c.num_levels, c.nr_logistic_mix)
    return nll_BxHxW.reshape(nll_BxHxW.shape[0], -1).astype(jnp.float32)
