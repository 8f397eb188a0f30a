"""Per-pixel pictures of one canary of an image run (PixelCNN++ shadow models; Rossi et al. 2025, App. .3, Fig. 8).

python -m experiments.image_maps --run_dir=DIR [--canary=N] [--pixel=T|ROW,COL] [--cov_class=out|in|shared]
    [--statistic=loss|logit] [--max_positions=64] [--out_dir=DIR/image_maps]
Writes into RUN_DIR/image_maps (or --out_dir): canary_maps.png (the canary, its mean IN and mean OUT per-pixel loss
and their difference), pixel_covariance.png (one pixel's covariance and correlation with every pixel, on the
image grid), covariance_heatmap.png (the IN and OUT covariance of the first --max_positions positions, Fig. 8) and
image_maps.json (what was drawn; lira/reports/image_report.py). Default canary: the one with the largest IN-vs-OUT mean
loss gap; default pixel: the image centre. Settings other than the defaults are appended to the names
(canary_maps_canary-3.png). It reads one canary's M x T losses (and losses.npy once, a slice at a time, for the
gaps), so it takes seconds where experiments.covariance_error's analysis of the same run takes minutes and
about 2 x N x T x T float64 of memory.
"""

import dataclasses

from absl import app
from absl import flags

from experiments import cli
from experiments import option_flags
from lira.reports import image_report
from lira.reports import provenance
from lira.reports.image_report import ImageMapsOptions

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Image run folder: losses.npy [M, N, H*W], keep.npy, canaries.npy, config.json.")
option_flags.define(ImageMapsOptions, ("canary", "pixel", "cov_class", "statistic", "max_positions"))
flags.DEFINE_string("out_dir", None, "Output folder; default RUN_DIR/image_maps.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  options = ImageMapsOptions(**option_flags.values(ImageMapsOptions, ImageMapsOptions.defaults()))
  paths, line = image_report.write_image_maps(FLAGS.run_dir, FLAGS.out_dir, **dataclasses.asdict(options),
                                              progress=FLAGS.progress)
  print(line)
  print(provenance.wrote(paths))


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main)
