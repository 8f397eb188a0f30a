"""The membership-structure analysis of a run folder written out (experiments/membership_structure.py).

Cells, each draw cached as out_dir/membership_structure_cells/CELL_draw-D.json (a run stopped part-way resumes there):
  real                      the six variants, leave-one-out, on the run's own losses
  STRUCTURE_xG              the same on runs simulated from each canary's fitted class means, the IN-OUT gap scaled
                            by G, with the noise of STRUCTURE (lira.membership_model.STRUCTURES); --draws runs per
                            cell, averaged
The oracle rows (infinitely many shadow models, shared variants) come in closed form from the fitted parameters.

membership_structure.json (schema "seqlira.membership_model"): the provenance header, `structure` (quantiles of
the per-canary measures), `cells` ({cell: {variant: {auc, tpr: {fpr: value}, ci: {fpr: [low, high]}}}}) and
`differences` ({cell: {"A - B": {fpr: {diff, ci}}}}: paired-bootstrap differences of independent shared and OAS
shared against univariate shared) and `oracle` ({structure: {gap: {variant: {fpr: tpr}}}}); membership_structure.csv holds the per-canary measures;
membership_structure.md the tables; membership_structure.png the measures' distributions and TPR against the gap.
"""

import dataclasses
import math
import os

import numpy as np
from tqdm.auto import tqdm

from lira import checks
from lira import compare
from lira import evaluation
from lira import membership_model as ms
from lira import metrics
from lira.errors import InputError
from lira.options import Options, option
from lira.reports import provenance
import run_folder
from lira.scoring import VARIANTS



@dataclasses.dataclass(frozen=True)
class MembershipStructureOptions(Options):
  """The settings of experiments.membership_structure: its flags (experiments/option_flags.py; --gaps, a list, is
  defined by the command from this field) and the defaults its file names leave out."""

  PUBLIC_NAME = "lira.reports.membership_structure_report.MembershipStructureOptions"

  gaps: tuple = option((1.0, 1.25, 1.5, 2.0, 4.0), "Factors the IN-OUT gap of the simulated runs is scaled by.")
  draws: int = option(3, "Simulated runs per cell (their TPRs and differences are averaged; the report gives their "
                      "range).", low=1, integer=True)
  max_canaries: int | None = option(None, "Analyse the first N canaries only; default all.", low=1, integer=True)
  n_boot: int = option(metrics.N_BOOT, "Bootstrap replicates over canaries (0 = none).", low=0, integer=True)
  seed: int = option(0, "Seed of the simulations and the bootstrap.", low=0, integer=True)

  def check_fields(self):
    try:
      ok = len(self.gaps) > 0 and all(math.isfinite(float(g)) and float(g) > 0 for g in self.gaps)
    except (TypeError, ValueError):
      ok = False
    if not ok:
      raise InputError(f"gaps must be positive finite numbers, got {self.gaps!r}")


FPRS = (0.001, 0.0001)
MEASURES = ("co_movement", "co_movement_x_length", "kappa", "uniformity", "signal_over_noise", "mean_effect",
            "variance_ratio", "excess_kurtosis")
ORACLE_LABELS = {"univariate": "oracle univariate", "independent": "oracle independent", "full": "oracle full (OAS)"}


def cell_names(gaps):
  return ["real"] + [f"{s}_x{g:g}" for s in ms.STRUCTURES for g in gaps]


DIFFERENCES = (("Independent Shared", "Univariate Shared"), ("OAS Shared", "Univariate Shared"))


def _differences(scores, keep, n_boot, seed):
  """{"A - B": {fpr_key: {diff, ci}}}: paired-bootstrap differences over canaries (lira.compare) of DIFFERENCES."""
  out = {}
  for a, b in DIFFERENCES:
    d = compare.paired_difference(scores[a], scores[b], keep, FPRS, n_boot=max(n_boot, 1), seed=seed)
    out[f"{a} - {b}"] = {k: {"diff": e["diff"], "ci": e["ci"] if n_boot > 0 else [None, None]}
                        for k, e in d["tpr"].items()}
  return out


