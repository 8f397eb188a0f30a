"""The DP audit's figure: each row's empirical epsilon lower bound against the accountant's epsilon of its run.

A row keeps its colour from the other figures (lira/reports/plots.py: colour by covariance estimator, an attack's own
colour); its marker tells shared (circle) from class-wise (square) variants and reference-free attacks (diamond).
"""

import math

# matplotlib (~0.3 s to import) is imported inside the functions that draw: a command that draws nothing skips it
from lira.reports import plots
from lira.scoring import VARIANTS

NO_DP = "no DP"
_SHARED = {name: shared for name, _, shared in VARIANTS}


def _marker(name):
  return {True: "o", False: "s"}.get(_SHARED.get(str(name)), "D")


def accountant_epsilon(src):
  """The accountant's epsilon of an audited source; infinity for a run without DP."""
  return math.inf if src["accountant"] is None else float(src["accountant"]["epsilon"])


def bounds_figure(sources, title=None, styles=None):
  """x: each source's accountant epsilon (a run without DP at the right edge, labelled "no DP"); y: each row's bound
  pooled over all pairs (filled marker, joined across runs) and its per-model median to max (bar); the y = x
  diagonal, above which a bound would contradict the accountant. styles: {row name: {color, ls}}."""
  from matplotlib.figure import Figure
  from matplotlib.lines import Line2D
  styles = styles or {}
  eps_S = [accountant_epsilon(src) for src in sources]
  finite = sorted({e for e in eps_S if math.isfinite(e)})
  x_top = finite[-1] if finite else 0.0
  x_nodp = 1.25 * x_top if x_top > 0 else 1.0
  x_S = [e if math.isfinite(e) else x_nodp for e in eps_S]
  names = list(dict.fromkeys(row["name"] for src in sources for row in src["rows"]))
  # Rows sit side by side at one x, so their bars do not hide each other; without a DP run the axis is theirs.
  step = 0.018 * x_nodp if finite else 0.7 / max(len(names), 1)
  fig = Figure(figsize=(6.4, 4.6 + 0.17 * (len(names) // 2 + 3)), layout="constrained")
  ax = fig.subplots()
  handles = []
  if finite:
    handles.append(ax.plot([0, x_top], [0, x_top], ls=":", color="gray", lw=1,
                           label="y = x: the accountant's epsilon")[0])
  y_top = x_top
  for i, name in enumerate(names):
    style = styles.get(name, plots.style_of(name))
    dx = (i - (len(names) - 1) / 2) * step
    points = sorted((x + dx, row) for x, src in zip(x_S, sources) for row in src["rows"] if row["name"] == name)
    for x, row in points:  # the bar just right of its pooled marker
      summary = row["per_model_summary"]
      ax.plot([x + step / 3] * 2, [summary["median"], summary["max"]], color=style["color"], ls=style["ls"], lw=1.4,
              marker="_", ms=6)
      y_top = max(y_top, summary["max"], row["pooled"].epsilon)
    # Runs with DP joined by a line; a run without DP stands apart, at the right edge.
    dp = [(x, row["pooled"].epsilon) for x, row in points if x < x_nodp - step * len(names)]
    if len(dp) > 1:
      ax.plot(*zip(*dp), color=style["color"], ls=style["ls"], lw=0.8)
    ax.plot([x for x, _ in points], [row["pooled"].epsilon for _, row in points], ls="none", color=style["color"],
            marker=_marker(name), ms=6)
    handles.append(Line2D([], [], color=style["color"], ls=style["ls"], lw=0.8, marker=_marker(name), ms=6,
                          label=name))
  handles.append(Line2D([], [], color="0.3", ls="none", marker="o", ms=6, label="marker: pooled over all pairs"))
  handles.append(Line2D([], [], color="0.3", lw=1.4, marker="_", ms=7, label="bar: per model, median to max"))
  ticks = {x: f"{x:.3g}" for x in finite}
  if finite and min(finite) > 0.1 * x_nodp:  # the origin, unless a run's tick would overprint it
    ticks[0.0] = "0"
  if len(finite) < len(eps_S):
    ticks[x_nodp] = NO_DP
    if finite:  # where the axis stops measuring epsilon
      ax.axvline((x_top + x_nodp) / 2, color="0.6", lw=0.8, ls="--")
  ax.set_xticks(list(ticks), list(ticks.values()))
  pad = step * (len(names) / 2 + 1)
  ax.set_xlim(-pad if finite else x_nodp - pad, x_nodp + pad)
  ax.set_ylim(0.0, 1.12 * y_top if y_top > 0 else 1.0)
  ax.set_xlabel("accountant's epsilon (DP-SGD guarantee of the run)")
  ax.set_ylabel("empirical epsilon lower bound")
  ax.grid(True, alpha=0.3)
  if title:
    ax.set_title(title, fontsize=9)
  fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=7.5, frameon=False)
  return fig
