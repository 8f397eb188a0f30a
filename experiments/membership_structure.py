"""How membership moves each canary's tokens, and which LiRA variant that structure favours.

python -m experiments.membership_structure --run_dir=DIR [--gaps=1,1.25,1.5,2,4] [--draws=3] [--max_canaries=N] [--n_boot=200]
    [--seed=0] [--out_dir=DIR/membership_structure]
Per canary (lira/membership_model.py): how much the tokens move together from model to model (co-movement), how
unequal the per-token IN-OUT effects are (uniformity), how much that misleads the independent model (kappa), the IN
over the OUT variance and the tails. Then the six variants, leave-one-out, on the run itself and on runs simulated
from each canary's fitted class means with the IN-OUT gap scaled by each of --gaps and five kinds of noise
(lira.membership_model.STRUCTURES: one Gaussian, its diagonal, a Gaussian per class, the real residuals shuffled
across or within the classes), beside the closed-form oracle of infinitely many shadow models. docs/analyses.md
says how to read them. Writes membership_structure.{json,csv,md,png}; finished cells are kept in
membership_structure_cells/ and a stopped analysis resumes there.
"""

import dataclasses
import math

from absl import app
from absl import flags

from experiments import cli
from experiments import option_flags
from lira.reports import membership_structure_report as report
from lira.reports import provenance
from lira.reports.membership_structure_report import MembershipStructureOptions

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "Run folder: losses.npy [M, N, T], keep.npy [M, N], optional mask.npy.")
flags.DEFINE_list("gaps", [f"{g:g}" for g in MembershipStructureOptions.gaps],
                  {f.name: f for f in dataclasses.fields(MembershipStructureOptions)}["gaps"].metadata["help"])


def _positive_numbers(values):
  try:
    ok = all(math.isfinite(float(v)) and float(v) > 0 for v in values)
  except ValueError:
    ok = False
  if not ok:
    raise flags.ValidationError(f"--gaps={','.join(values)}: must be comma-separated positive numbers")
  return True


flags.register_validator("gaps", _positive_numbers)
option_flags.define(MembershipStructureOptions, ("draws", "max_canaries", "n_boot", "seed"))
flags.DEFINE_string("out_dir", None, "Output folder; default RUN_DIR/membership_structure.")
flags.DEFINE_bool("progress", True, "Show progress bars.")


def main(argv):
  del argv
  if not FLAGS.run_dir:
    raise app.UsageError("--run_dir is required")
  options = MembershipStructureOptions(gaps=tuple(float(g) for g in FLAGS.gaps), **option_flags.values(
      MembershipStructureOptions, ("draws", "max_canaries", "n_boot", "seed")))
  paths, lines = report.write_membership_structure(
      FLAGS.run_dir, FLAGS.out_dir, gaps=list(options.gaps), draws_per_cell=options.draws,
      max_canaries=options.max_canaries, n_boot=options.n_boot, seed=options.seed, progress=FLAGS.progress)
  print("\n".join(lines))
  print(provenance.wrote(paths))


if __name__ == "__main__":
  flags.mark_flag_as_required("run_dir")
  cli.run(main, resumes=True)
