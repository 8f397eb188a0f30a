"""Several runs side by side: each variant's TPR and the paired differences of the sequence-aware variants against
univariate, run by run (experiments/compare_runs.py).

Each run's numbers are lira.reports.paper_table_report.build's on that run (its results.json and scores files, the
paired bootstrap over canaries of lira.compare). compare_runs.json (schema "seqlira.compare_runs"): `setting` and `paper_differences` (a Table II column's differences
for the same pairs, drawn beside the runs'), `runs` (per run:
`label`, `run_dir`, `shape`, `run` (model family and canary kind), `rows` and `tests` as paper_table's); compare_runs.md: the
tables; compare_runs.png: TPR at 0.1% FPR per variant and the differences at 0.1% and 0.01% FPR, run by run.
"""

import dataclasses
import os
import sys

import numpy as np

from lira.errors import InputError
from lira.options import Options, option
from lira.reports import paper_table_report
from lira.reports import provenance
import run_folder
from lira.reports import tables


@dataclasses.dataclass(frozen=True)
class CompareRunsOptions(Options):
  """The paired bootstrap's settings of experiments.compare_runs: its flags (experiments/option_flags.py)."""

  PUBLIC_NAME = "lira.reports.compare_runs_report.CompareRunsOptions"

  n_boot: int = option(1000, "Paired bootstrap replicates over canaries.", low=1, integer=True)
  seed: int = option(0, "Bootstrap seed.", low=0, integer=True)


DIFFERENCES = (("independent-shared", "univariate-shared"), ("oas-shared", "univariate-shared"))
FPRS = paper_table_report.FPRS


def check(run_dirs, labels=None):
  """The runs' labels; InputError if the labels do not match the runs or a run folder has no evaluate report."""
  labels = list(labels) if labels else [os.path.basename(os.path.abspath(d)) for d in run_dirs]
  if len(labels) != len(run_dirs):
    raise InputError(f"--labels has {len(labels)} names for {len(run_dirs)} runs")
  for d in run_dirs:
    if not os.path.exists(os.path.join(d, run_folder.names.RESULTS)):
      raise InputError(f"{os.path.join(d, run_folder.names.RESULTS)}: not found (run python -m experiments.evaluate "
                       f"--run_dir={d} first)")
  return labels


def build(run_dirs, labels=None, n_boot=CompareRunsOptions.n_boot, seed=CompareRunsOptions.seed):
  """Every run's table, checked first: each run folder must hold an evaluate report of all six variants."""
  labels = check(run_dirs, labels)
  runs = []
  for label, d in zip(labels, run_dirs):
    table = paper_table_report.build(d, n_boot=n_boot, seed=seed)
    runs.append({"label": label, "run_dir": os.path.abspath(d), "shape": table["shape"],
                 "run": provenance.run_words(run_folder.load_config(d)), "rows": table["rows"],
                 "tests": table["tests"]})
  return {"schema": {"name": "seqlira.compare_runs", "version": 1, "doc": "docs/outputs.md"},
          "argv": list(sys.argv), "n_boot": n_boot, "seed": seed, "runs": runs}


def _test(run, a, b):
  return next(t for t in run["tests"] if t["a"] == a and t["b"] == b)


