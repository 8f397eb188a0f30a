"""The offline pretraining benchmark's figure (experiments/pretrain_benchmark.py): each attack's AUC against the
pretraining epochs, with its bootstrap interval over texts, and the distribution-shift split's AUC beside its epoch."""

import numpy as np
# matplotlib (~0.3 s to import) is imported inside the function that draws: a command that draws nothing skips it

# Attacks sit this far apart (in octaves of the epoch axis) around their epoch, so their bars do not hide each other.
DODGE = 0.018


def interval(ci):
  """(low, high) of an [low, high] interval, or None where there is none (no bootstrap, or an undefined one)."""
  if ci is None or any(v is None for v in ci) or not np.isfinite(np.asarray(ci, np.float64)).all():
    return None
  return float(ci[0]), float(ci[1])


def auc_figure(aucs, intervals, epochs, shift_epoch, title, styles=None, shift="shift"):
  """AUC (y) against epochs (log2 x axis), one line per attack, bars for its 95% bootstrap intervals; the shift
  split's AUC (column `shift`) as a cross left of its epoch. aucs / intervals: {column: {attack name: AUC / [low,
  high] or None}}, columns epoch_<e> and `shift`; styles: {attack name: {color, ls}}."""
  from matplotlib.figure import Figure
  from matplotlib.lines import Line2D
  styles = styles or {}
  names = list(dict.fromkeys(n for col in aucs.values() for n in col))
  fig = Figure(figsize=(9.0, 7.0), layout="constrained")
  ax = fig.subplots()
  lowest = min([v for col in aucs.values() for v in col.values()], default=0.5)
  any_interval = False
  for i, name in enumerate(names):
    style = {"color": f"C{i % 10}", "ls": "-", **styles.get(name, {})}
    factor = 2.0 ** (DODGE * (i - (len(names) - 1) / 2))
    x_E = np.array(epochs, np.float64) * factor
    y_E = np.array([aucs[f"epoch_{e}"].get(name, np.nan) for e in epochs], np.float64)
    ax.plot(x_E, y_E, marker="o", ms=4, lw=1.4, label=name, **style)
    points = [(x_E[j], aucs[f"epoch_{e}"].get(name), intervals.get(f"epoch_{e}", {}).get(name))
              for j, e in enumerate(epochs)]
    if name in aucs.get(shift, {}):
      points.append((shift_epoch * 0.8 * factor, aucs[shift][name], intervals.get(shift, {}).get(name)))
      ax.plot([points[-1][0]], [points[-1][1]], "x", color=style["color"], ms=8, mew=2)
    for x, y, ci in points:
      low_high = interval(ci)
      if y is None or low_high is None:
        continue
      any_interval = True
      lowest = min(lowest, low_high[0])
      ax.errorbar([x], [y], yerr=[[max(y - low_high[0], 0)], [max(low_high[1] - y, 0)]], fmt="none",
                  ecolor=style["color"], elinewidth=1.0, capsize=2.5)
  handles, labels = ax.get_legend_handles_labels()
  handles.append(Line2D([], [], color="0.3", ls="none", marker="x", ms=8, mew=2))
  labels.append(f"SHIFTED split (epoch {shift_epoch}; drawn left of it)")
  if any_interval:
    handles.append(Line2D([], [], color="0.3", ls="none", marker="|", ms=10, mew=1.2))
    labels.append("bars: 95% bootstrap interval over texts")
  ax.axhline(0.5, color="grey", lw=0.8, ls=":")
  ax.set_xscale("log", base=2)
  ax.set_xticks(epochs, [str(e) for e in epochs])
  ax.minorticks_off()
  ax.set(xlabel="pretraining epochs", ylabel="AUC (members vs non-members)", ylim=(min(0.3, lowest - 0.05), 1.02))
  ax.grid(True, alpha=0.3)
  ax.set_title(title, fontsize=9)
  # below the axes, so the axes (and the title's long lines above them) take the figure's whole width
  fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8)
  return fig
