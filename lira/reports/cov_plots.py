"""Figures of the covariance-error analysis (Rossi et al. 2025, Figs. 2, 3, 6, 8), in lira.reports.plots' variant styles."""

import numpy as np
# matplotlib (~0.3 s to import) is imported inside the functions that draw: a command that draws nothing skips it

from lira.cov_error import CLASSES, ESTIMATORS, MODES
from lira.reports.plots import LABELS, variant_style

BAND = "band: \u00b1 1 std over draws (m = M: one draw)"
HEATMAP_PERCENTILE = 99


def _log2_axis(ax, m):
  """A log2 axis of model counts with a tick at each count in m (those with a value in some curve), and no others."""
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


def _counts_with_values(rows, key):
  """The counts m at which some row has a finite `key` (a count where every estimate is undefined gets no tick)."""
  return sorted({int(r["m"]) for r in rows if r[key] is not None and np.isfinite(float(r[key]))})


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
    _log2_axis(ax, _counts_with_values(aggregated, "error_mean"))
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
    _log2_axis(ax, _counts_with_values(relative, "relative_error_mean"))
    ax.set_title(LABELS[c])
  axes[0].set_ylabel("relative covariance error")
  _legend(fig, axes)
  return fig


def robust_limit(cov_TxT, percentile=HEATMAP_PERCENTILE):
  """A diverging colour scale's limit for a covariance matrix: the percentile of its |off-diagonal| entries, so that
  one extreme entry (a variance, or one pixel pair) does not wash out the rest; its largest |entry| where every
  off-diagonal entry is 0, and 1 where the matrix is all zeros."""
  cov_TxT = np.asarray(cov_TxT, np.float64)
  off = np.abs(cov_TxT[~np.eye(len(cov_TxT), dtype=bool)])
  off = off[np.isfinite(off)]
  limit = float(np.percentile(off, percentile)) if off.size else 0.0
  if limit > 0:
    return limit
  finite = np.abs(cov_TxT[np.isfinite(cov_TxT)])
  return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def _extend(cov, limit):
  """Colour-bar arrows for the entries beyond +-limit."""
  low, high = bool((cov < -limit).any()), bool((cov > limit).any())
  return {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(low, high)]


def plot_covariance_heatmap(cov_in_TxT, cov_out_TxT, canary, max_positions=64, subtitle=None, counts=None, unit=None,
                            row_width=None, title=None):
  """Heatmaps of one canary's gold-standard IN and OUT covariances (Fig. 8), each on its own symmetric colour scale.

  A memorised canary's IN covariance is orders of magnitude below its OUT covariance, and one variance can dwarf
  every other entry, so each panel's scale ends at the 99th percentile of its |off-diagonal| entries (robust_limit;
  arrows on the colour bar: entries beyond, the diagonal's variances among them, their largest in the panel's title).
  counts ({"in": n, "out": n}) and unit label the panels and the colour bars; row_width (W of an image run) draws a
  line where each image row starts, since position t is pixel (t // W, t % W).
  """
  shown = min(max_positions, len(cov_in_TxT))
  covs = [np.asarray(c, np.float64)[:max_positions, :max_positions] for c in (cov_in_TxT, cov_out_TxT)]
  positions = f"all {shown} positions" if shown == len(cov_in_TxT) else f"first {shown} of {len(cov_in_TxT)} positions"
  fig, axes = _panels(title or f"Gold-standard covariance (all-models MLE), canary {canary}, {positions}; each panel "
                      f"on its own scale: \u00b1 the {HEATMAP_PERCENTILE}th percentile of its |off-diagonal| entries",
                      subtitle, sharey=False, width=10.5)
  units = f" {unit}" if unit else ""
  for ax, c, cov in zip(axes, CLASSES, covs):
    limit = robust_limit(cov)
    im = ax.imshow(cov, cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    name = f"{LABELS[c]} ({counts[c]} models)" if counts else LABELS[c]
    ax.set_title(f"{name}\nlargest variance {float(np.nanmax(np.diag(cov))):.3g}{units}", fontsize=10)
    ax.set_xlabel(f"position; dotted: image row starts (W={row_width})" if row_width and row_width < shown
                  else "position")
    if row_width and row_width < shown:
      for start in range(row_width, shown, row_width):
        ax.axhline(start - 0.5, color="0.3", lw=0.6, ls=":")
        ax.axvline(start - 0.5, color="0.3", lw=0.6, ls=":")
    label = f"{LABELS[c]} covariance{f' ({unit})' if unit else ''}, scale \u00b1{limit:.3g}"
    fig.colorbar(im, ax=ax, shrink=0.85, extend=_extend(cov, limit), label=label)
  axes[0].set_ylabel("position")
  return fig
