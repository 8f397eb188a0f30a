"""Figures of one image canary's per-pixel losses and covariances (lira/canary_maps.py; Rossi et al. 2025, Fig. 8)."""

import numpy as np
# matplotlib (~0.3 s to import) is imported inside the functions that draw: a command that draws nothing skips it

from lira import canary_maps

UNITS = {"loss": "nats", "logit": "logit"}
COV_LABELS = {"out": "OUT", "in": "IN", "shared": "shared (IN and OUT, each centred by its class mean)"}


def _image_axes(ax, image_shape):
  H, W, _ = image_shape
  ax.set_xlabel("column")
  ax.set_ylabel("row")
  if max(H, W) <= 16:  # small images: a tick per pixel; larger ones keep matplotlib's ticks
    ax.set_xticks(range(W))
    ax.set_yticks(range(H))
  ax.tick_params(labelsize=7)


def _show_canary(ax, image_HxWxC, num_levels):
  """Greyscale canaries in grey, RGB in colour, pixel levels 0..num_levels-1 mapped to black..white."""
  top = max(int(num_levels or 0) - 1, int(image_HxWxC.max()), 1)
  if image_HxWxC.shape[2] == 1:
    return ax.imshow(image_HxWxC[..., 0], cmap="gray", vmin=0, vmax=top, interpolation="nearest")
  ax.imshow(np.clip(image_HxWxC / top, 0.0, 1.0), interpolation="nearest")
  return None


def _mark(ax, pixel, image_shape):
  """Outline the chosen pixel (black and white, visible on every colour map)."""
  from matplotlib.patches import Rectangle
  r, c = divmod(pixel, image_shape[1])
  for color, lw in (("black", 2.6), ("white", 1.0)):
    ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor=color, lw=lw))


def _title(maps, M, image_shape, canary_note, run):
  H, W, C = image_shape
  lines = [run] if run else []
  lines += [f"Canary {maps.canary}{f' ({canary_note})' if canary_note else ''}, {H}x{W}x{C} image",
            f"M={M} models: {maps.n_in} IN, {maps.n_out} OUT; statistic={maps.statistic}"]
  return "\n".join(lines)


def plot_canary_maps(maps, image_HxWxC, image_shape, M, num_levels=None, canary_note=None, run=None):
  """The canary beside its mean IN and mean OUT per-pixel statistic and their difference IN - OUT (centred at 0);
  run: the title's first line (lira.reports.provenance.run_description)."""
  from matplotlib.figure import Figure
  unit = UNITS[maps.statistic]
  fig = Figure(figsize=(15.5, 4.0), layout="constrained")
  axes = fig.subplots(1, 4)
  fig.suptitle(_title(maps, M, image_shape, canary_note, run), fontsize=10)
  grey = _show_canary(axes[0], image_HxWxC, num_levels)
  if grey is not None:
    fig.colorbar(grey, ax=axes[0], shrink=0.8, label="pixel level")
  axes[0].set_title(f"canary {maps.canary}" + (f" ({num_levels} levels)" if num_levels else ""), fontsize=9)
  means = [canary_maps.to_grid(v, image_shape) for v in (maps.mean_in_T, maps.mean_out_T)]
  # One scale for IN and OUT, so equal colours mean equal losses.
  lo, hi = min(float(m.min()) for m in means), max(float(m.max()) for m in means)
  for ax, grid, name, n in zip(axes[1:3], means, ("IN", "OUT"), (maps.n_in, maps.n_out)):
    im = ax.imshow(grid, cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
    ax.set_title(f"mean {name} {maps.statistic} ({n} models)", fontsize=9)
  fig.colorbar(im, ax=list(axes[1:3]), shrink=0.8, label=f"mean per-pixel {maps.statistic} ({unit})")
  diff = canary_maps.to_grid(maps.difference_T, image_shape)
  vmax = float(np.abs(diff).max()) or 1.0
  im = axes[3].imshow(diff, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
  lower = "IN models lose less" if maps.statistic == "loss" else "IN models predict better"
  axes[3].set_title(f"difference IN - OUT (mean {float(diff.mean()):+.3g} {unit})", fontsize=9)
  fig.colorbar(im, ax=axes[3], shrink=0.8,
               label=f"IN - OUT ({unit}); {'blue' if maps.statistic == 'loss' else 'red'}: {lower}")
  for ax in axes:
    _image_axes(ax, image_shape)
  return fig


def plot_pixel_covariance(maps, image_HxWxC, image_shape, M, num_levels=None, canary_note=None, run=None):
  """One pixel's covariance and correlation with every pixel of the canary, laid out on the image grid; run: the
  title's first line (lira.reports.provenance.run_description)."""
  from matplotlib.figure import Figure
  unit = UNITS[maps.statistic]
  r, c = divmod(maps.pixel, image_shape[1])
  fig = Figure(figsize=(12.0, 4.4), layout="constrained")
  axes = fig.subplots(1, 3)
  fig.suptitle(f"{_title(maps, M, image_shape, canary_note, run)}\n{COV_LABELS[maps.cov_class]} covariance (MLE) of "
               f"pixel {maps.pixel} (row {r}, column {c}, outlined) with every pixel", fontsize=10)
  _show_canary(axes[0], image_HxWxC, num_levels)
  axes[0].set_title(f"canary {maps.canary}, pixel ({r}, {c})", fontsize=9)
  cov = canary_maps.to_grid(maps.cov_row_T, image_shape)
  others = np.delete(maps.cov_row_T, maps.pixel)
  # The pixel's own variance usually dwarfs its covariances: scale by the others, and say the variance in the title.
  vmax = float(np.abs(others).max()) if others.size and np.abs(others).max() > 0 else float(abs(cov[r, c])) or 1.0
  var = float(cov[r, c])
  im = axes[1].imshow(cov, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
  axes[1].set_title(f"covariance row (own variance {var:.3g} {unit}\u00b2"
                    f"{', off scale' if var > vmax else ''})", fontsize=9)
  fig.colorbar(im, ax=axes[1], shrink=0.8, label=f"covariance ({unit}\u00b2)",
               extend="max" if var > vmax else "neither")
  corr = canary_maps.to_grid(maps.corr_row_T, image_shape)
  cmap = _with_bad("RdBu_r")
  im = axes[2].imshow(np.ma.masked_invalid(corr), cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
  nan_note = ", grey: zero variance" if np.isnan(corr).any() else ""
  axes[2].set_title(f"correlation row{nan_note}", fontsize=9)
  fig.colorbar(im, ax=axes[2], shrink=0.8, label="correlation (unitless)")
  for ax in axes:
    _mark(ax, maps.pixel, image_shape)
    _image_axes(ax, image_shape)
  return fig


def _with_bad(name):
  """A colour map that draws NaN (no correlation defined) in grey."""
  import matplotlib
  return matplotlib.colormaps[name].with_extremes(bad="0.6")


def heatmap_labels(maps):
  """Keyword arguments that put the canary's counts and units on lira.reports.cov_plots.plot_covariance_heatmap."""
  return {"counts": {"in": maps.n_in, "out": maps.n_out}, "unit": f"{UNITS[maps.statistic]}\u00b2"}

