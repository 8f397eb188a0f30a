"""Which canaries hold each variant's highest-scoring non-member pairs (experiments/false_positives.py).

false_positives[_settings].json (schema "seqlira.false_positives"), named by the report it read (its settings, as
paper_table's names are) and the settings that acted (`top`, or `fpr` without it; `show`): per variant and attack row
of the run's evaluate report (an attack row under its attack's name, e.g. rmia), `top` (the pairs counted), `fpr`
(top / scored non-member pairs: the FPR whose threshold they lie above), `n_nonmember`, `distinct` (how many canaries
hold them) and `canaries` (the `show` canaries holding the most: index, pairs held, the canary's scored non-member
pairs, its text when the run has one, and its index in the source run when the run is a partial_run without some
canaries); .md: the same as tables.
"""

import dataclasses
import os
import sys

import numpy as np

from lira import nonmember_pairs
from lira.errors import InputError
from lira.options import Options, option
from lira.reports import loo_report
from lira.reports import paper_table_report
from lira.reports import population_files
from lira.reports import provenance
from lira.reports import tables
import run_folder


@dataclasses.dataclass(frozen=True)
class FalsePositivesOptions(Options):
  """The settings of experiments.false_positives: its flags (experiments/option_flags.py) and the defaults its file
  names leave out."""

  PUBLIC_NAME = "lira.reports.false_positives_report.FalsePositivesOptions"

  top: int | None = option(None, "Count the K highest-scoring non-member pairs; default those above --fpr's "
                           "threshold.", low=1, integer=True)
  fpr: float = option(1e-4, "Without --top: the pairs above this FPR's threshold, floor(FPR x non-member pairs), at "
                      "least 1.", low=0.0, high=1.0, low_open=True, high_open=True)
  show: int = option(10, "Canaries listed per variant.", low=1, integer=True)

  def check_fields(self):
    if self.top is not None and self.fpr != type(self).fpr:
      raise InputError(f"fpr={self.fpr:g} does not act with top={self.top} (top counts the K highest-scoring "
                       "non-member pairs, fpr those above its threshold); give one of them")


TEXT_CHARS = 60  # a canary's text is cut to this many characters in the tables


def build(run_dir, top=FalsePositivesOptions.top, fpr=FalsePositivesOptions.fpr, show=FalsePositivesOptions.show,
          results_name=run_folder.names.RESULTS):
  """The report as a dict (each listed canary's "text" None: the command fills it in for a text run); InputError
  names a missing report or scores file before any work."""
  FalsePositivesOptions(top=top, fpr=fpr, show=show)  # fpr with top: refused, it would not act
  results_path = os.path.join(run_dir, results_name)
  if not os.path.exists(results_path):
    raise InputError(f"{results_path}: not found (run python -m experiments.evaluate --run_dir={run_dir} first)")
  results = run_folder.load_json(results_path)
  population_files.check_report(results, results_path, run_dir)
  scores = paper_table_report.load_scores(run_dir, results, required=(), attacks=True)
  keep_MxN = run_folder.load_npy(os.path.join(run_dir, run_folder.names.KEEP)).astype(bool)
  config = run_folder.load_config(run_dir) if os.path.exists(run_folder.config_path(run_dir)) else {}
  source = (config.get("partial_of") or {})
  source_N = None  # a partial run without some canaries: each canary's index in the source run too
  if source.get("dropped_canaries"):
    source_N = np.delete(np.arange(source["num_canaries"]), source["dropped_canaries"])
  variants = []
  for key, score_MxN in scores.items():
    if score_MxN.shape != keep_MxN.shape:
      raise InputError(f"{run_dir}: the {key} scores have shape {list(score_MxN.shape)}, keep.npy "
                       f"{list(keep_MxN.shape)}")
    r = nonmember_pairs.top_nonmember_pairs(score_MxN, keep_MxN, top=top, fpr=None if top else fpr)
    n_neg, k = r["n_nonmember"], int(r["canary_K"].size)
    rows = [{"canary": int(n), "pairs": int(p), "out_pairs": int(o), "text": None,
             **({} if source_N is None else {"source_canary": int(source_N[n])})}
            for n, p, o in zip(r["canaries"][:show], r["pairs"][:show], r["out_models"][:show])]
    variants.append({"variant": key, "top": k, "fpr": k / max(n_neg, 1), "n_nonmember": n_neg,
                     "distinct": int(r["canaries"].size), "canaries": rows})
  return {"schema": {"name": "seqlira.false_positives", "version": provenance.SCHEMA_VERSION, "doc": "docs/outputs.md"},
          "argv": list(sys.argv), "run_dir": os.path.abspath(run_dir),
          "run": provenance.run_description(run_dir, config), "results": results_name, "shape": results.get("shape"),
          "settings": {"top": top, "fpr": None if top else fpr, "show": show}, "scoring": results["settings"],
          "variants": variants, **{k: results[k] for k in (population_files.FINGERPRINT,) if k in results}}


def _text(text):
  """A canary's text for a table cell (tables.text_cell), cut to TEXT_CHARS."""
  return tables.text_cell(text, TEXT_CHARS)


def _index(row):
  """A canary's index, and its index in the source run where a partial run dropped canaries: '7 (source 9)'."""
  return f"{row['canary']} (source {row['source_canary']})" if "source_canary" in row else str(row["canary"])


def markdown(report):
  top = report["settings"]["top"]
  counted = (f"the {top} highest-scoring non-member pairs" if top else
             f"the non-member pairs above the {100 * report['settings']['fpr']:g}% FPR threshold")
  lines = [f"# Canaries behind the first false positives: {report['run']}", "",
           f"Per variant, {counted} (scored leave-one-out by evaluate with "
           f"{loo_report.scoring_words(report['scoring'])}) and the canaries that hold the most "
           "of them; OUT pairs: the canary's scored non-member pairs in all.", "",
           "| variant | pairs counted | FPR | distinct canaries | largest holders (canary: pairs / OUT pairs) |",
           "|---|---:|---:|---:|---|"]
  for v in report["variants"]:
    holders = ", ".join(f"{_index(c)}: {c['pairs']} / {c['out_pairs']}" for c in v["canaries"][:5])
    lines.append(f"| {v['variant']} | {v['top']} | {v['fpr']:.2g} | {v['distinct']} | {holders} |")
  for v in report["variants"]:
    lines += ["", f"## {v['variant']}", "", "| canary | pairs held | OUT pairs | text |", "|---:|---:|---:|---|"]
    lines += [f"| {_index(c)} | {c['pairs']} | {c['out_pairs']} | {_text(c['text'])} |" for c in v["canaries"]]
  return "\n".join(lines) + "\n"


def write(report, out_dir):
  """false_positives[_results settings][_settings].{json,md} in out_dir, named by the settings that acted; the paths
  written."""
  run_folder.check_writable(out_dir, "choose another --out_dir")
  defaults = FalsePositivesOptions.defaults()
  acted = {k: v for k, v in report["settings"].items() if v is not None}  # fpr is None where top acted
  stem = f"false_positives{paper_table_report.results_suffix(report['results'])}"
  paths = [provenance.report_path(out_dir, stem, ext, acted, defaults) for ext in ("json", "md")]
  run_folder.save_json(paths[0], report)
  run_folder.save_text(paths[1], markdown(report))
  return paths