def _compact(rows):
  out = {}
  for row in rows:
    s = row["summary"]
    out[row["name"]] = {"auc": s["auc"], "n_neg": s["n_neg"],
                        "tpr": {metrics.fpr_key(f): s["tpr"][metrics.fpr_key(f)]["tpr"] for f in FPRS},
                        "ci": {metrics.fpr_key(f): s["tpr"][metrics.fpr_key(f)]["ci"] for f in FPRS},
                        "resolved": {metrics.fpr_key(f): s["tpr"][metrics.fpr_key(f)]["resolved"] for f in FPRS}}
  return out


def _mean_of_draws(draws):
  """A cell from its draws: (variants, differences) with TPR, AUC and differences averaged over the draws, their
  [min, max] over the draws as `range`, and each draw's paired interval kept (`ci` is the single draw's where D = 1)."""
  variants = {}
  for v, first in draws[0]["variants"].items():
    per = [d["variants"][v] for d in draws]
    variants[v] = {"auc": float(np.mean([p["auc"] for p in per])), "n_neg": first["n_neg"],
                   "tpr": {k: float(np.mean([p["tpr"][k] for p in per])) for k in first["tpr"]},
                   "range": {k: [min(p["tpr"][k] for p in per), max(p["tpr"][k] for p in per)] for k in first["tpr"]},
                   "ci": first["ci"] if len(draws) == 1 else None,
                   "resolved": {k: all(p["resolved"][k] for p in per) for k in first["resolved"]}}
  differences = {}
  for name, first in draws[0]["differences"].items():
    differences[name] = {}
    for k in first:
      per = [d["differences"][name][k] for d in draws]
      diffs = [p["diff"] for p in per]
      differences[name][k] = {
          "diff": float(np.mean(diffs)), "range": [min(diffs), max(diffs)], "draw_cis": [p["ci"] for p in per],
          "draws_above_0": sum(p["ci"][0] is not None and p["ci"][0] > 0 for p in per),
          "draws_below_0": sum(p["ci"][1] is not None and p["ci"][1] < 0 for p in per)}
  return variants, differences


def _quantiles(x):
  x = x[np.isfinite(x)]
  if not len(x):
    return None
  q = np.quantile(x, [0.1, 0.25, 0.5, 0.75, 0.9])
  return {"n": int(len(x)), "q10": q[0], "q25": q[1], "median": q[2], "q75": q[3], "q90": q[4]}


def _pct(x):
  return "n/a" if x is None else f"{100 * x:.2f}"


