"""Per-pixel views of one image canary's shadow-model losses (Rossi et al. 2025, App. .3, Fig. 8, as image maps).

Position t of a canary's loss vector is pixel (r, c) = divmod(t, W) (raster order, all C channels of the pixel in
one loss), so a length-T vector is laid out on the image as `values_T.reshape(H, W)`. With s_m the statistic of
model m at the canary (loss in nats by default), IN = the models that trained on it:
  mean_in[t]  = mean over IN models of s_m[t],  mean_out[t] likewise;  difference = mean_in - mean_out
  cov[p, t]   = (1/n) sum_m (s_m[p] - mean[p]) (s_m[t] - mean[t])      (MLE, the project's covariance)
  corr[p, t]  = cov[p, t] / sqrt(cov[p, p] cov[t, t])                  (NaN where a variance is 0)
over the OUT models (class "out"), the IN models ("in"), or both with each row centred by its own class mean
("shared", n = n_in + n_out, as the shared LiRA fit). The default canary is the one whose IN models lose least
against its OUT models: the largest gap = mean over pixels of (mean_out - mean_in) of the loss.
"""

import dataclasses

import numpy as np

from lira import checks
from lira import transforms
from lira.errors import InputError

COV_CLASSES = ("out", "in", "shared")
_SHAPE_FIELDS = (("model", "image_shape"), ("data", "image_shape"))
_LEVEL_FIELDS = (("model", "num_levels"), ("data", "num_levels"))


def _lookup(run_config, fields):
  """{'model.image_shape': value, ...} for each of the fields present in the run config."""
  found = {}
  for section, key in fields:
    block = run_config.get(section) if isinstance(run_config, dict) else None
    if isinstance(block, dict) and block.get(key) is not None:
      found[f"{section}.{key}"] = block[key]
  return found


def image_shape_of(run_config):
  """(H, W, C) of an image run from config.json's model.image_shape or data.image_shape; InputError otherwise."""
  found = _lookup(run_config, _SHAPE_FIELDS)
  if not found:
    raise InputError("not an image run: config.json has no model.image_shape or data.image_shape "
                     "([H, W, C]); the per-pixel maps need the image shape")
  shapes = {name: tuple(value) if isinstance(value, (list, tuple)) else value for name, value in found.items()}
  if len(set(shapes.values())) > 1:
    raise InputError(f"config.json disagrees with itself on the image shape: {shapes}")
  name, shape = next(iter(shapes.items()))
  if (not isinstance(shape, tuple) or len(shape) != 3 or not all(isinstance(n, int) and n > 0 for n in shape)
      or shape[2] not in (1, 3)):
    raise InputError(f"config.json {name} must be [H, W, C] with positive integers and C 1 or 3, got {found[name]}")
  return shape


def image_shape_or_none(run_config):
  """(H, W, C) of an image run, None for a run whose config names no image shape (errors in one still raise)."""
  return image_shape_of(run_config) if _lookup(run_config, _SHAPE_FIELDS) else None


def num_levels_of(run_config):
  """Pixel levels of an image run (model.num_levels or data.num_levels), or None if the config has none."""
  found = _lookup(run_config, _LEVEL_FIELDS)
  return int(next(iter(found.values()))) if found else None


def check_positions(T, image_shape):
  """InputError unless the losses' T equals H * W (one loss per pixel, all channels together)."""
  H, W, C = image_shape
  if T != H * W:
    raise InputError(f"losses.npy has T={T} positions per canary, but config.json's image shape {list(image_shape)} "
                     f"has H*W = {H * W} pixels")


def to_grid(values_T, image_shape):
  """A per-position vector laid out on the image: position t = r * W + c goes to row r, column c."""
  H, W, _ = image_shape
  values_T = np.asarray(values_T)
  if values_T.shape != (H * W,):
    raise InputError(f"expected {H * W} per-pixel values for an {H}x{W} image, got shape {values_T.shape}")
  return values_T.reshape(H, W)


def canary_images(canaries, image_shape):
  """The canaries as integer images [N, H, W, C]; canaries.npy may hold [N, H, W, C], [N, H*W*C] or ([N, H*W], C=1)."""
  H, W, C = image_shape
  canaries = np.asarray(canaries)
  if not np.issubdtype(canaries.dtype, np.integer):
    raise InputError(f"canaries.npy: expected integer pixel levels, got dtype {canaries.dtype}")
  if canaries.ndim == 4 and canaries.shape[1:] == (H, W, C):
    return canaries
  if canaries.ndim == 2 and canaries.shape[1] == H * W * C:
    return canaries.reshape(-1, H, W, C)
  raise InputError(f"canaries.npy: shape {canaries.shape} is neither [N, H, W, C] nor [N, H*W*C] for the image "
                   f"shape {[H, W, C]}")


