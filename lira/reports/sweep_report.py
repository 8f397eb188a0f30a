"""The shadow-model sweep written out (experiments/shadow_sweep.py; docs/outputs.md): TPR at one FPR against m.

shadow_sweep.json (schema "seqlira.shadow_sweep"): the block every report opens with (lira.reports.provenance.header),
then `fpr` and `rows` (lira.evaluation.shadow_count_sweep's rows: one per variant or attack, m and draw, and with
--pairs one per pair, FPR, m and draw, kind "pair", printed as a second table);
shadow_sweep.csv holds the rows; shadow_sweep.png draws TPR against m with a min-max band over the draws. Settings
other than their defaults are appended to the names (shadow_sweep_reduction-group4.json).
Each finished subset's rows are kept in shadow_sweep_cells[_settings]/m-M_draw-D.json (`Cells`), so that a sweep
stopped part-way resumes at the first subset it had not finished.
"""

import math
import os

import numpy as np

from lira import metrics
from lira.reports import plots
from lira.reports import provenance
import run_folder


class Cells:
  """A sweep's finished subsets in `folder`, one JSON file per m and draw (lira.evaluation.shadow_count_sweep's
  `cells`). A file is read back only where it was written for the same arrays (run_folder.run_fingerprint), the
  same settings and the same models; any other is scored again and replaced. The rows come back as they were made:
  their keys in their order, and the values JSON has no number for (NaN) listed beside them and restored."""

  def __init__(self, folder, fingerprint, settings):
    os.makedirs(folder, exist_ok=True)
    self.folder, self.fingerprint = folder, fingerprint
    self.settings = run_folder.standard_json(settings)  # as it reads back from JSON
    self.resumed = 0  # subsets read back

  def _path(self, m, draw):
    return os.path.join(self.folder, f"m-{m}_draw-{draw}.json")

  def load(self, m, draw, models):
    """The rows of subset (m, draw) of these models, or None where no file holds them."""
    path = self._path(m, draw)
    if not os.path.exists(path):
      return None
    cell = run_folder.load_json(path)
    if (cell.get("fingerprint"), cell.get("settings"), cell.get("models")) != (
        self.fingerprint, self.settings, [int(i) for i in models]):
      return None
    rows = [{key: row[key] for key in keys} for row, keys in zip(cell["rows"], cell["keys"])]  # JSON sorts keys
    for i, key in cell["nan"]:
      rows[i][key] = float("nan")
    self.resumed += 1
    return rows

  def save(self, m, draw, models, rows):
    nan = [[i, key] for i, row in enumerate(rows) for key, value in row.items()
           if isinstance(value, float) and math.isnan(value)]
    run_folder.save_json(self._path(m, draw), {"m": m, "draw": draw, "fingerprint": self.fingerprint,
                                               "settings": self.settings, "models": [int(i) for i in models],
                                               "rows": rows, "keys": [list(row) for row in rows], "nan": nan})


def _cell(rows):
  """One table cell: mean TPR (%) over the draws with a value, n/r if a draw's FPR is unresolved, n/a if none."""
  defined = [r for r in rows if r["tpr"] is not None and np.isfinite(r["tpr"])]
  if not defined:
    return "n/a"
  if not all(r["resolved"] for r in defined):
    return "n/r"
  return f"{100 * np.mean([r['tpr'] for r in defined]):.2f}"


def table(rows, names, counts, fpr):
  """The sweep as printed: one line per row name (variant or attack), one column per m, with evaluate's n/r mark and
  notes."""
  width = max([24] + [len(n) + 2 for n in names])
  lines = [f"{'variant':<{width}}" + "".join(f"{'m=' + str(m):>10}" for m in counts)]
  cells = {}
  for name in names:
    cells[name] = [_cell([r for r in rows if r["variant"] == name and r["m"] == m]) for m in counts]
    lines.append(f"{name:<{width}}" + "".join(f"{c:>10}" for c in cells[name]))
  lines.append(f"TPR@{100 * fpr:g}% FPR in %, mean over draws.")
  if any("n/a" in c for c in cells.values()):
    lines.append("n/a = too few models of a class for every canary at that m.")
  open_m = [m for i, m in enumerate(counts) if any(c[i] == "n/r" for c in cells.values())]
  if open_m:
    have = ", ".join(f"m={m}: {int(np.mean([r['n_neg'] for r in rows if r['m'] == m and r['n_neg']])):,}"
                     for m in open_m)
    lines.append(f"n/r = not resolved: TPR@{100 * fpr:g}% FPR needs >= {metrics.min_negatives(fpr):,} negatives; "
                 f"available (mean over draws) {have}. A larger --fpr (e.g. --fpr=0.01) is resolved with fewer.")
  return "\n".join(lines)


