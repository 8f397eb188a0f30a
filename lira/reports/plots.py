"""Figures: log-log ROC curves, TPR versus reduced length, TPR versus number of shadow models (Rossi et al. 2025).

Each of the six variants has one colour (its covariance estimator) and one line style (shared solid, class-wise
dashed) in every figure, the covariance-error figures of lira/reports/cov_plots.py included, whatever subset is drawn.
"""

import collections
import textwrap

import numpy as np
# matplotlib (~0.3 s to import) is imported inside the functions that draw: a command that draws nothing skips it

from lira import metrics
from lira.scoring import VARIANTS

COVARIANCE_COLORS = {"univariate": "tab:blue", "independent": "tab:orange", "oas": "tab:green"}
MODE_LINESTYLES = {"shared": "-", "classwise": "--"}
LABELS = {"univariate": "Univariate", "independent": "Independent", "oas": "OAS", "classwise": "Class-Wise",
          "shared": "Shared", "in": "IN", "out": "OUT"}
# Reduction strategies draw in colours no variant uses, so a colour always means one thing.
STRATEGY_STYLES = {"group": ("tab:purple", "o"), "min": ("tab:brown", "v"), "max": ("tab:olive", "^")}
FPR_FLOOR = 1e-5
_UNKNOWN = {"color": "black", "ls": ":"}


def variant_style(covariance, shared):
  """Colour and line style of a variant: colour by covariance estimator, solid if shared, dashed if class-wise."""
  return {"color": COVARIANCE_COLORS.get(covariance, "black"),
          "ls": MODE_LINESTYLES["shared" if shared else "classwise"]}


VARIANT_STYLES = {name: variant_style(covariance, shared) for name, covariance, shared in VARIANTS}
# The sweep's markers: where curves of equal TPR coincide (every variant at 100%), each keeps its own marker, set a
# little apart from the others' on the x axis (DODGE of the axis' span in octaves per curve: about a marker's width).
VARIANT_MARKERS = {"Univariate Class-Wise": "v", "Univariate Shared": "^", "Independent Class-Wise": "s",
                   "Independent Shared": "D", "OAS Class-Wise": "o", "OAS Shared": "P"}
_MORE_MARKERS = ("X", "*", "h", "<", ">", "p", "d", "H")
DODGE = 0.014
def style_of(name):
  """Colour and line style of a variant by its Table II name (black dotted for any other label)."""
  return VARIANT_STYLES.get(str(name), _UNKNOWN)


def _hollow(color, ms=7):
  return {"ls": "none", "marker": "o", "ms": ms, "mfc": "white", "mec": color, "mew": 1.3, "zorder": 3}


def _log2_axis(ax, values, label):
  """A log2 x axis with a tick at each of `values` (the counts or lengths that have a point), and no others."""
  ax.set_xscale("log", base=2)
  ax.set_xticks(values, [str(v) for v in values])
  ax.minorticks_off()
  ax.set_xlabel(label)
  ax.grid(True, alpha=0.3)


def summary_curve(label, summary):
  """One roc_figure curve from a lira.metrics.summarize dict: (label, fpr, tpr, auc, n_neg)."""
  return (label, summary["roc"]["fpr"], summary["roc"]["tpr"], summary["auc"], summary["n_neg"])


def _needs(fpr, have):
  """The tables' footnote (lira/reports/tables.py): what resolving fpr takes; have = the negatives available."""
  return f"TPR@{100 * float(fpr):g}% FPR needs >= {metrics.min_negatives(fpr):,} negatives; available {have}"


def _unresolved_words(rows):
  """Legend text for the unresolved points of rows with fpr and n_neg (as lira.evaluation writes them)."""
  rows = [r for r in rows if not r.get("resolved", True) and r.get("tpr") is not None and np.isfinite(float(r["tpr"]))]
  if not rows or any(r.get("fpr") is None or r.get("n_neg") is None for r in rows):
    return "not resolved"
  counts = sorted({int(r["n_neg"]) for r in rows})
  have = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,} to {counts[-1]:,}"
  return f"not resolved ({_needs(rows[0]['fpr'], have)})"


