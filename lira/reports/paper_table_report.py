"""A run's six-variant table beside Rossi et al. 2025's Table II, and the paper's orderings tested pair by pair.

Used by experiments.paper_table (the command and its docstring say what it writes). Each ordering is a paired-bootstrap
difference over canaries (lira.compare); its expected sign is the paper's at that FPR (positive where the paper's
difference is 0 or no paper column is given: A beats B, the paper's general claim). The verdict is "holds" when the 95%
interval lies on the expected side of 0, "opposite" when on the other side, and "not resolved" when it contains 0 or
the FPR needs more non-members than the run has.
"""

import dataclasses
import os
import re

import numpy as np

from lira import compare
from lira import scoring as scoring_lib
from lira import metrics
from lira.reports import provenance
from lira.reports import loo_report
from lira.reports import population_files
import run_folder
from lira.errors import InputError
from lira.options import Options, option
from lira.reports import tables

VARIANTS = ("univariate-classwise", "univariate-shared", "independent-classwise", "independent-shared",
            "oas-classwise", "oas-shared")
# Table II: TPR (%) at 0.1% and 0.01% FPR, 10,000 canaries, 64 shadow models, leave-one-out.
PAPER_TABLE_II = {
    "pythia_average": ((8.69, 2.72), (10.01, 4.09), (21.78, 2.37), (36.98, 20.72), (26.26, 13.81), (30.95, 18.81)),
    "pythia_worst": ((95.04, 89.66), (94.91, 91.26), (99.58, 99.18), (99.67, 99.30), (99.78, 99.57), (99.67, 99.37)),
    "lstm_average": ((0.10, 0.01), (0.18, 0.01), (0.11, 0.01), (0.39, 0.04), (0.45, 0.15), (1.03, 0.87)),
    "lstm_worst": ((92.51, 4.33), (95.82, 88.25), (91.52, 0.02), (98.75, 95.00), (23.19, 0.03), (70.74, 30.72)),
    "image": ((0.10, 0.01), (0.10, 0.01), (0.10, 0.02), (0.10, 0.01), (0.11, 0.01), (0.10, 0.01)),
}
FPRS = (0.001, 0.0001)
COMPARISONS = (  # (A, B, what the paper says about A - B)
    ("univariate-shared", "univariate-classwise", "shared beats class-wise (univariate)"),
    ("independent-shared", "independent-classwise", "shared beats class-wise (independent)"),
    ("oas-shared", "oas-classwise", "shared beats class-wise (OAS)"),
    ("independent-shared", "univariate-shared", "sequence-aware beats univariate (independent, shared)"),
    ("oas-shared", "univariate-shared", "sequence-aware beats univariate (OAS, shared)"),
    ("oas-classwise", "univariate-classwise", "OAS class-wise against univariate class-wise (far below on LSTM worst)"),
)


@dataclasses.dataclass(frozen=True)
class PaperTableOptions(Options):
  """The paired bootstrap's settings of experiments.paper_table: its flags (experiments/option_flags.py) and the
  defaults its report names leave out."""

  PUBLIC_NAME = "lira.reports.paper_table_report.PaperTableOptions"

  n_boot: int = option(1000, "Paired bootstrap replicates over canaries for the differences.", low=1,
                       integer=True)  # the verdicts are read off the bootstrap intervals
  seed: int = option(0, "Bootstrap seed.", low=0, integer=True)


def results_suffix(results_name):
  """The settings part of a results file's name, as evaluate wrote it: '' for results.json, '_nboot-50' for
  results_nboot-50.json; any other name (a renamed or nested report) whole, made filename-safe: '_my-run'."""
  stem = re.sub(r"[^A-Za-z0-9.+_-]+", "-", re.sub(r"\.json$", "", results_name)).strip("-")
  if stem == "results":
    return ""
  return stem[len("results"):] if stem.startswith("results_") else f"_{stem}"


def report_paths(out_dir, results_name, setting="none", n_boot=PaperTableOptions.n_boot, seed=PaperTableOptions.seed,
                 defaults=None):
  """{"json": path, "md": path} of the table built from results_name: paper_table_<setting>, then the results
  file's settings (results_suffix), then this table's own non-default bootstrap settings as _pairednboot-B and
  _pairedseed-S (lira.reports.provenance.report_path); defaults: {"n_boot": B, "seed": S} the names leave out
  (default PaperTableOptions'). The default results.json keeps paper_table_<setting>.md."""
  defaults = PaperTableOptions.defaults() if defaults is None else defaults
  own = {"paired_n_boot": int(n_boot), "paired_seed": int(seed)}
  own_defaults = {"paired_n_boot": defaults["n_boot"], "paired_seed": defaults["seed"]}
  stem = f"paper_table_{setting}{results_suffix(results_name)}"
  return {ext: provenance.report_path(out_dir, stem, ext, own, own_defaults) for ext in ("json", "md")}


def verdict(diff_ci, resolved, expected_sign=1):
  """holds / opposite / not resolved: where the interval of A - B lies against the expected sign (+1 or -1)."""
  if not resolved or not np.all(np.isfinite(diff_ci)):
    return "not resolved"
  lo, hi = sorted(expected_sign * np.asarray(diff_ci, float))  # the interval of sign * (A - B)
  return "holds" if lo > 0 else "opposite" if hi < 0 else "not resolved"