def markdown(structure, cells, differences, oracle, gaps, title):
  """The report's tables: the structure measures, then TPR at 0.1% and 0.01% FPR per cell and the oracle."""
  lines = [f"# {title}", "", "Simulated cells are the mean of their draws (--draws).", "",
           "## Structure (per canary: median [25%, 75%] over canaries)", "",
           "| measure | median [IQR] | independent tokens | one factor |", "|---|---|---|---|"]
  refs = {"co_movement": ("1/L", "1"), "co_movement_x_length": ("1", "L"), "kappa": ("1", "about L rho"),
          "uniformity": ("", "1 if every token moves by the same sds"), "signal_over_noise": ("", ""),
          "mean_effect": ("", ""), "variance_ratio": ("1 if IN and OUT vary alike", ""),
          "excess_kurtosis": ("0 for Gaussian tokens", "")}
  for name in MEASURES:
    q = structure[name]
    cell = "n/a" if q is None else f"{q['median']:.4g} [{q['q25']:.4g}, {q['q75']:.4g}]"
    lines.append(f"| {name} | {cell} | {refs[name][0]} | {refs[name][1]} |")
  columns = [v for v, _, _ in VARIANTS] + [ORACLE_LABELS[v] for v in ms.ORACLE_VARIANTS]
  for fpr in FPRS:
    key = metrics.fpr_key(fpr)
    lines += ["", f"## TPR (%) at {100 * fpr:g}% FPR", "", "| run | " + " | ".join(columns) + " |",
              "|---|" + "---:|" * len(columns)]
    for c in cell_names(gaps):
      vals = [_pct(cells[c][v]["tpr"][key]) if cells[c][v]["resolved"][key] else "n/r" for v, _, _ in VARIANTS]
      structure, _, g = c.rpartition("_x")
      vals += [_pct(oracle[structure][g][v][key]) if structure in oracle else "-" for v in ms.ORACLE_VARIANTS]
      lines.append(f"| {c} | " + " | ".join(vals) + " |")
  lines += ["", "## Paired differences (TPR points)", "",
            "real: the difference with its 95% paired-bootstrap interval over canaries. Simulated cells: the mean over "
            "the draws, the smallest to largest draw, and in how many draws the paired interval lies above / below 0.",
            "",
            "| run | " + " | ".join(f"{name} {100 * f:g}%" for name in differences[cell_names(gaps)[0]] for f in FPRS)
            + " |", "|---|" + "---:|" * (len(DIFFERENCES) * len(FPRS))]
  for c in cell_names(gaps):
    vals = []
    for name, per_fpr in differences[c].items():
      for f in FPRS:
        e = per_fpr[metrics.fpr_key(f)]
        D = len(e["draw_cis"])
        if D == 1:
          ci = "" if e["draw_cis"][0][0] is None else (
              f" [{100 * e['draw_cis'][0][0]:.2f}, {100 * e['draw_cis'][0][1]:.2f}]")
        else:
          ci = (f" ({100 * e['range'][0]:+.2f} to {100 * e['range'][1]:+.2f}; >0 in {e['draws_above_0']}, <0 in "
                f"{e['draws_below_0']} of {D})")
        vals.append(f"{100 * e['diff']:+.2f}{ci}")
    lines.append(f"| {c} | " + " | ".join(vals) + " |")
  lines += ["", "real: the run's losses. STRUCTURE_xG: simulated from each canary's fitted class means with the "
            "IN-OUT gap times G, and noise: gaussian N(0, C), C its OAS shared covariance; gaussian_diagonal "
            "N(0, diag C); gaussian_classwise each class's own OAS covariance; shuffled the canary's real residual "
            "rows shuffled across all its models; shuffled_in_class shuffled within each class (at x1 the real run "
            "itself). oracle: infinitely many shadow models (shared fits), closed form. n/r: too few non-member "
            "pairs for the FPR."]
  return "\n".join(lines) + "\n"


