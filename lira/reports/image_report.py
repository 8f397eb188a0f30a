"""The pictures of one image canary written into a run folder (experiments/image_maps.py; docs/outputs.md).

image_maps.json (schema "seqlira.image_maps"): the block every report opens with (lira.reports.provenance.header), then
image_shape, num_levels, canary, canary_gap (mean OUT - mean IN loss, nats) and its rank, pixel and
pixel_row_column, n_in, n_out, pixel_variance, largest_gaps (the ten canaries with the largest gaps) and files.
"""

import dataclasses
import os

import numpy as np

from lira.reports import cov_plots
from lira import canary_maps
from lira.reports import image_plots
from lira import checks
from lira.reports import provenance
import run_folder
from lira.errors import InputError, MissingFileError
from lira.options import Options, option
from lira import transforms


@dataclasses.dataclass(frozen=True)
class ImageMapsOptions(Options):
  """The settings of experiments.image_maps: its flags (experiments/option_flags.py) and the defaults its file names
  leave out."""

  PUBLIC_NAME = "lira.reports.image_report.ImageMapsOptions"

  canary: int | None = option(None, "Canary to draw; default the one with the largest IN-vs-OUT mean loss gap.",
                              low=0, integer=True)  # and below the run's N, checked once the run is read
  pixel: str | None = option(None, "Pixel whose covariance row is drawn: raster index t = row * W + column, or "
                             "'row,column'; default the image centre.")
  cov_class: str = option("out", "Models the covariance row is estimated from.", choices=canary_maps.COV_CLASSES)
  statistic: str = option("loss", "Per-pixel statistic drawn (loss: nats).", choices=transforms.STATISTICS)
  max_positions: int = option(64, "Positions shown in the covariance heatmap (the paper's Fig. 8: 64).", low=2,
                              integer=True)


def load_image_run(run_dir):
  """(run, image shape, pixel levels or None, canary images [N, H, W, C]); InputError for a non-image run."""
  run = run_folder.load_run(run_dir, mmap=True)
  shape = canary_maps.image_shape_of(run.config)
  canary_maps.check_positions(run.loss_MxNxT.shape[2], shape)
  path = os.path.join(run_dir, run_folder.names.CANARIES)
  if not os.path.exists(path):
    raise MissingFileError(f"run folder {run_dir!r} has no canaries.npy (the canary images)")
  images = canary_maps.canary_images(run_folder.load_npy(path), shape)
  if len(images) != run.loss_MxNxT.shape[1]:
    raise InputError(f"{path}: {len(images)} canaries, but losses.npy has N={run.loss_MxNxT.shape[1]}")
  return run, shape, canary_maps.num_levels_of(run.config), images


def gap_words(gap):
  """A canary's gap (mean OUT loss - mean IN loss over its pixels) said with its direction, so that it reads the same
  as the IN - OUT difference panel (a gap of +0.2 is that panel's mean of -0.2 nats)."""
  if not np.isfinite(gap):
    return "IN-vs-OUT mean loss gap undefined"
  return f"IN models' mean loss {abs(gap):.3g} nats {'below' if gap >= 0 else 'above'} the OUT models'"


def output_paths(out_dir, settings):
  """Each file's path, named by the settings that change it."""
  pick = lambda *keys: {k: settings[k] for k in keys}  # noqa: E731
  defaults = ImageMapsOptions.defaults()
  return {
      "canary_maps.png": provenance.report_path(out_dir, "canary_maps", "png", pick("canary", "statistic"), defaults),
      "pixel_covariance.png": provenance.report_path(
          out_dir, "pixel_covariance", "png", pick("canary", "pixel", "cov_class", "statistic"), defaults),
      "covariance_heatmap.png": provenance.report_path(
          out_dir, "covariance_heatmap", "png", pick("canary", "statistic", "max_positions"), defaults),
      "image_maps.json": provenance.report_path(out_dir, "image_maps", "json", settings, defaults),
  }


