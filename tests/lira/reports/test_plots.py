"""Tests for lira.reports.plots and lira.reports.cov_plots: figures build from tiny inputs, save as PNG, and keep fixed styles."""

import io

import matplotlib.colors as mcolors
import numpy as np
import pytest

from lira import metrics
from lira.reports import cov_plots
from lira.reports import plots
from lira import scoring as scoring_lib


def _png(fig):
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=50)
  assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def _legend_texts(fig):
  return [t.get_text() for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
          for t in legend.get_texts()]


def _styles(ax):
  """{label: (rgba colour, linestyle)} of the labelled lines of an axes."""
  return {l.get_label(): (mcolors.to_rgba(l.get_color()), l.get_linestyle()) for l in ax.get_lines()
          if not l.get_label().startswith("_")}


def test_variant_styles_are_six_distinct_pairs_matching_the_covariance_error_plots():
  pairs = {(s["color"], s["ls"]) for s in plots.VARIANT_STYLES.values()}
  assert len(plots.VARIANT_STYLES) == 6 and len(pairs) == 6
  assert plots.style_of("OAS Shared") == {"color": "tab:green", "ls": "-"}
  assert plots.style_of("Univariate Class-Wise") == {"color": "tab:blue", "ls": "--"}
  aggregated = [{"m": m, "class": c, "estimator": e, "mode": md, "error_mean": 1.0, "error_std": 0.1}
                for m in (4, 8) for c in ("in", "out") for e in ("univariate", "independent", "oas")
                for md in ("classwise", "shared")]
  lines = _styles(cov_plots.plot_errors(aggregated).axes[0])
  assert lines["OAS Shared"] == (mcolors.to_rgba("tab:green"), "-")
  assert lines["Independent Class-Wise"] == (mcolors.to_rgba("tab:orange"), "--")


def _curve(rng):
  keep_MxN = rng.uniform(size=(4, 50)).argsort(0) < 2
  scores_MxN = rng.normal(size=(4, 50)) + keep_MxN
  fpr, tpr, _ = metrics.roc(scores_MxN, keep_MxN)
  return fpr, tpr, metrics.auc(scores_MxN, keep_MxN), int((~keep_MxN).sum())  # 100 negatives


def test_roc_figure():
  fpr, tpr, auc, n_neg = _curve(np.random.default_rng(0))
  fig = plots.roc_figure([("strong", fpr, tpr, auc, n_neg), ("chance-ish", [0, 0.5, 1], [0, 0.5, 1], None, 2)],
                         title="tiny")
  ax = fig.axes[0]
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  assert ax.get_xlim() == (0.01, 1.0)  # 100 negatives: nothing below 1/100 is resolved
  assert any("AUC" in t and "TPR@0.1%" in t for t in _legend_texts(fig))
  assert ax.get_title() == "tiny"
  _png(fig)


def test_a_variant_keeps_its_colour_whatever_the_subset_drawn():
  fpr, tpr, auc, n_neg = _curve(np.random.default_rng(1))
  names = [v[0] for v in scoring_lib.VARIANTS]
  all_six = _styles(plots.roc_figure([(n, fpr, tpr, auc, n_neg) for n in names]).axes[0])
  two = _styles(plots.roc_figure([(n, fpr, tpr, auc, n_neg) for n in ("OAS Class-Wise", "Independent Shared")]).axes[0])
  sweep_rows = [{"variant": n, "m": m, "draw": 0, "tpr": 0.1, "resolved": True}
                for n in ("Independent Shared", "OAS Class-Wise") for m in (4, 8)]
  sweep = _styles(plots.sweep_figure(sweep_rows).axes[0])
  for name in ("OAS Class-Wise", "Independent Shared"):
    in_six = next(v for k, v in all_six.items() if k.startswith(name + ","))
    assert in_six == next(v for k, v in two.items() if k.startswith(name + ",")) == sweep[name]
  assert len({v for v in all_six.values() if v[1] != "None"}) == 7  # six variants and the chance line


