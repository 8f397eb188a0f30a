"""The off-diagonal covariance test of a run folder written out (experiments/cov_structure.py; docs/outputs.md).

cov_structure.json (schema "seqlira.cov_structure"): the block every report opens with (lira.reports.provenance.header),
then `summary` (lira.cov_permutation.summary_of), `levels` (share of tested canaries with p <= alpha for each alpha
of the p-value grid, the plot's curve) and `per_canary` ({canary, models, statistic, p_value}; NaN for a canary
with fewer than 2 varying positions); cov_structure.csv holds per_canary; cov_structure.png shows the p-values'
histogram and their distribution function on log-log axes against the uniform law of independent positions.
"""

import dataclasses
import os

import numpy as np
# matplotlib (~0.3 s to import) is imported inside the functions that draw: a command that draws nothing skips it

from lira import cov_permutation
from lira import checks
from lira.reports import provenance
import run_folder
from lira import transforms
from lira.errors import InputError
from lira.options import Options, option

COV_CLASSES = ("out", "in")


@dataclasses.dataclass(frozen=True)
class CovStructureOptions(Options):
  """The settings of experiments.cov_structure: its flags (experiments/option_flags.py) and the defaults its file
  names leave out."""

  PUBLIC_NAME = "lira.reports.cov_structure_report.CovStructureOptions"

  cov_class: str = option("out", "Models of each canary tested: OUT (default; the IN models of a memorised canary "
                          "predict it almost exactly) or IN.", choices=COV_CLASSES)
  statistic: str = option("logit", "Per-position statistic (LiRA's: logit).", choices=transforms.STATISTICS)
  max_canaries: int | None = option(None, "Test the first N canaries only; default all.", low=1, integer=True)
  max_positions: int = option(64, "Test the first T positions (the paper's Fig. 8: 64).", low=2,
                              integer=True)  # a correlation between positions needs two
  permutations: int = option(199, "Permutations per canary; the smallest p-value is 1 / (permutations + 1).", low=1,
                             integer=True)
  seed: int = option(0, "Seed of the permutations.", low=0, integer=True)  # numpy's generators take non-negative seeds


def levels_of(pvalue_N, num_permutations):
  """[(alpha, share of tested canaries with p <= alpha)] on the attainable grid k / (P + 1), k = 1..P+1."""
  p = np.sort(pvalue_N[~np.isnan(pvalue_N)])
  alphas = np.arange(1, num_permutations + 2) / (num_permutations + 1)
  shares = np.searchsorted(p, alphas * (1 + 1e-12), side="right") / len(p)
  return [(float(a), float(s)) for a, s in zip(alphas, shares)]


def level_words(summary, alpha, expected):
  """'p <= alpha for x% (expected if independent)', or why alpha cannot be reached with so few permutations."""
  share = summary[f"share_p_le_{alpha:g}"]
  P = summary["num_permutations"]
  if share is None:
    return (f"p <= {alpha:g} is not attainable with {P} permutations (the smallest p is 1 / {P + 1} = "
            f"{1 / (P + 1):.3g}; --permutations={int(round(1 / alpha)) - 1} or more reach it)")
  return f"p <= {alpha:g} for {100 * share:.1f}% ({expected} if independent)"


def plot_pvalues(pvalue_N, levels, summary, subtitle):
  """Histogram of the p-values and their distribution function (log-log) against the uniform null."""
  from matplotlib.figure import Figure
  fig = Figure(figsize=(10.5, 4.6), layout="constrained")
  ax_hist, ax_cdf = fig.subplots(1, 2)
  p = pvalue_N[~np.isnan(pvalue_N)]
  P = summary["num_permutations"]
  bins = np.linspace(0, 1, 21)
  ax_hist.hist(p, bins=bins, color="C0", alpha=0.8, label=f"{len(p)} canaries")
  ax_hist.axhline(len(p) / 20, color="k", ls="--", lw=1, label="independent positions (uniform)")
  ax_hist.set_xlabel("permutation p-value")
  ax_hist.set_ylabel("canaries")
  ax_hist.legend(fontsize=8)
  a, s = np.array(levels).T
  ax_cdf.loglog(a, np.maximum(s, 0.5 / len(p)), color="C0", drawstyle="steps-post", label="observed share")
  ax_cdf.loglog(a, a, color="k", ls="--", lw=1, label="independent positions: share = alpha")
  ax_cdf.set_xlabel("alpha")
  ax_cdf.set_ylabel("share of canaries with p <= alpha")
  ax_cdf.set_xlim(1 / (P + 1), 1)
  ax_cdf.set_ylim(0.5 / len(p), 1.05)
  ax_cdf.grid(alpha=0.3, which="both")
  ax_cdf.legend(fontsize=8, loc="lower right")
  fig.suptitle(f"Is the per-position covariance diagonal? Per-canary permutation test ({P} permutations)\n"
               f"{subtitle}\n{level_words(summary, 0.01, '1%')}; median mean|r| "
               f"{summary['median_statistic']:.3f} vs "
               f"{summary['independent_statistic']:.3f} if independent", fontsize=9)
  return fig


