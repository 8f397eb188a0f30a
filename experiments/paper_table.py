"""A run's six-variant table beside Rossi et al. 2025's Table II, and the paper's orderings tested pair by pair.

python -m experiments.paper_table --run_dir=DIR --setting=lstm_worst [--results=results.json] [--n_boot=1000]
Reads an evaluated run folder (results.json and the scores_<variant>.npy that evaluate saves beside it, keep.npy) and
writes paper_table_<setting>.{md,json}, named also by the settings of the results file and the non-default --n_boot
and --seed (--results=results_statistic-loss.json --n_boot=200 writes
paper_table_none_statistic-loss_pairednboot-200.md, so tables of other reports or settings sit beside each other):
each variant's TPR at 0.1% and 0.01% FPR with its bootstrap interval next to the paper's, then the orderings the
paper reads off its table, each as a paired-bootstrap difference over canaries
(lira.compare): shared minus class-wise for every covariance, the sequence-aware shared variants minus univariate
shared, and OAS class-wise minus univariate class-wise. The expected sign of a difference is the paper's at that FPR
(positive where the paper's difference is 0 or there is no paper column: A beats B, the paper's general claim). The
verdict "holds" when the 95% interval lies on the expected side of 0, "opposite" when it lies on the other side, and
"not resolved" when it contains 0 or the FPR needs more non-members than the run has. --setting=none leaves the
paper's columns out.
"""

from absl import flags

from experiments import cli
from experiments import option_flags
from lira.reports import paper_table_report
from lira.reports import provenance
from lira.reports.paper_table_report import PaperTableOptions
import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "An evaluated run folder (results.json, scores_<variant>.npy, keep.npy).")
flags.DEFINE_enum("setting", "none", ["none", *paper_table_report.PAPER_TABLE_II], "The paper's column to print beside the run's.")
flags.DEFINE_string("results", run_folder.names.RESULTS, "The report to read, in the run folder (e.g. one with attack rows).")
option_flags.define(PaperTableOptions, ("n_boot", "seed"))
flags.DEFINE_string("out_dir", None, "Where paper_table_<setting>.{md,json} go; default the run folder.")
flags.DEFINE_bool("progress", True, "Show progress bars (this command draws none; accepted as by every command).")
flags.mark_flags_as_required(["run_dir"])


def main(argv):
  del argv
  out_dir = FLAGS.out_dir or FLAGS.run_dir
  run_folder.check_writable(out_dir)
  options = PaperTableOptions(**option_flags.values(PaperTableOptions, PaperTableOptions.defaults()))
  table = paper_table_report.build(FLAGS.run_dir, FLAGS.results, FLAGS.setting, options.n_boot, options.seed)
  paths = paper_table_report.report_paths(out_dir, FLAGS.results, FLAGS.setting, options.n_boot, options.seed)
  text = paper_table_report.markdown(table)
  run_folder.save_json(paths["json"], table)
  run_folder.save_text(paths["md"], text)
  print(text)
  print(provenance.wrote([paths["json"], paths["md"]]))


if __name__ == "__main__":
  cli.run(main)