def write_image_maps(run_dir, out_dir=None, *, canary=ImageMapsOptions.canary, pixel=ImageMapsOptions.pixel,
                     cov_class=ImageMapsOptions.cov_class, statistic=ImageMapsOptions.statistic,
                     max_positions=ImageMapsOptions.max_positions, command="image_maps", progress=False):
  """Check everything, then draw one canary's maps into out_dir (default RUN_DIR/image_maps); returns (paths, line).

  canary None: the one with the largest IN-vs-OUT mean loss gap; pixel: a raster index, 'row,column' or None
  (the image centre). The printed line says which canary and pixel were drawn and why.
  """
  run, shape, levels, images = load_image_run(run_dir)
  M, N, T = run.loss_MxNxT.shape
  if canary is not None and not 0 <= canary < N:
    raise InputError(f"--canary={canary} is outside [0, N={N})")
  t = canary_maps.parse_pixel(pixel, shape)
  if max_positions < 2:
    raise InputError(f"--max_positions must be >= 2, got {max_positions}")
  if cov_class not in canary_maps.COV_CLASSES:
    raise InputError(f"cov_class must be one of {canary_maps.COV_CLASSES}, got {cov_class!r}")
  out_dir = out_dir or os.path.join(run_dir, "image_maps")
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  checks.check_arrays(run.loss_MxNxT, run.keep_MxN, run.mask_NxT)
  gap_N = canary_maps.loss_gaps(run.loss_MxNxT, run.keep_MxN, progress=progress)
  chosen = canary_maps.default_canary(gap_N) if canary is None else canary
  if run.mask_NxT is not None and not np.asarray(run.mask_NxT[chosen]).all():
    raise InputError(f"mask.npy leaves pixels of canary {chosen} unscored; the maps need every pixel")
  maps = canary_maps.canary_maps(run.loss_MxNxT, run.keep_MxN, chosen, t, statistic=statistic, cov_class=cov_class)
  rank = int((gap_N > gap_N[chosen]).sum()) + 1
  note = (f"the largest gap: {gap_words(gap_N[chosen])}" if canary is None
          else f"{gap_words(gap_N[chosen])}, gap rank {rank} of {N}")
  # The pixel is named by its raster index whichever form it was given in ('2,3' and '11' name one file at W=4).
  settings = {"canary": canary, "pixel": None if pixel is None else t, "cov_class": cov_class,
              "statistic": statistic, "max_positions": max_positions}
  paths = output_paths(out_dir, settings)
  run_words = provenance.run_description(run_dir, run.config)
  figures = {
      "canary_maps.png": image_plots.plot_canary_maps(maps, images[chosen], shape, M, levels, note, run_words),
      "pixel_covariance.png": image_plots.plot_pixel_covariance(maps, images[chosen], shape, M, levels, note,
                                                                run_words),
      "covariance_heatmap.png": cov_plots.plot_covariance_heatmap(
          maps.cov_in_TxT, maps.cov_out_TxT, chosen, max_positions, row_width=shape[1],
          subtitle=f"{run_words}\n{note}; M={M} models; statistic={statistic}", **image_plots.heatmap_labels(maps)),
  }
  for name, fig in figures.items():
    run_folder.save_figure(paths[name], fig)
  top = np.argsort(-np.nan_to_num(gap_N, nan=-np.inf), kind="stable")[:10]
  header = provenance.header(command, run_dir, run, settings, "seqlira.image_maps")
  run_folder.save_json(paths["image_maps.json"], {
      **header, "image_shape": list(shape), "num_levels": levels, "canary": chosen, "canary_gap": gap_N[chosen],
      "canary_gap_rank": rank, "pixel": t, "pixel_row_column": list(divmod(t, shape[1])),
      "n_in": maps.n_in, "n_out": maps.n_out, "pixel_variance": maps.cov_row_T[t],
      "largest_gaps": [{"canary": int(n), "gap": gap_N[n]} for n in top],
      "files": {k: os.path.basename(v) for k, v in paths.items()}})
  line = (f"canary {chosen} ({note}); pixel {t} (row {t // shape[1]}, column {t % shape[1]}); "
          f"{maps.n_in} IN, {maps.n_out} OUT of M={M} models")
  return list(paths.values()), line