def markdown(report):
  lines = ["| run | model, canaries | M, N, T | " + " | ".join(
      f"{r['name']} {100 * f:g}%" for r in report["runs"][0]["rows"] for f in FPRS[:1]) + " |",
           "|---|---|---|" + "---:|" * len(report["runs"][0]["rows"])]
  for run in report["runs"]:
    s = run["shape"]
    cells = [tables.tpr_cell(r["tpr"][0], r["ci"][0], r["resolved"][0]) for r in run["rows"]]
    lines.append(f"| {run['label']} | {run['run']} | {s['M']}, {s['N']}, {s['T']} | "
                 + " | ".join(cells) + " |")
  lines += ["", f"Paired differences A - B in TPR points ({report['n_boot']} bootstrap replicates over canaries, 95% "
            "percentile intervals):", "",
            "| run | " + " | ".join(f"{a} - {b} {100 * f:g}%" for a, b in DIFFERENCES for f in FPRS) + " |",
            "|---|" + "---:|" * (len(DIFFERENCES) * len(FPRS))]
  paper = report.get("paper_differences") or {}
  if paper:
    lines.append(f"| Table II ({report['setting']}) | " + " | ".join(
        f"{paper[f'{a} - {b}'][i]:+.2f}" for a, b in DIFFERENCES for i in range(len(FPRS))) + " |")
  for run in report["runs"]:
    cells = []
    for a, b in DIFFERENCES:
      for e in _test(run, a, b)["fprs"]:
        lo, hi = e["ci"]
        # unresolved (too few non-members for the FPR): n/r, never a number, as every table says it
        cells.append(f"{100 * e['diff']:+.2f} [{tables.pct(lo)}, {tables.pct(hi)}]" if e["resolved"] else "n/r")
    lines.append(f"| {run['label']} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def paper_differences(setting):
  """{(A, B): [diff at each FPR]} of Table II's column `setting` (lira.reports.paper_table_report), or {} for none."""
  if setting in (None, "none"):
    return {}
  if setting not in paper_table_report.PAPER_TABLE_II:
    raise InputError(f"--setting={setting}: must be one of none, {', '.join(paper_table_report.PAPER_TABLE_II)}")
  column = dict(zip(paper_table_report.VARIANTS, paper_table_report.PAPER_TABLE_II[setting]))
  return {(a, b): [column[a][i] - column[b][i] for i in range(len(FPRS))] for a, b in DIFFERENCES}


def figure(report, title):
  """TPR at 0.1% FPR per variant, run by run; the differences against univariate shared at 0.1% and 0.01% FPR."""
  from matplotlib.figure import Figure
  from lira.reports import plots
  runs = report["runs"]
  x = np.arange(len(runs))
  fig = Figure(figsize=(15, 4.8), layout="constrained")
  ax_t, *ax_d = fig.subplots(1, 3)
  names = [r["name"] for r in runs[0]["rows"]]
  for j, name in enumerate(names):
    style = plots.style_of(name)
    dx = (j - (len(names) - 1) / 2) * 0.05
    resolved = np.array([run["rows"][j]["resolved"][0] for run in runs])
    tpr = np.where(resolved, [100 * run["rows"][j]["tpr"][0] for run in runs], np.nan)  # n/r: not drawn
    ci = np.array([[100 * (c if c is not None else np.nan) for c in run["rows"][j]["ci"][0]] for run in runs])
    ax_t.errorbar(x + dx, tpr, yerr=np.abs(ci.T - tpr), marker=plots.VARIANT_MARKERS.get(name, "o"), ms=4,
                  capsize=2, label=name, **style)
  for xi, run in zip(x, runs):  # a run with too few non-members for the FPR: n/r, as evaluate's table says
    if not all(r["resolved"][0] for r in run["rows"]):
      ax_t.annotate("n/r", (xi, 0), fontsize=8, ha="center", va="bottom")
  if not any(r["resolved"][0] for run in runs for r in run["rows"]):
    ax_t.set_ylim(0, 100)
  ax_t.set_ylabel(f"TPR @ {100 * FPRS[0]:g}% FPR (%)")
  ax_t.set_title(f"each variant's TPR at {100 * FPRS[0]:g}% FPR (95% bootstrap interval)", fontsize=9)
  ax_t.legend(fontsize=7)
  for ax, (f, fpr) in zip(ax_d, enumerate(FPRS)):
    for k, (a, b) in enumerate(DIFFERENCES):
      e = [_test(run, a, b)["fprs"][f] for run in runs]
      resolved = np.array([v["resolved"] for v in e])
      d = np.where(resolved, [100 * v["diff"] for v in e], np.nan)  # n/r: not drawn, annotated below
      ci = np.where(resolved[:, None], [[100 * (c if c is not None else np.nan) for c in v["ci"]] for v in e],
                    np.nan)
      color = plots.COVARIANCE_COLORS[a.split("-")[0]]
      paper = report.get("paper_differences", {}).get(f"{a} - {b}")
      if paper is not None:
        ax.axhline(paper[f], color=color, ls="--", lw=1, alpha=0.8, label=f"Table II ({report['setting']}): "
                   f"{paper[f]:+.2f}")
      ax.errorbar(x + (k - 0.5) * 0.1, d, yerr=np.abs(ci.T - d), marker="o", ms=5, capsize=3, color=color, ls="-",
                  label=f"{a} - {b}")
      for xi, v in zip(x, e):
        if not v["resolved"]:
          ax.annotate("n/r", (xi, 0), fontsize=7, ha="center")
    ax.axhline(0, color="k", lw=1)
    ax.set_ylabel(f"TPR difference @ {100 * fpr:g}% FPR (points)")
    ax.legend(fontsize=7)
    ax.set_title(f"above 0: the sequence-aware variant finds more ({100 * fpr:g}% FPR)", fontsize=9)
  for ax in (ax_t, *ax_d):
    ax.set_xticks(x, [run["label"] for run in runs], rotation=20, ha="right", fontsize=8)
    ax.grid(alpha=0.3)
  fig.suptitle(title + f"\n95% paired bootstrap intervals over canaries ({report['n_boot']} replicates)", fontsize=10)
  return fig


def write(run_dirs, out_dir, labels=None, title=None, n_boot=CompareRunsOptions.n_boot, seed=CompareRunsOptions.seed,
          setting="none"):
  """Build, then write compare_runs.{json,md,png} into out_dir; returns the paths. setting: a Table II column whose
  differences the figure and tables show beside the runs' (lira.reports.paper_table_report.PAPER_TABLE_II)."""
  paper = paper_differences(setting)
  labels = check(run_dirs, labels)
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  report = build(run_dirs, labels, n_boot, seed)
  title = title or "Runs compared: " + provenance.runs_description([(d, run_folder.load_config(d)) for d in run_dirs])
  report["title"] = title
  report["setting"] = setting
  report["paper_differences"] = {f"{a} - {b}": d for (a, b), d in paper.items()}
  paths = {ext: os.path.join(out_dir, f"compare_runs.{ext}") for ext in ("json", "md", "png")}
  run_folder.save_json(paths["json"], report)
  run_folder.save_text(paths["md"], f"# {title}\n\n" + markdown(report))
  run_folder.save_figure(paths["png"], figure(report, title))
  return list(paths.values())