def _have(named_counts, curves):
  """'48' when every curve has the same number of negatives, else the unresolved ones by name: 'B: 48, C: 50'."""
  counts = {int(c[4]) for c in curves}
  if len(counts) == 1:
    return f"{counts.pop():,}"
  return ", ".join(f"{name}: {int(n):,}" for name, n in named_counts)


def roc_figure(curves, title=None, fpr_min=None, styles=None, legend_fpr=1e-3):
  """Log-log ROC curves; curves = [(label, fpr, tpr, auc_or_None, n_neg)] (summary_curve makes one from a summary),
  legend with AUC and TPR at legend_fpr.

  The legend prints the TPR at legend_fpr only where the curve's n_neg negatives resolve that FPR
  (lira.metrics.is_resolved), `n/r` with the tables' footnote otherwise, as the tables do.
  styles maps a label to its colour and line style (default: the variant's, black dotted for other labels)."""
  from matplotlib.figure import Figure
  styles = styles or {}
  if any(len(c) != 5 for c in curves):
    raise ValueError("roc_figure: each curve is (label, fpr, tpr, auc, n_neg); n_neg (the negatives behind the curve) "
                     "tells whether its TPR at legend_fpr is resolved (plots.summary_curve builds one from a summary)")
  curves = [(label, np.asarray(f, dtype=np.float64), np.asarray(t, dtype=np.float64), a, n)
            for label, f, t, a, n in curves]
  if fpr_min is None:
    # Below the smallest nonzero FPR (about 1/n_neg) nothing is resolved; show down to 1e-5 at most.
    positive = [f[f > 0].min() for _, f, _, _, _ in curves if (f > 0).any()]
    fpr_min = max(FPR_FLOOR, min(positive)) if positive else FPR_FLOOR
  unresolved = [(str(label), n_neg) for label, _, _, _, n_neg in curves if not metrics.is_resolved(n_neg, legend_fpr)]
  fig = Figure(figsize=(5.6, 5.2 + 0.17 * (len(curves) + 1 + bool(unresolved))), layout="constrained")
  ax = fig.subplots()
  ax.plot([fpr_min, 1.0], [fpr_min, 1.0], ls=":", color="gray", lw=1, label="chance")
  for label, fpr_G, tpr_G, auc_value, n_neg in curves:
    parts = [str(label)]
    if auc_value is not None:
      parts.append(f"AUC {auc_value:.4f}")
    if metrics.is_resolved(n_neg, legend_fpr):
      parts.append(f"TPR@{100 * legend_fpr:g}% {100 * metrics.curve_tpr_at_fpr(fpr_G, tpr_G, legend_fpr):.2f}%")
    else:
      parts.append(f"TPR@{100 * legend_fpr:g}% n/r")
    # Points at FPR or TPR 0 sit on the axis edge instead of vanishing off the log scale.
    ax.plot(np.maximum(fpr_G, fpr_min), np.maximum(tpr_G, fpr_min), lw=1.5, label=", ".join(parts),
            **styles.get(label, style_of(label)))
  if unresolved:
    ax.plot([], [], ls="none", label=f"n/r = not resolved: {_needs(legend_fpr, _have(unresolved, curves))}")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(fpr_min, 1.0)
  ax.set_ylim(fpr_min, 1.0)
  ax.set_xlabel("False positive rate")
  ax.set_ylabel("True positive rate")
  if title:
    ax.set_title(title, fontsize=9)
  # Below the axes: a legend inside would hide curves wherever they run.
  fig.legend(loc="outside lower center", fontsize=7.5, frameon=False)
  ax.set_aspect("equal")
  ax.grid(True, which="major", alpha=0.3)
  return fig


def _ci(row):
  lo, hi = row.get("tpr_ci_low"), row.get("tpr_ci_high")
  return (None, None) if lo is None or hi is None or not np.isfinite([lo, hi]).all() else (100 * lo, 100 * hi)