def test_length_grid_figure_draws_percent_intervals_and_a_legend_outside():
  rows = [{"strategy": s, "covariance": c, "shared": True, "K": k, "tpr": 0.1 * i + 0.01 * k,
           "tpr_ci_low": 0.05 * i, "tpr_ci_high": 0.1 * i + 0.02 * k, "resolved": k > 1}
          for i, s in enumerate(("group", "min", "max")) for c in ("independent", "oas") for k in (1, 2, 4, 8)]
  rows += [{"strategy": "none", "covariance": c, "shared": True, "K": 8, "tpr": t, "tpr_ci_low": t - 0.1,
            "tpr_ci_high": t + 0.1, "resolved": True} for c, t in (("independent", 0.3), ("oas", 0.4))]
  fig = plots.length_grid_figure(rows, title="grid")
  axes = [ax for ax in fig.axes if ax.get_xlabel()]
  assert [ax.get_title() for ax in axes] == ["Independent Shared", "OAS Shared"]
  assert all(ax.get_xscale() == "log" and ax.get_legend() is None for ax in axes)  # the legend is the figure's
  assert "(%)" in axes[0].get_ylabel()
  group = next(l for l in axes[0].get_lines() if l.get_marker() == "o" and l.get_linestyle() == "-")
  np.testing.assert_allclose(group.get_ydata(), [np.nan, 2.0, 4.0, 8.0])  # per cent; K=1 is not resolved
  dotted = next(l for l in axes[0].get_lines() if l.get_color() == "tab:purple" and l.get_linestyle() == ":")
  np.testing.assert_allclose(dotted.get_ydata(), [1.0, 2.0, 4.0, 8.0])  # its segment to K=2 is dotted
  baseline = next(l for l in axes[1].get_lines() if len(l.get_xdata()) == 2 and l.get_color() == "tab:green")
  assert baseline.get_ydata()[0] == 40.0 and baseline.get_linestyle() == "-"  # resolved: solid
  assert any("bootstrap" in t for t in _legend_texts(fig)) and any("not resolved" in t for t in _legend_texts(fig))
  _png(fig)