def figure(per_canary, cells, oracle, gaps, title):
  """Left: the co-movement and inflation distributions; middle and right: TPR at 0.1% FPR against the gap."""
  from matplotlib.figure import Figure
  from lira.reports import plots
  fig = Figure(figsize=(15, 9), layout="constrained")
  (ax_m, ax_f, ax_i), (ax_k, ax_c, ax_r) = fig.subplots(2, 3)
  ax_s = (ax_f, ax_i, ax_c, ax_r)
  panels = (("gaussian",), ("gaussian_diagonal",), ("gaussian_classwise",), ("shuffled", "shuffled_in_class"))
  for name, color, label in (("variance_ratio", "tab:purple", "IN / OUT total variance"),
                             ("excess_kurtosis", "tab:brown", "excess kurtosis (mean over tokens)")):
    x = per_canary[name][np.isfinite(per_canary[name])]
    if len(x):
      ax_k.hist(x, bins=40, color=color, histtype="step", lw=1.8, label=f"{label} (median {np.median(x):.3g})")
  ax_k.axvline(0.0, color="k", ls=":", lw=1, label="0: Gaussian tokens")
  ax_k.axvline(1.0, color="k", ls="--", lw=1, label="1: IN and OUT vary alike")
  ax_k.set_xlabel("per canary")
  ax_k.set_ylabel("canaries")
  ax_k.legend(fontsize=7)
  ax_k.set_title("Where the real run departs from one shared Gaussian", fontsize=9)
  for name, color, label in (("co_movement_x_length", "tab:red", "L x co-movement"),
                             ("kappa", "tab:gray", "kappa (independent model's variance inflation)")):
    x = per_canary[name][np.isfinite(per_canary[name]) & (per_canary[name] > 0)]
    if len(x):
      bins = np.logspace(np.log10(max(x.min(), 1e-2)), np.log10(max(x.max(), 1.01)), 40)
      ax_m.hist(x, bins=bins, color=color, histtype="step", lw=1.8, label=f"{label} (median {np.median(x):.3g})")
  ax_m.axvline(1.0, color="k", ls="--", lw=1, label="1: independent tokens")
  ax_m.set_xscale("log")
  from matplotlib.ticker import FormatStrFormatter, LogLocator
  ax_m.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
  ax_m.xaxis.set_major_formatter(FormatStrFormatter("%g"))
  ax_m.xaxis.set_minor_formatter(FormatStrFormatter(""))
  ax_m.set_xlabel("per canary")
  ax_m.set_ylabel("canaries")
  ax_m.legend(fontsize=7)
  ax_m.set_title("How the tokens move together", fontsize=9)
  key = metrics.fpr_key(FPRS[0])

  def tpr(c, variant):  # an unresolved TPR is not drawn as a number (n/r is written at the axis' foot instead)
    return 100 * cells[c][variant]["tpr"][key] if cells[c][variant]["resolved"][key] else np.nan

  drawn = [tpr(c, v) for c in cell_names(gaps) for v, _, _ in VARIANTS]
  low = np.nanmin(drawn) if np.isfinite(drawn).any() else 0.0
  for ax, structures in zip(ax_s, panels):
    structure = structures[0]
    for variant, covariance, shared in VARIANTS:
      style = plots.variant_style(covariance, shared)
      marker = plots.VARIANT_MARKERS[variant]
      ys = [tpr(f"{structure}_x{g:g}", variant) for g in gaps]
      ax.plot(gaps, ys, marker=marker, ms=4, label=variant, **style)
      for other in structures[1:]:
        ys = [tpr(f"{other}_x{g:g}", variant) for g in gaps]
        ax.plot(gaps, ys, marker="x", ms=4, lw=0.8, alpha=0.6, color=style["color"], ls=":")
      if structure in ("gaussian", "shuffled"):
        ax.plot([1.0], [tpr("real", variant)], ls="none", marker="*", ms=11,
                color=style["color"], mfc="white" if not shared else style["color"], zorder=4)
    for g in gaps:
      if any(not cells[f"{s}_x{g:g}"][v]["resolved"][key] for s in structures for v, _, _ in VARIANTS):
        ax.annotate("n/r", (g, max(-2.0, low - 3.0)), fontsize=7, ha="center", va="bottom")
    for v, color in zip(ms.ORACLE_VARIANTS, ("tab:blue", "tab:orange", "tab:green")):
      if structure not in oracle:
        continue
      ys = [100 * oracle[structure][f"{g:g}"][v][key] for g in gaps]
      ax.plot(gaps, ys, color=color, ls=":", lw=2.2, alpha=0.7, label=ORACLE_LABELS[v] + " (M = inf)")
    if structure == "gaussian":
      ax.plot([], [], ls="none", marker="*", ms=11, color="k", mfc="white", label="real run (x1; filled: shared)")
    if len(structures) > 1:
      ax.plot([], [], marker="x", ls=":", color="k", label="shuffled within each class (control)")
      ax.legend(fontsize=6.5, loc="lower right")
    ax.set_xscale("log", base=2)
    ax.set_xticks(gaps, [f"x{g:g}" for g in gaps])
    ax.minorticks_off()
    ax.set_xlabel("IN-OUT gap scaled by")
    ax.set_ylabel(f"TPR @ {100 * FPRS[0]:g}% FPR (%)")
    ax.set_ylim(max(-2.0, low - 3.0), 100.5)
    ax.grid(alpha=0.3)
    ax.set_title({"gaussian": "simulated: one Gaussian, the fitted OAS shared covariance",
                  "gaussian_diagonal": "simulated: its diagonal only (independent tokens)",
                  "gaussian_classwise": "simulated: Gaussian, each class its own OAS covariance",
                  "shuffled": "simulated: the real residuals, shuffled across classes"}[structure], fontsize=9)
  ax_s[0].legend(fontsize=6.5, loc="lower right")
  fig.suptitle(title, fontsize=10)
  return fig