def length_grid_figure(rows, fpr_label="TPR @ 0.01% FPR", title=None):
  """TPR (%) versus reduced length K, one panel per covariance, one line per strategy (Figs. 11-14).

  The panel's variant without reduction is a horizontal line in its fixed style; bars and the band around it are
  the rows' bootstrap intervals (tpr_ci_low/high) when present. What the tables mark n/r (row["resolved"] False: the
  negatives do not resolve the FPR) is drawn hollow (markers) or dotted (lines: the baseline, and a strategy's line
  wherever it touches an unresolved point), said so in the legend with the tables' footnote.
  """
  from matplotlib.figure import Figure
  from matplotlib.lines import Line2D
  covariances = list(dict.fromkeys(r["covariance"] for r in rows))
  shared = bool(rows[0].get("shared", True))
  fig = Figure(figsize=(4.0 * len(covariances) + 1.0, 4.6), layout="constrained")
  axes = fig.subplots(1, len(covariances), sharey=True, squeeze=False)[0]
  handles, any_ci, any_unresolved = {}, False, False
  strategies = [s for s in STRATEGY_STYLES if any(r["strategy"] == s for r in rows)]
  for ax, covariance in zip(axes, covariances):
    style = variant_style(covariance, shared)
    name = f"{LABELS.get(covariance, covariance)} {LABELS['shared' if shared else 'classwise']}"
    for r in rows:
      if r["strategy"] == "none" and r["covariance"] == covariance:
        if r.get("resolved", True):
          handles[f"no reduction, {name}"] = ax.axhline(100 * r["tpr"], lw=1.4, **style)
        else:
          any_unresolved = True
          handles[f"no reduction, {name} (n/r)"] = ax.axhline(100 * r["tpr"], lw=1.4, **{**style, "ls": ":"})
        lo, hi = _ci(r)
        if lo is not None:
          ax.axhspan(lo, hi, color=style["color"], alpha=0.12, lw=0)
    lengths = sorted({int(r["K"]) for r in rows if r["strategy"] != "none" and r["covariance"] == covariance
                      and r["tpr"] is not None and np.isfinite(float(r["tpr"]))})
    for i, strategy in enumerate(strategies):
      color, marker = STRATEGY_STYLES[strategy]
      pts = sorted((r for r in rows if r["strategy"] == strategy and r["covariance"] == covariance),
                   key=lambda r: r["K"])
      # Strategies sit slightly apart on the x axis so their intervals do not hide each other.
      k_K = np.array([r["K"] for r in pts], np.float64) * 2.0 ** (0.06 * (i - (len(strategies) - 1) / 2))
      y_K = np.array([100 * r["tpr"] for r in pts])
      cis = [_ci(r) for r in pts]
      open_K = np.array([not r.get("resolved", True) for r in pts], bool)
      # Solid between resolved points; a segment that touches an unresolved point is dotted, its marker hollow.
      ax.plot(k_K, y_K, color=color, lw=1.4, ls=":")
      ax.plot(k_K, np.where(open_K, np.nan, y_K), color=color, marker=marker, ms=4.5, lw=1.4)
      handles.setdefault(strategy, Line2D([], [], color=color, marker=marker, ms=4.5, lw=1.4))
      if all(lo is not None for lo, _ in cis):
        any_ci = True
        err = np.array([[y - lo, hi - y] for y, (lo, hi) in zip(y_K, cis)]).T
        ax.errorbar(k_K, y_K, yerr=np.maximum(err, 0), fmt="none", ecolor=color, elinewidth=0.9, capsize=2.5)
      if open_K.any():
        any_unresolved = True
        ax.plot(k_K[open_K], y_K[open_K], **{**_hollow(color, 6), "marker": marker})
    _log2_axis(ax, lengths, "reduced length K")
    ax.set_title(name, fontsize=10, color=style["color"])
  axes[0].set_ylabel(f"{fpr_label} (%)")
  legend = [(handles[s], f"{s}:K") for s in strategies] + [(h, k) for k, h in handles.items() if k not in strategies]
  if any_ci:
    legend.append((Line2D([], [], color="0.3", marker="|", ms=10, mew=1.2, ls="none"), "bars, band: 95% bootstrap CI"))
  if any_unresolved:
    legend.append((Line2D([], [], **{**_hollow("0.3", 6), "ls": ":", "color": "0.3"}),
                   "hollow, dotted: " + _unresolved_words(rows)))
  fig.legend(*zip(*legend), loc="outside lower center", ncol=3, fontsize=8, frameon=False)
  if title:
    fig.suptitle(title, fontsize=9)
  return fig


