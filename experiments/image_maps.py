"""Per-pixel pictures of one canary of an image run (PixelCNN++ shadow models; Rossi et al. 2025, App. .3, Fig. 8).

python -m experiments.image_maps --run_dir=DIR [--canary=N] [--pixel=T|ROW,COL] [--cov_class=out|in|shared]
    [--statistic=loss|logit] [--out_dir=DIR/image_maps]
Writes into RUN_DIR/image_maps (or --out_dir): canary_maps.png (the canary, its mean IN and mean OUT per-pixel loss
and their difference), pixel_covariance.png (one pixel's covariance and correlation with every pixel, on the
image grid), covariance_heatmap.png (the IN and OUT covariance of the first --max_positions positions, Fig. 8) and
image_maps.json (what was drawn). Default canary: the one with the largest IN-vs-OUT mean loss gap; default pixel:
the image centre. Settings other than the defaults are appended to the names (canary_maps_canary-3.png).
It reads one canary's M x T losses (plus one pass over losses.npy for the gaps), so it takes seconds where
experiments.covariance_error's analysis of the same run takes minutes and N x T x T memory.
"""

import os

from absl import app
from absl import flags
import numpy as np

from experiments import cli
from lira import cov_plots
from lira import image_maps
from lira import image_plots
from lira import loo
from lira import provenance
from lira import rundir
from lira import transforms
from lira.errors import InputError, MissingFileError

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Image run folder: losses.npy [M, N, H*W], keep.npy, canaries.npy, config.json.")
flags.DEFINE_integer("canary", None, "Canary to draw; default the one with the largest IN-vs-OUT mean loss gap.")
flags.DEFINE_string("pixel", None, "Pixel whose covariance row is drawn: raster index t = row * W + column, or "
                    "'row,column'; default the image centre.")
flags.DEFINE_enum("cov_class", "out", list(image_maps.COV_CLASSES), "Models the covariance row is estimated from.")
flags.DEFINE_enum("statistic", "loss", list(transforms.STATISTICS), "Per-pixel statistic drawn (loss: nats).")
flags.DEFINE_integer("max_positions", 64, "Positions shown in the covariance heatmap (the paper's Fig. 8: 64).")
flags.DEFINE_string("out_dir", None, "Output folder; default RUN_DIR/image_maps.")

DEFAULTS = {"canary": None, "pixel": None, "cov_class": "out", "statistic": "loss", "max_positions": 64}


def load_image_run(run_dir):
  """The run, its image shape, pixel levels and canary images; InputError for a run that is not an image run."""
  run = rundir.load_run(run_dir, mmap=True)
  shape = image_maps.image_shape_of(run.config)
  image_maps.check_positions(run.loss_MxNxT.shape[2], shape)
  path = os.path.join(run_dir, "canaries.npy")
  if not os.path.exists(path):
    raise MissingFileError(f"run folder {run_dir!r} has no canaries.npy (the canary images)")
  images = image_maps.canary_images(rundir.load_npy(path), shape)
  if len(images) != run.loss_MxNxT.shape[1]:
    raise InputError(f"{path}: {len(images)} canaries, but losses.npy has N={run.loss_MxNxT.shape[1]}")
  return run, shape, image_maps.num_levels_of(run.config), images