def _run_title(run_dir, run, n):
  M, N, T = run.loss_MxNxT.shape
  return (f"Membership structure of {provenance.run_description(run_dir, run.config)}: M={M}, {n} of N={N} "
          f"canaries, T={T}; logit statistic")


def write_membership_structure(run_dir, out_dir=None, *, gaps=MembershipStructureOptions.gaps,
                               draws_per_cell=MembershipStructureOptions.draws,
                               max_canaries=MembershipStructureOptions.max_canaries,
                               n_boot=MembershipStructureOptions.n_boot, seed=MembershipStructureOptions.seed,
                               command="membership_structure", progress=False):
  """Check everything, compute (resuming finished cells), write the four files; returns (paths, summary lines)."""
  gaps = [float(g) for g in gaps]
  if not gaps or min(gaps) <= 0:
    raise InputError(f"--gaps must be positive numbers, got {gaps}")
  if max_canaries is not None and max_canaries < 1:
    raise InputError(f"--max_canaries must be >= 1, got {max_canaries}")
  if n_boot < 0:
    raise InputError(f"--n_boot must be >= 0, got {n_boot}")
  if draws_per_cell < 1:
    raise InputError(f"--draws must be >= 1, got {draws_per_cell}")
  run = run_folder.load_run(run_dir, mmap=True)
  M, N, T = run.loss_MxNxT.shape
  n = N if max_canaries is None else min(N, max_canaries)
  loss, keep = run.loss_MxNxT[:, :n], np.asarray(run.keep_MxN[:, :n], bool)
  mask = None if run.mask_NxT is None else np.asarray(run.mask_NxT[:n], bool)
  checks.check_arrays(loss, keep, mask)
  counts_N = keep.sum(0)
  if (counts_N < 3).any() or (M - counts_N < 3).any():
    bad = int(np.flatnonzero((counts_N < 3) | (M - counts_N < 3))[0])
    raise InputError(f"canary {bad} has {int(counts_N[bad])} IN and {int(M - counts_N[bad])} OUT models; every "
                     "canary needs 3 of each (the variants' balanced leave-one-out fits)")
  out_dir = out_dir or os.path.join(run_dir, "membership_structure")
  run_folder.check_writable(out_dir, "choose another folder with --out_dir")
  settings = {"gaps": gaps, "draws": draws_per_cell, "max_canaries": max_canaries, "n_boot": n_boot, "seed": seed}
  defaults = {**MembershipStructureOptions.defaults(), "gaps": list(MembershipStructureOptions.gaps)}  # a list, as gaps
  cell_settings = {k: v for k, v in settings.items() if k not in ("gaps", "draws")}
  cell_dir = os.path.join(out_dir, "membership_structure_cells" + provenance.suffix(cell_settings, defaults))
  os.makedirs(cell_dir, exist_ok=True)
  per_canary, params = ms.measure(loss, keep, mask, progress=lambda it: tqdm(
      it, desc="fitting canaries", disable=not progress))
  per_canary["co_movement_x_length"] = per_canary["co_movement"] * per_canary["length"]
  cells, differences = {}, {}
  for name in cell_names(gaps):
    draws = []
    for d in range(1 if name == "real" else draws_per_cell):
      path = os.path.join(cell_dir, f"{name}_draw-{d}.json")
      if os.path.exists(path):
        cached = run_folder.load_json(path)
        if cached.get("shape") == [M, n, T] and cached.get("settings") == cell_settings:
          draws.append(cached)
          continue
      if name == "real":
        arrays = loss
      else:
        structure, g = name.rsplit("_x", 1)
        # A draw depends on the seed, its structure, gap and draw number only, not on the other cells asked for.
        arrays = ms.simulate(params, keep, T, gap=float(g), structure=structure,
                             seed=[seed, ms.STRUCTURES.index(structure), int(round(1000 * float(g))), d])
      rows, scores = evaluation.evaluate_variants(arrays, keep, mask_NxT=mask, fprs=FPRS, n_boot=n_boot, seed=seed,
                                                  progress=progress)
      draws.append({"cell": name, "draw": d, "shape": [M, n, T], "settings": cell_settings,
                    "variants": _compact(rows), "differences": _differences(scores, keep, n_boot, seed)})
      run_folder.save_json(path, draws[-1])
    cells[name], differences[name] = _mean_of_draws(draws)
  oracle = {s: {f"{g:g}": {v: {metrics.fpr_key(f): ms.oracle_tpr(per_canary[f"a_{v}_{s}"], per_canary[f"b_{v}_{s}"],
                                                                   f, gap=g) for f in FPRS}
                           for v in ms.ORACLE_VARIANTS} for g in gaps} for s in ms.ORACLE_STRUCTURES}
  structure = {name: _quantiles(per_canary[name]) for name in MEASURES}
  paths = {ext: provenance.report_path(out_dir, "membership_structure", ext, settings, defaults)
           for ext in ("json", "csv", "md", "png")}
  title = _run_title(run_dir, run, n)
  header = provenance.header(command, run_dir, run, settings, "seqlira.membership_model")
  run_folder.save_json(paths["json"], {**header, "structure": structure, "cells": cells, "differences": differences,
                                       "oracle": oracle})
  columns = ["length"] + list(MEASURES)
  run_folder.save_csv(paths["csv"], [{"canary": i, **{k: float(per_canary[k][i]) for k in columns}}
                                     for i in range(n)])
  run_folder.save_text(paths["md"], markdown(structure, cells, differences, oracle, gaps, title))
  run_folder.save_figure(paths["png"], figure(per_canary, cells, oracle, gaps, title))
  key = metrics.fpr_key(FPRS[0])
  lines = [f"median L x co-movement {structure['co_movement_x_length']['median']:.3g} (1 = independent tokens), "
           f"median kappa {structure['kappa']['median']:.3g}, median IN/OUT variance "
           f"{structure['variance_ratio']['median']:.3g}, median excess kurtosis "
           f"{structure['excess_kurtosis']['median']:.3g}",
           f"best variant at {100 * FPRS[0]:g}% FPR:"]
  for c in cell_names(gaps):
    if not all(cells[c][v]["resolved"][key] for v, _, _ in VARIANTS):
      lines.append(f"  {c}: n/r (TPR at {100 * FPRS[0]:g}% FPR needs >= {metrics.min_negatives(FPRS[0]):,} "
                   "non-member pairs)")
      continue
    tpr = {v: cells[c][v]["tpr"][key] for v, _, _ in VARIANTS}
    top = max(tpr.values())
    best = [v for v, x in tpr.items() if x == top]
    lines.append(f"  {c}: " + (f"{best[0]} ({_pct(top)}%)" if len(best) == 1 else
                               f"{len(best)} variants tie at {_pct(top)}%"))
  return list(paths.values()), lines