def write(out_dir, run_dir, run, rows, names, settings, defaults, recorded, styles=None, extra=None):
  """shadow_sweep[_settings].{json,csv,png} in out_dir; returns (text to print, paths written).

  names: the table's rows in order (variants, then attacks); settings name the files where they differ from
  defaults (counts and variants None at their defaults); recorded: the JSON's settings block (the counts and
  variants used); styles: {attack name: plot style} of the attack rows; extra: more top-level JSON fields (the
  population's fingerprint).
  """
  paths = provenance.save_rows(out_dir, "shadow_sweep", run_dir, run, rows, settings, defaults, recorded,
                               {"fpr": settings["fpr"], **(extra or {})})
  M, N, T = run.loss_MxNxT.shape
  shape = provenance.shape_line({"M": M, "N": N, "T": T})
  line = (f"statistic={settings['statistic']}, reduction={settings['reduction'] or 'none'}"
          f"{', balanced counts' if settings['balance_counts'] else ''}, {settings['draws']} draws per m "
          f"(seed {settings['seed']})")
  title = (f"{provenance.run_description(run_dir, run.config)}\n"
           f"Shadow-model sweep (leave-one-out in each subset of m models)\n{shape}\n{line}")
  figure = plots.sweep_figure([r for r in rows if r.get("kind") != "pair"],
                              ylabel=f"TPR @ {100 * settings['fpr']:g}% FPR", title=title,
                              styles={} if styles is None else styles)
  run_folder.save_figure(paths[2], figure)
  text = f"{shape}; {line}\n\n{table(rows, names, recorded['counts'], settings['fpr'])}"
  pairs = pair_table(rows, recorded["counts"])
  return text + (f"\n\n{pairs}" if pairs else ""), paths


def pair_table(rows, counts):
  """The paired differences (rows of kind "pair"): one line per pair and FPR, one column per m, each cell the
  difference in TPR points with its paired-bootstrap interval (draw 0; every draw in the JSON and CSV); None if
  there are none."""
  pairs = [r for r in rows if r.get("kind") == "pair"]
  if not pairs:
    return None
  keys = list(dict.fromkeys((r["variant"], r["fpr"]) for r in pairs))
  width = max(len(name) + 10 for name, _ in keys)
  lines = [f"{'paired difference':<{width}}" + "".join(f"{'m=' + str(m):>26}" for m in counts)]
  for name, fpr in keys:
    cells = []
    for m in counts:
      r = next((r for r in pairs if r["variant"] == name and r["fpr"] == fpr and r["m"] == m and r["draw"] == 0), None)
      if r is None or r["ci_low"] is None or not np.isfinite(r["tpr"]):
        cells.append("n/a")
      elif not r["resolved"]:
        cells.append("n/r")
      else:
        cells.append(f"{100 * r['tpr']:.2f} [{100 * r['ci_low']:.2f}, {100 * r['ci_high']:.2f}]")
    lines.append(f"{name + f' @{100 * fpr:g}%':<{width}}" + "".join(f"{c:>26}" for c in cells))
  n_boot = next((r["n_boot"] for r in pairs if r["n_boot"]), 0)
  lines.append(f"TPR(a) - TPR(b) in points at each FPR on the pairs both score, with the {100 * metrics.LEVEL:g}% paired "
               f"canary-bootstrap interval ({n_boot} replicates) of draw 0; n/r = FPR not resolved by the subset's "
               "negatives.")
  return "\n".join(lines)
