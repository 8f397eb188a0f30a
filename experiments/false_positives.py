"""Which canaries hold each variant's highest-scoring non-member pairs: the false positives that set TPR at low FPR.

python -m experiments.false_positives --run_dir=DIR [--top=K | --fpr=1e-4] [--show=10] [--results=results.json]
    [--out_dir=DIR]
Reads evaluate's report (--results) and the scores files of its variants and attack rows, and keep.npy; writes
false_positives[_results settings][_settings].{json,md} (lira/reports/false_positives_report.py). --top and --fpr
choose the counted pairs two ways: one of them is given. A text run's canaries are shown as text (texts.json, or
canaries.npy decoded with tokenizer.json). When a few canaries hold most of the pairs, evaluate the run without them
(partial_run --drop_canaries) to see what they do to the ranking.
"""

import dataclasses
import os

from absl import app
from absl import flags

from attacks import shadow
from experiments import cli
from experiments import option_flags
from lira.errors import MissingFileError
from lira.reports import false_positives_report
from lira.reports import provenance
from lira.reports.false_positives_report import FalsePositivesOptions
import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "An evaluated run folder (results.json, scores_<variant>.npy, keep.npy).")
flags.DEFINE_string("results", run_folder.names.RESULTS, "The evaluate report to read, in the run folder.")
option_flags.define(FalsePositivesOptions, ("top", "fpr", "show"))
flags.DEFINE_string("out_dir", None, "Where false_positives[_settings].{json,md} go; default the run folder.")
flags.DEFINE_bool("progress", True, "Accepted, as by every command (nothing to show).")


def _texts(run_dir, N):
  """The canaries as text, or None for a run without texts (an image run, a synthetic run)."""
  mask_path = os.path.join(run_dir, run_folder.names.MASK)
  mask = run_folder.load_npy(mask_path) if os.path.exists(mask_path) else None
  try:
    return shadow.canary_texts(run_dir, N, mask)
  except MissingFileError:
    return None


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  if FLAGS.top is not None and FLAGS["fpr"].present:
    raise app.UsageError(f"--fpr={FLAGS.fpr:g} does not act with --top={FLAGS.top} (--top counts the K highest-scoring "
                         "non-member pairs, --fpr those above its threshold); give one of them")
  options = FalsePositivesOptions(**option_flags.values(FalsePositivesOptions, FalsePositivesOptions.defaults()))
  report = false_positives_report.build(FLAGS.run_dir, **dataclasses.asdict(options), results_name=FLAGS.results)
  texts = _texts(FLAGS.run_dir, report["shape"]["N"])
  for variant in report["variants"]:
    for row in variant["canaries"]:
      row["text"] = None if texts is None else texts[row["canary"]]
  paths = false_positives_report.write(report, FLAGS.out_dir or FLAGS.run_dir)
  print(false_positives_report.markdown(report))
  print(provenance.wrote(paths))


if __name__ == "__main__":
  cli.run(main)