def output_paths(out_dir, settings):
  """Each file's path, named by the settings that change it."""
  d = DEFAULTS
  pick = lambda *keys: {k: settings[k] for k in keys}  # noqa: E731
  return {
      "canary_maps.png": provenance.report_path(out_dir, "canary_maps", "png", pick("canary", "statistic"), d),
      "pixel_covariance.png": provenance.report_path(
          out_dir, "pixel_covariance", "png", pick("canary", "pixel", "cov_class", "statistic"), d),
      "covariance_heatmap.png": provenance.report_path(
          out_dir, "covariance_heatmap", "png", pick("canary", "statistic", "max_positions"), d),
      "image_maps.json": provenance.report_path(out_dir, "image_maps", "json", settings, d),
  }


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  run, shape, levels, images = load_image_run(FLAGS.run_dir)
  M, N, T = run.loss_MxNxT.shape
  if FLAGS.canary is not None and not 0 <= FLAGS.canary < N:
    raise app.UsageError(f"--canary={FLAGS.canary} is outside [0, N={N})")
  pixel = image_maps.parse_pixel(FLAGS.pixel, shape)
  if FLAGS.max_positions < 2:
    raise app.UsageError(f"--max_positions must be >= 2, got {FLAGS.max_positions}")
  out_dir = FLAGS.out_dir or os.path.join(FLAGS.run_dir, "image_maps")
  rundir.check_writable(out_dir, "choose another folder with --out_dir")
  loo.check_arrays(run.loss_MxNxT, run.keep_MxN, run.mask_NxT)
  gap_N = image_maps.loss_gaps(run.loss_MxNxT, run.keep_MxN)
  canary = image_maps.default_canary(gap_N) if FLAGS.canary is None else FLAGS.canary
  if run.mask_NxT is not None and not np.asarray(run.mask_NxT[canary]).all():
    raise InputError(f"mask.npy leaves pixels of canary {canary} unscored; the maps need every pixel")
  maps = image_maps.canary_maps(run.loss_MxNxT, run.keep_MxN, canary, pixel, statistic=FLAGS.statistic,
                                cov_class=FLAGS.cov_class)
  rank = int((gap_N > gap_N[canary]).sum()) + 1
  note = (f"largest IN-vs-OUT mean loss gap, {gap_N[canary]:+.3g} nats" if FLAGS.canary is None
          else f"IN-vs-OUT mean loss gap {gap_N[canary]:+.3g} nats, rank {rank} of {N}")
  # The pixel is named by its raster index whichever form it was given in ('2,3' and '11' name one file at W=4).
  settings = {"canary": FLAGS.canary, "pixel": None if FLAGS.pixel is None else pixel, "cov_class": FLAGS.cov_class,
              "statistic": FLAGS.statistic, "max_positions": FLAGS.max_positions}
  paths = output_paths(out_dir, settings)
  figures = {
      "canary_maps.png": image_plots.plot_canary_maps(maps, images[canary], shape, M, levels, note),
      "pixel_covariance.png": image_plots.plot_pixel_covariance(maps, images[canary], shape, M, levels, note),
      "covariance_heatmap.png": cov_plots.plot_covariance_heatmap(
          maps.cov_in_TxT, maps.cov_out_TxT, canary, FLAGS.max_positions, row_width=shape[1],
          subtitle=f"{note}; M={M} models; statistic={FLAGS.statistic}", **image_plots.heatmap_labels(maps)),
  }
  for name, fig in figures.items():
    rundir.save_figure(paths[name], fig)
  top = np.argsort(-np.nan_to_num(gap_N, nan=-np.inf), kind="stable")[:10]
  header = provenance.header("image_maps", FLAGS.run_dir, run, settings, "seqlira.image_maps")
  rundir.save_json(paths["image_maps.json"], {
      **header, "image_shape": list(shape), "num_levels": levels, "canary": canary, "canary_gap": gap_N[canary],
      "canary_gap_rank": rank, "pixel": pixel, "pixel_row_column": list(divmod(pixel, shape[1])),
      "n_in": maps.n_in, "n_out": maps.n_out, "pixel_variance": maps.cov_row_T[pixel],
      "largest_gaps": [{"canary": int(n), "gap": gap_N[n]} for n in top],
      "files": {k: os.path.basename(v) for k, v in paths.items()}})
  print(f"canary {canary} ({note}); pixel {pixel} (row, column {divmod(pixel, shape[1])}); "
        f"{maps.n_in} IN, {maps.n_out} OUT of M={M} models")
  print(provenance.wrote(paths.values()))


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main)
