"""Figures of the covariance-error analysis (Rossi et al. 2025, Figs. 2, 3, 6, 8), in lira.reports.plots' variant styles."""

import numpy as np
# matplotlib (~0.3 s to import) is imported inside the functions that draw: a command that draws nothing skips it

from lira.cov_error import CLASSES, ESTIMATORS, MODES
from lira.reports.plots import LABELS, variant_style

BAND = "band: \u00b1 1 std over draws (m = M: one draw)"


def _log2_axis(ax, m):
  ax.set_xscale("log", base=2)
  ax.set_xticks(m, [str(x) for x in m])
  ax.minorticks_off()
  ax.set_xlabel("number of shadow models m")
  ax.grid(alpha=0.3)


def _panels(title, subtitle=None, sharey=True, width=10.5):
  from matplotlib.figure import Figure
  fig = Figure(figsize=(width, 4.8), layout="constrained")
  axes = fig.subplots(1, 2, sharey=sharey)
  fig.suptitle(f"{title}\n{subtitle}" if subtitle else title, fontsize=10)
  return fig, axes


def _legend(fig, axes):
  from matplotlib.patches import Patch
  handles, labels = axes[0].get_legend_handles_labels()
  fig.legend(handles + [Patch(color="0.5", alpha=0.3, lw=0)], labels + [BAND], loc="outside lower center",
             ncol=4, fontsize=8, frameon=False)


def plot_errors(aggregated, subtitle=None):
  """Covariance approximation error vs number of shadow models, IN and OUT panels (Figs. 2 and 6a)."""
  fig, axes = _panels("Covariance approximation error (Frobenius, vs all-models MLE)", subtitle)
  for ax, c in zip(axes, CLASSES):
    for e in ESTIMATORS:
      for md in MODES:
        rs = sorted((r for r in aggregated if r["class"] == c and r["estimator"] == e and r["mode"] == md),
                    key=lambda r: r["m"])
        m = np.array([r["m"] for r in rs])
        mean = np.array([r["error_mean"] for r in rs], np.float64)
        std = np.array([r["error_std"] for r in rs], np.float64)
        style = variant_style(e, md == "shared")
        ax.plot(m, mean, marker="o", ms=4, label=f"{LABELS[e]} {LABELS[md]}", **style)
        ax.fill_between(m, mean - std, mean + std, color=style["color"], alpha=0.15, lw=0)
    _log2_axis(ax, m)
    ax.set_title(LABELS[c])
  axes[0].set_ylabel("covariance approximation error")
  _legend(fig, axes)
  return fig


def plot_relative_errors(relative, subtitle=None):
  """Relative covariance error (class-wise - shared) / shared vs number of shadow models (Figs. 3 and 6b)."""
  fig, axes = _panels("Relative covariance error (class-wise - shared) / shared; > 0: shared is closer", subtitle)
  for ax, c in zip(axes, CLASSES):
    for e in ESTIMATORS:
      rs = sorted((r for r in relative if r["class"] == c and r["estimator"] == e), key=lambda r: r["m"])
      m = np.array([r["m"] for r in rs])
      mean = np.array([r["relative_error_mean"] for r in rs], np.float64)
      std = np.array([r["relative_error_std"] for r in rs], np.float64)
      color = variant_style(e, True)["color"]
      ax.plot(m, mean, marker="o", ms=4, color=color, label=LABELS[e])
      ax.fill_between(m, mean - std, mean + std, color=color, alpha=0.15, lw=0)
    ax.axhline(0.0, color="k", lw=0.8)
    _log2_axis(ax, m)
    ax.set_title(LABELS[c])
  axes[0].set_ylabel("relative covariance error")
  _legend(fig, axes)
  return fig


def plot_covariance_heatmap(cov_in_TxT, cov_out_TxT, canary, max_positions=64, subtitle=None, counts=None, unit=None,
                            row_width=None, title=None):
  """Heatmaps of one canary's gold-standard IN and OUT covariances on one colour scale (Fig. 8).

  counts ({"in": n, "out": n}) and unit label the panels and the colour bar; row_width (W of an image run) draws
  a line where each image row starts, since position t is pixel (t // W, t % W).
  """
  shown = min(max_positions, len(cov_in_TxT))
  covs = [np.asarray(c)[:max_positions, :max_positions] for c in (cov_in_TxT, cov_out_TxT)]
  # One symmetric scale for both panels, so equal colours mean equal covariances.
  vmax = max(float(np.abs(c).max()) for c in covs) or 1.0
  positions = f"all {shown} positions" if shown == len(cov_in_TxT) else f"first {shown} of {len(cov_in_TxT)} positions"
  fig, axes = _panels(title or f"Gold-standard covariance (all-models MLE), canary {canary}, {positions}",
                      subtitle, sharey=False, width=9.5)
  for ax, c, cov in zip(axes, CLASSES, covs):
    im = ax.imshow(cov, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
    ax.set_title(f"{LABELS[c]} ({counts[c]} models)" if counts else LABELS[c])
    ax.set_xlabel("position")
    if row_width and row_width < shown:
      for start in range(row_width, shown, row_width):
        ax.axhline(start - 0.5, color="0.3", lw=0.6, ls=":")
        ax.axvline(start - 0.5, color="0.3", lw=0.6, ls=":")
  axes[0].set_ylabel("position")
  label = f"covariance ({unit})" if unit else "covariance"
  if row_width and row_width < shown:
    label += f"; dotted: image row starts (W={row_width})"
  fig.colorbar(im, ax=list(axes), shrink=0.85, label=label)
  return fig
