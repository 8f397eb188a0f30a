"""Several evaluated runs side by side: each variant's TPR and the sequence-aware variants' paired differences
against univariate, run by run (a dose-response across runs that differ in one setting).

python -m experiments.compare_runs --run_dirs=A,B,C --out_dir=OUT [--labels=a,b,c] [--title=...] [--setting=lstm_worst]
    [--n_boot=1000]
Each run folder needs evaluate's report of the six variants (results.json and its scores files). Writes
OUT/compare_runs.{json,md,png} (lira/reports/compare_runs_report.py).
"""

from absl import app
from absl import flags

from experiments import cli
from experiments import option_flags
from lira.reports import compare_runs_report
from lira.reports import paper_table_report
from lira.reports import provenance
from lira.reports.compare_runs_report import CompareRunsOptions

FLAGS = flags.FLAGS
flags.DEFINE_list("run_dirs", None, "Evaluated run folders, in the order they are drawn.")
flags.DEFINE_list("labels", None, "A short name per run; default the folders' names.")
flags.DEFINE_string("title", None, "The figure's and tables' title; default the runs' names, families and canaries.")
flags.DEFINE_string("out_dir", None, "Output folder.")
flags.DEFINE_enum("setting", "none", ["none"] + list(paper_table_report.PAPER_TABLE_II),
                  "A Table II column whose differences are drawn and tabled beside the runs'.")
option_flags.define(CompareRunsOptions, ("n_boot", "seed"))
flags.DEFINE_bool("progress", True, "Accepted, as by every command (nothing to show).")


def main(argv):
  del argv
  if not FLAGS.run_dirs:
    raise app.UsageError("--run_dirs is required")
  if not FLAGS.out_dir:
    raise app.UsageError("--out_dir is required")
  options = CompareRunsOptions(**option_flags.values(CompareRunsOptions, CompareRunsOptions.defaults()))
  paths = compare_runs_report.write(FLAGS.run_dirs, FLAGS.out_dir, FLAGS.labels, FLAGS.title, options.n_boot,
                                    options.seed, FLAGS.setting)
  with open(paths[1]) as f:  # the markdown report: the runs' TPRs and the paired differences
    print(f.read().rstrip())
  print("\n" + provenance.wrote(paths))


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dirs")
  flags.mark_flag_as_required("out_dir")
  cli.run(main)