def write_cov_structure(run_dir, out_dir=None, *, cov_class=CovStructureOptions.cov_class,
                        statistic=CovStructureOptions.statistic, max_canaries=CovStructureOptions.max_canaries,
                        max_positions=CovStructureOptions.max_positions,
                        permutations=CovStructureOptions.permutations, seed=CovStructureOptions.seed,
                        command="cov_structure", progress=False):
  """Check everything, run the test on the run folder, write the three files; returns (paths, summary line)."""
  if cov_class not in COV_CLASSES:
    raise InputError(f"--cov_class must be one of {COV_CLASSES}, got {cov_class!r}")
  if statistic not in transforms.STATISTICS:
    raise InputError(f"--statistic must be one of {transforms.STATISTICS}, got {statistic!r}")
  if permutations < 1:
    raise InputError(f"--permutations must be >= 1, got {permutations}")
  if max_canaries is not None and max_canaries < 1:
    raise InputError(f"--max_canaries must be >= 1, got {max_canaries}")
  if max_positions < 2:
    raise InputError(f"--max_positions must be >= 2, got {max_positions}")
  run = run_folder.load_run(run_dir, mmap=True)
  M, N, T = run.loss_MxNxT.shape
  n, t = N if max_canaries is None else min(N, max_canaries), min(T, max_positions)
  checks.check_arrays(run.loss_MxNxT[:, :n, :t], run.keep_MxN[:, :n],
                   None if run.mask_NxT is None else run.mask_NxT[:n, :t])
  out_dir = out_dir or os.path.join(run_dir, "cov_structure")
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  member = cov_class == "in"
  observed_N, pvalue_N, models_N = cov_permutation.run_test(
      run.loss_MxNxT, run.keep_MxN, run.mask_NxT, max_canaries=n, max_positions=t, member_class=member,
      statistic=statistic, num_permutations=permutations, seed=seed, progress=progress)
  summary = cov_permutation.summary_of(observed_N, pvalue_N, models_N, positions=t, member_class=member,
                                     num_permutations=permutations)
  levels = levels_of(pvalue_N, permutations)
  settings = {"cov_class": cov_class, "statistic": statistic, "max_canaries": max_canaries,
              "max_positions": max_positions, "permutations": permutations, "seed": seed}
  paths = {ext: provenance.report_path(out_dir, "cov_structure", ext, settings, CovStructureOptions.defaults())
           for ext in ("json", "csv", "png")}
  rows = [{"canary": i, "models": int(models_N[i]), "statistic": observed_N[i], "p_value": pvalue_N[i]}
          for i in range(n)]
  header = provenance.header(command, run_dir, run, settings, "seqlira.cov_structure")
  run_folder.save_json(paths["json"], {**header, "summary": summary,
                                   "levels": [{"alpha": a, "share": s} for a, s in levels], "per_canary": rows})
  run_folder.save_csv(paths["csv"], rows)
  subtitle = (f"{provenance.run_description(run_dir, run.config)}: first {n} of N={N} canaries, first {t} of T={T} "
              f"positions, {cov_class.upper()} models ({summary['models_per_canary'][0]}-"
              f"{summary['models_per_canary'][1]} per canary of M={M}), statistic={statistic}")
  run_folder.save_figure(paths["png"], plot_pvalues(pvalue_N, levels, summary, subtitle))
  line = (f"{summary['tested']} of {n} canaries tested on {t} positions ({cov_class.upper()} models): "
          f"{level_words(summary, 0.01, '1%')}, {level_words(summary, 0.05, '5%')}; median mean|r| "
          f"{summary['median_statistic']:.4f} "
          f"(independent Gaussian: {summary['independent_statistic']:.4f})")
  return list(paths.values()), line