def _few_negatives_summary(n_neg=48, n_pos=48, seed=0):
  """A summary whose TPR at FPR 0 is about a quarter: a quarter of the members score above every non-member."""
  rng = np.random.default_rng(seed)
  labels = np.r_[np.ones(n_pos, bool), np.zeros(n_neg, bool)]
  scores = rng.normal(size=n_pos + n_neg) + np.r_[np.where(np.arange(n_pos) < n_pos // 4, 100.0, 0.0), np.zeros(n_neg)]
  return metrics.summarize(scores[None], labels[None], fprs=(0.001, 0.05), n_boot=0)


def test_roc_legend_prints_n_r_where_the_table_does_and_the_number_where_resolved():
  few = _few_negatives_summary()
  assert few["n_neg"] == 48 and few["tpr"]["0.001"]["tpr"] >= 0.25 and not few["tpr"]["0.001"]["resolved"]
  texts = _legend_texts(plots.roc_figure([plots.summary_curve("OAS Shared", few)]))
  line = next(t for t in texts if t.startswith("OAS Shared"))
  assert line == f"OAS Shared, AUC {few['auc']:.4f}, TPR@0.1% n/r"  # not the TPR at FPR 0
  assert "n/r = not resolved: TPR@0.1% FPR needs >= 1,000 negatives; available 48" in texts
  # The same curve at an FPR its 48 negatives resolve prints the table's number, and no footnote.
  texts = _legend_texts(plots.roc_figure([plots.summary_curve("OAS Shared", few)], legend_fpr=0.05))
  assert f"TPR@5% {100 * few['tpr']['0.05']['tpr']:.2f}%" in texts[1] and not any("n/r" in t for t in texts)
  many = _few_negatives_summary(n_neg=1000, n_pos=1000, seed=1)
  assert many["tpr"]["0.001"]["resolved"]
  texts = _legend_texts(plots.roc_figure([plots.summary_curve("A", many), plots.summary_curve("B", few)]))
  assert f"TPR@0.1% {100 * many['tpr']['0.001']['tpr']:.2f}%" in next(t for t in texts if t.startswith("A,"))
  assert next(t for t in texts if t.startswith("B,")).endswith("TPR@0.1% n/r")
  assert any(t.endswith("needs >= 1,000 negatives; available B: 48") for t in texts)
  _png(plots.roc_figure([plots.summary_curve("A", many), plots.summary_curve("B", few)]))


def test_roc_figure_needs_the_negatives_of_each_curve():
  fpr, tpr, auc, _ = _curve(np.random.default_rng(0))
  with pytest.raises(ValueError, match="n_neg"):
    plots.roc_figure([("strong", fpr, tpr, auc)])


def test_length_grid_draws_an_unresolved_baseline_dotted_and_says_why():
  rows = [{"strategy": s, "covariance": "oas", "shared": True, "K": k, "tpr": 0.1 + 0.01 * k, "tpr_ci_low": None,
           "tpr_ci_high": None, "resolved": False, "fpr": 1e-4, "n_neg": 480} for s in ("group", "none") for k in (1, 2)
          if s == "group" or k == 2]
  fig = plots.length_grid_figure(rows)
  ax = next(ax for ax in fig.axes if ax.get_xlabel())
  baseline = next(l for l in ax.get_lines() if len(l.get_xdata()) == 2 and l.get_color() == "tab:green")
  assert baseline.get_linestyle() == ":"
  assert not [l for l in ax.get_lines() if l.get_linestyle() == "-" and np.isfinite(l.get_ydata()).any()]
  hollow = [l for l in ax.get_lines() if l.get_markerfacecolor() == "white"]
  np.testing.assert_allclose(hollow[0].get_ydata(), [11.0, 12.0])
  texts = _legend_texts(fig)
  assert "no reduction, OAS Shared (n/r)" in texts
  assert "hollow, dotted: not resolved (TPR@0.01% FPR needs >= 10,000 negatives; available 480)" in texts
  _png(fig)


def test_sweep_figure_says_why_its_hollow_points_are_unresolved():
  rows = [{"variant": "OAS Shared", "m": m, "draw": 0, "tpr": 0.1, "resolved": m == 8, "fpr": 1e-3,
           "n_neg": 125 * m} for m in (4, 8)]
  texts = _legend_texts(plots.sweep_figure(rows))
  assert "hollow: not resolved (TPR@0.1% FPR needs >= 1,000 negatives; available 500)" in [
      t.replace("\n", " ") for t in texts]
  rows[1]["resolved"] = True
  rows.append({**rows[0], "m": 6, "n_neg": 750})
  assert any(t.replace("\n", " ").endswith("available 500 to 750)") for t in _legend_texts(plots.sweep_figure(rows)))


def test_sweep_figure():
  rows = [{"variant": v, "m": m, "draw": d, "tpr": 0.01 * m + 0.001 * d + (v == "OAS Shared"), "resolved": m > 2}
          for v in ("Independent Shared", "OAS Shared") for m in (2, 4, 8) for d in range(3)]
  rows.append({"variant": "OAS Shared", "m": 16, "draw": 0, "tpr": None, "resolved": False})  # undefined: left out
  fig = plots.sweep_figure(rows, title="sweep settings")
  ax = fig.axes[0]
  means = [l for l in ax.get_lines() if not l.get_label().startswith("_")]
  assert [l.get_label() for l in means] == ["Independent Shared", "OAS Shared"]
  np.testing.assert_allclose(means[0].get_ydata(), [2.1, 4.1, 8.1])  # per cent, mean over draws
  assert means[0].get_color() != means[1].get_color()
  assert len(ax.collections) == 2  # one min-max band per variant
  hollow = [l for l in ax.get_lines() if l.get_markerfacecolor() == "white"]
  # m = 2, where no draw is resolved: one hollow point on each curve's first point, in the curve's marker
  assert [(list(l.get_xdata()), l.get_marker()) for l in hollow] == [([c.get_xdata()[0]], c.get_marker())
                                                                      for c in means]
  assert abs(np.log2(hollow[0].get_xdata()[0] / 2)) < 0.2
  assert ax.get_title() == "sweep settings"
  assert any("band" in t for t in _legend_texts(fig))
  _png(fig)


def test_sweep_figure_keeps_coincident_curves_visible_and_the_legend_says_which_is_which():
  names = [v[0] for v in scoring_lib.VARIANTS]
  rows = [{"variant": v, "m": m, "draw": 0, "tpr": 1.0, "resolved": True} for v in names for m in (8, 16, 64)]
  fig = plots.sweep_figure(rows)
  ax = fig.axes[0]
  curves = [l for l in ax.get_lines() if not l.get_label().startswith("_")]
  assert [l.get_label() for l in curves] == names
  np.testing.assert_array_equal([l.get_ydata() for l in curves], 100.0)  # every curve at 100%: on one line
  assert len({l.get_marker() for l in curves}) == 6  # ... but each with a marker of its own
  x_VxS = np.array([l.get_xdata() for l in curves])
  assert all(len(set(x_V)) == 6 for x_V in x_VxS.T)  # and its points beside, not on, the others' at each m
  np.testing.assert_allclose(np.exp2(np.log2(x_VxS).mean(axis=0)), [8, 16, 64])  # centred on the m they belong to
  assert np.abs(np.log2(x_VxS / [8, 16, 64])).max() < 0.2  # within a fifth of an octave of it
  widths = [l.get_linewidth() for l in curves]
  assert widths == sorted(widths, reverse=True) and widths[0] > widths[-1]  # a line drawn over another leaves it showing
  legend = fig.legends[0]
  for curve, handle, text in zip(curves, legend.legend_handles, legend.get_texts()):
    assert text.get_text() == curve.get_label()
    assert (handle.get_marker(), handle.get_color(), handle.get_linestyle()) == (
        curve.get_marker(), curve.get_color(), curve.get_linestyle())
  _png(fig)


def test_sweep_axis_ticks_only_the_counts_with_a_point():
  rows = [{"variant": v, "m": m, "draw": 0, "tpr": None if m == 4 or (m == 8 and v == "OAS Class-Wise") else 0.5,
           "resolved": True} for v in ("OAS Shared", "OAS Class-Wise") for m in (4, 8, 16)]
  fig = plots.sweep_figure(rows)
  ax = fig.axes[0]
  assert list(ax.get_xticks()) == [8, 16]  # m = 4: no value in any curve
  assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16"]
  assert "no point at m = 4: too few models of a class" in [t.replace("\n", " ") for t in _legend_texts(fig)]
  class_wise = next(l for l in ax.get_lines() if l.get_label() == "OAS Class-Wise")
  assert len(class_wise.get_xdata()) == 1  # its m = 8 is undefined: left out, while the tick stays for OAS Shared
  aggregated = [{"m": m, "class": c, "estimator": e, "mode": md, "error_std": 0.1,
                 "error_mean": float("nan") if m == 2 else 1.0 / m}
                for m in (2, 4, 8) for c in ("in", "out") for e in ("univariate", "independent", "oas")
                for md in ("classwise", "shared")]
  for ax in cov_plots.plot_errors(aggregated).axes:
    assert list(ax.get_xticks()) == [4, 8]
  relative = [{"m": m, "class": c, "estimator": e, "relative_error_std": 0.01,
               "relative_error_mean": None if m == 2 else 0.1} for m in (2, 4, 8) for c in ("in", "out")
              for e in ("univariate", "independent", "oas")]
  for ax in cov_plots.plot_relative_errors(relative).axes:
    assert list(ax.get_xticks()) == [4, 8]


def test_covariance_heatmap_scales_each_panel_by_its_off_diagonal_entries():
  """A memorised canary: IN covariance 1,000 times below OUT's, and one OUT variance of 80 (a real PixelCNN++ run's).
  On the largest entry's scale both panels would be blank; each panel's scale is its own robust one."""
  rng = np.random.default_rng(0)
  a_TxT = rng.normal(size=(70, 70))
  cov_out = a_TxT @ a_TxT.T / 70
  cov_out[5, 5] = 80.0
  cov_in = 1e-3 * cov_out
  fig = cov_plots.plot_covariance_heatmap(cov_in, cov_out, canary=1, counts={"in": 3, "out": 4}, unit="nats\u00b2")
  images = [im for ax in fig.axes for im in ax.images]
  assert len(images) == 2 and images[0].get_array().shape == (64, 64)
  for image, cov in zip(images, (cov_in, cov_out)):
    off = np.abs(cov[:64, :64][~np.eye(64, dtype=bool)])
    limit = np.percentile(off, 99)
    assert image.get_clim() == pytest.approx((-limit, limit), rel=1e-12)
    assert 0 < (off > limit).sum() <= 0.01 * off.size  # off the scale, where the colour bar's arrows point
  colorbars = [ax for ax in fig.axes if not ax.images]
  assert len(colorbars) == 2  # one per panel: the panels' scales differ by a factor of 1,000
  assert [cb.get_ylabel() for cb in colorbars] == [f"{c} covariance (nats\u00b2), scale \u00b1{im.get_clim()[1]:.3g}"
                                                  for c, im in zip(("IN", "OUT"), images)]
  assert all(im.colorbar.extend == "both" for im in images)
  assert "99th percentile of its |off-diagonal| entries" in fig.get_suptitle()
  assert fig.axes[1].get_title() == "OUT (4 models)\nlargest variance 80 nats\u00b2"  # the entry off the scale
  _png(fig)


def test_robust_limit_falls_back_to_the_largest_entry():
  assert cov_plots.robust_limit(np.diag([2.0, -3.0])) == 3.0  # no off-diagonal covariance: the variances' scale
  assert cov_plots.robust_limit(np.zeros((3, 3))) == 1.0


def test_covariance_error_figures_explain_the_band():
  relative = [{"m": m, "class": c, "estimator": e, "relative_error_mean": 0.1, "relative_error_std": 0.01}
              for m in (4, 8) for c in ("in", "out") for e in ("univariate", "independent", "oas")]
  fig = cov_plots.plot_relative_errors(relative, subtitle="M=8")
  assert any("std over draws" in t for t in _legend_texts(fig))
  assert "M=8" in fig.get_suptitle()
  _png(fig)