def load_scores(run_dir, results, required=VARIANTS, attacks=False):
  """{variant key: [M, N] float64} from the scores files evaluate wrote with the report's settings (with `attacks`,
  its attack rows' too, by attack name: rmia, loss, ...); InputError if a file is missing or a `required` variant
  has no row."""
  out = {}
  for row in results["variants"]:
    variant = (row["name"], row["covariance"], row["shared"])
    path = loo_report.scores_path(run_dir, variant, results["settings"])
    if not os.path.exists(path):
      raise InputError(f"{path}: not found (evaluate saves it unless --nosave_scores; run it again)")
    out[scoring_lib.variant_key(variant)] = run_folder.load_npy(path).astype(np.float64)
  for row in results.get("attacks", []) if attacks else []:
    path = os.path.join(run_dir, row["scores_file"]) if row.get("scores_file") else None
    if path is None or not os.path.exists(path):
      raise InputError(f"{path or run_dir}: the {row['name']} row's scores are not found (evaluate saves them unless "
                       "--nosave_scores; run it again)")
    out[row["attack"]] = run_folder.load_npy(path).astype(np.float64)
  missing = [v for v in required if v not in out]
  if missing:
    raise InputError(f"{run_dir}: the report has no {missing[0]} row; evaluate all six variants")
  return out


def build(run_dir, results_name=run_folder.names.RESULTS, setting="none", n_boot=PaperTableOptions.n_boot,
          seed=PaperTableOptions.seed):
  results_path = os.path.join(run_dir, results_name)
  if not os.path.exists(results_path):
    raise InputError(f"{results_path}: not found (run python -m experiments.evaluate --run_dir={run_dir} first)")
  results = run_folder.load_json(results_path)
  population_files.check_report(results, results_path, run_dir)
  keep_MxN = run_folder.load_npy(os.path.join(run_dir, run_folder.names.KEEP)).astype(bool)
  scores = load_scores(run_dir, results)
  rows = []
  paper = dict(zip(VARIANTS, PAPER_TABLE_II[setting])) if setting in PAPER_TABLE_II else None
  for r in results["variants"] + results.get("attacks", []):
    key = scoring_lib.variant_key((r["name"], r["covariance"], r["shared"])) if "covariance" in r else None
    s = r["summary"]
    entries = [s["tpr"][metrics.fpr_key(f)] for f in FPRS]
    rows.append({"name": r["name"], "paper": list(paper[key]) if paper and key in paper else None,
                 "tpr": [e["tpr"] for e in entries], "ci": [e["ci"] for e in entries],
                 "resolved": [e["resolved"] for e in entries], "auc": s["auc"]})
  tests = []
  for a, b, claim in COMPARISONS:
    valid_MxN = np.isfinite(scores[a]) & np.isfinite(scores[b])  # pairs evaluate left unscored are NaN
    d = compare.paired_difference(scores[a], scores[b], keep_MxN, FPRS, n_boot=n_boot, seed=seed, valid_MxN=valid_MxN)
    n_neg = int((~keep_MxN & valid_MxN).sum())
    per_fpr = []
    for i, f in enumerate(FPRS):
      e = d["tpr"][metrics.fpr_key(f)]
      paper_diff = None if paper is None else round(paper[a][i] - paper[b][i], 2)
      sign = -1 if paper_diff is not None and paper_diff < 0 else 1
      ok = metrics.is_resolved(n_neg, f)
      per_fpr.append({**e, "paper_diff": paper_diff, "expected_sign": sign, "resolved": ok,
                      "verdict": verdict(np.asarray(e["ci"], float), ok, sign)})
    tests.append({"a": a, "b": b, "claim": claim, "fprs": per_fpr})
  return {"schema": "seqlira.paper_table", "run_dir": run_dir, "results": results_name, "setting": setting,
          "shape": results.get("shape"), "n_boot": n_boot, "seed": seed, "rows": rows, "tests": tests,
          **{k: results[k] for k in (population_files.FINGERPRINT,) if k in results}}


def markdown(table):
  lines = [f"Run `{table['run_dir']}` ({provenance.shape_line(table['shape'])}), report `{table['results']}`; "
           f"paper column: {table['setting']}.", "",
           "| variant | paper 0.1% | run 0.1% [95% CI] | paper 0.01% | run 0.01% [95% CI] | AUC |",
           "|---|---:|---:|---:|---:|---:|"]
  for r in table["rows"]:
    p = r["paper"] or (None, None)
    cells = [tables.tpr_cell(t, c, ok) for t, c, ok in zip(r["tpr"], r["ci"], r["resolved"])]
    lines.append(f"| {r['name']} | {'-' if p[0] is None else f'{p[0]:.2f}'} | {cells[0]} | "
                 f"{'-' if p[1] is None else f'{p[1]:.2f}'} | {cells[1]} | {r['auc']:.4f} |")
  lines += ["", f"Paired differences A - B in TPR points, {table['n_boot']} bootstrap replicates over canaries "
            "(95% percentile interval; p = share of replicates with A - B <= 0); the verdict compares the sign with "
            "the paper's (A > B where the paper has no column or a tie):", "",
            "| A - B | paper 0.1% | run 0.1% | verdict | paper 0.01% | run 0.01% | verdict |",
            "|---|---:|---:|---|---:|---:|---|"]
  for t in table["tests"]:
    cells = []
    for e in t["fprs"]:
      lo, hi = e["ci"]
      cells += ["-" if e["paper_diff"] is None else f"{e['paper_diff']:+.2f}",
                f"{100 * e['diff']:+.2f} [{tables.pct(lo)}, {tables.pct(hi)}] p={e['p_le_0']:.3f}", e["verdict"]]
    lines.append(f"| {t['a']} - {t['b']} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"