def loss_gaps(loss_MxNxT, keep_MxN, chunk=256, progress=False):
  """Per canary, mean over positions of (mean OUT loss - mean IN loss), in nats; > 0: IN models lose less."""
  keep_MxN = np.asarray(keep_MxN, bool)
  N = keep_MxN.shape[1]
  gap_N = np.empty(N)
  from tqdm import tqdm
  for lo in tqdm(range(0, N, chunk), desc="IN-vs-OUT gaps", disable=not progress):  # a memory-mapped losses.npy
    # is read a slice of canaries at a time
    loss_MxBxT = np.asarray(loss_MxNxT[:, lo:lo + chunk], np.float64)
    k_MxB = keep_MxN[:, lo:lo + chunk]
    per_model_MxB = loss_MxBxT.mean(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):  # a canary without IN or OUT models gets NaN
      mean_in = (per_model_MxB * k_MxB).sum(0) / k_MxB.sum(0)
      mean_out = (per_model_MxB * ~k_MxB).sum(0) / (~k_MxB).sum(0)
    gap_N[lo:lo + chunk] = mean_out - mean_in
  return gap_N


def default_canary(gap_N):
  """The canary with the largest IN-vs-OUT loss gap (ties: the lowest index); InputError if no gap is defined."""
  gap_N = np.asarray(gap_N, np.float64)
  if not np.isfinite(gap_N).any():
    raise InputError("no canary has both IN and OUT models, so no IN-vs-OUT loss gap is defined")
  return int(np.nanargmax(gap_N))


def parse_pixel(pixel, image_shape):
  """Raster index t of a pixel given as 't', 'r,c' or None (the centre pixel); InputError if outside the image."""
  H, W, _ = image_shape
  if pixel is None or str(pixel).strip() == "":
    return (H // 2) * W + W // 2
  parts = str(pixel).replace(" ", "").split(",")
  if len(parts) not in (1, 2) or not all(p.lstrip("-").isdigit() for p in parts):
    raise InputError(f"--pixel must be a raster index t or 'row,column', got {pixel!r}")
  if len(parts) == 1:
    t = int(parts[0])
    if not 0 <= t < H * W:
      raise InputError(f"--pixel={t} is outside [0, H*W={H * W}) for the {H}x{W} image")
    return t
  r, c = (int(p) for p in parts)
  if not (0 <= r < H and 0 <= c < W):
    raise InputError(f"--pixel={r},{c} is outside the {H}x{W} image (rows 0..{H - 1}, columns 0..{W - 1})")
  return r * W + c


@dataclasses.dataclass(frozen=True)
class CanaryMaps:
  """Everything the pictures of one canary show; per-position arrays over T = H * W, float64."""
  canary: int
  pixel: int
  cov_class: str
  statistic: str
  n_in: int
  n_out: int
  mean_in_T: np.ndarray
  mean_out_T: np.ndarray
  cov_row_T: np.ndarray  # cov[pixel, :] of the chosen class
  corr_row_T: np.ndarray
  cov_TxT: np.ndarray  # the chosen class's full covariance (for the heatmap of the first positions)
  cov_in_TxT: np.ndarray
  cov_out_TxT: np.ndarray

  @property
  def difference_T(self):
    return self.mean_in_T - self.mean_out_T


def _mle_cov(xc_SxT):
  return xc_SxT.T @ xc_SxT / xc_SxT.shape[0]


def canary_maps(loss_MxNxT, keep_MxN, canary, pixel, *, statistic="loss", cov_class="out"):
  """The per-pixel means, covariances and the chosen pixel's covariance and correlation rows of one canary."""
  keep_MxN = np.asarray(keep_MxN, bool)
  M, N = keep_MxN.shape
  T = np.shape(loss_MxNxT)[2]
  if not 0 <= canary < N:
    raise InputError(f"--canary={canary} is outside [0, N={N})")
  if not 0 <= pixel < T:
    raise InputError(f"pixel {pixel} is outside [0, T={T})")
  if cov_class not in COV_CLASSES:
    raise InputError(f"cov_class must be one of {COV_CLASSES}, got {cov_class!r}")
  keep_M = keep_MxN[:, canary]
  n_in, n_out = int(keep_M.sum()), int((~keep_M).sum())
  if n_in < 2 or n_out < 2:
    raise InputError(f"canary {canary} has {n_in} IN and {n_out} OUT models; the maps need at least 2 of each")
  loss_MxT = np.asarray(loss_MxNxT[:, canary])
  checks.check_losses(loss_MxT[:, None, :], canary_ids=[canary])
  stat_MxT = transforms.to_statistic(loss_MxT, statistic)
  mean_in_T, mean_out_T = stat_MxT[keep_M].mean(0), stat_MxT[~keep_M].mean(0)
  xc_in, xc_out = stat_MxT[keep_M] - mean_in_T, stat_MxT[~keep_M] - mean_out_T
  cov_in, cov_out = _mle_cov(xc_in), _mle_cov(xc_out)
  cov = {"in": cov_in, "out": cov_out, "shared": _mle_cov(np.concatenate([xc_in, xc_out]))}[cov_class]
  var_T = np.diag(cov)
  with np.errstate(invalid="ignore", divide="ignore"):  # a pixel every model predicts alike has no correlation
    corr_row_T = np.where((var_T > 0) & (var_T[pixel] > 0), cov[pixel] / np.sqrt(var_T * var_T[pixel]), np.nan)
  return CanaryMaps(canary, pixel, cov_class, statistic, n_in, n_out, mean_in_T, mean_out_T, cov[pixel].copy(),
                    corr_row_T, cov, cov_in, cov_out)