def sweep_figure(rows, ylabel="TPR @ 0.01% FPR", title=None,
                 xlabel="models per subset m (each target: m-1 shadow models)", styles=None):
  """TPR (%) versus number of models m: mean over draws with a min-max band, one line per variant (Fig. 5).

  Every curve stays visible where curves coincide: each variant has its own marker (VARIANT_MARKERS), its points sit
  a little apart from the next curve's around the m they belong to (DODGE), and lines drawn earlier are wider, so that a
  line drawn over another of equal values leaves it showing on both sides. Points whose target FPR is not resolved
  by the negatives available (row["resolved"] False in any draw: the table's n/r) are hollow, said so in the legend
  with the table's footnote; undefined points (tpr NaN or None: too few models of a class) are left out, and a count
  with no point in any curve has no tick, the legend naming it. styles {row name: matplotlib style} for rows other
  than the variants (RMIA).
  """
  from matplotlib.figure import Figure
  from matplotlib.lines import Line2D
  from matplotlib.patches import Patch
  fig = Figure(figsize=(7.6, 4.2), layout="constrained")
  ax = fig.subplots()
  by_variant = collections.defaultdict(lambda: collections.defaultdict(list))
  resolved = collections.defaultdict(lambda: collections.defaultdict(list))
  for row in rows:
    tpr = row["tpr"]
    if tpr is not None and np.isfinite(float(tpr)):
      by_variant[row["variant"]][int(row["m"])].append(100 * float(tpr))
      resolved[row["variant"]][int(row["m"])].append(bool(row.get("resolved", True)))
  any_unresolved = False
  order = {name: i for i, (name, _, _) in enumerate(VARIANTS)}
  drawn = sorted(by_variant, key=lambda v: (order.get(v, len(order)), str(v)))
  more = iter(_MORE_MARKERS * len(drawn))
  with_points = sorted({m for by_m in by_variant.values() for m in by_m})
  span = max(np.log2(max(with_points) / min(with_points)), 1.0) if with_points else 1.0
  step = min(DODGE * span, 0.32 / max(len(drawn) - 1, 1))  # many curves: at most a third of an octave in all
  for i, variant in enumerate(drawn):
    by_m = by_variant[variant]
    style = (styles or {}).get(variant) or style_of(variant)
    marker = VARIANT_MARKERS.get(str(variant)) or next(more)
    m_S = np.array(sorted(by_m))
    x_S = m_S * 2.0 ** (step * (i - (len(drawn) - 1) / 2))
    y_S = [np.asarray(by_m[m]) for m in m_S]
    mean_S = np.array([y.mean() for y in y_S])
    open_S = np.array([not all(resolved[variant][m]) for m in m_S])
    lw = 1.2 + 0.9 * (len(drawn) - 1 - i) / max(len(drawn) - 1, 1)
    ax.plot(x_S, mean_S, lw=lw, label=str(variant), marker=marker, ms=5, markevery=list(np.flatnonzero(~open_S)),
            **style)
    ax.fill_between(x_S, [y.min() for y in y_S], [y.max() for y in y_S], color=style["color"], alpha=0.15, lw=0)
    if open_S.any():
      any_unresolved = True
      ax.plot(x_S[open_S], mean_S[open_S], **{**_hollow(style["color"], 6), "marker": marker})
  counts = sorted({int(r["m"]) for r in rows})
  _log2_axis(ax, with_points, xlabel)
  ax.set_ylabel(f"{ylabel} (%)")
  handles, labels = ax.get_legend_handles_labels()
  handles.append(Patch(color="0.5", alpha=0.3, lw=0))
  labels.append("band: min-max over draws")
  if any_unresolved:
    handles.append(Line2D([], [], **_hollow("0.3")))
    # Wrapped: the legend stands beside the axes, and a wide one would squeeze them.
    labels.append(textwrap.fill("hollow: " + _unresolved_words(rows), 34))
  empty = [m for m in counts if m not in with_points]
  if empty:
    handles.append(Line2D([], [], ls="none"))
    labels.append(textwrap.fill(f"no point at m = {', '.join(map(str, empty))}: too few models of a class", 34))
  fig.legend(handles, labels, loc="outside right upper", fontsize=8)
  if title:
    ax.set_title(title, fontsize=9)
  return fig
