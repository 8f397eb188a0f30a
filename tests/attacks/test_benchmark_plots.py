"""Tests for attacks.benchmark_plots: the offline benchmark's AUC against epochs, with every interval drawn."""

import io

import numpy as np
from matplotlib.container import ErrorbarContainer

from attacks import benchmark_plots

EPOCHS = [1, 2, 4, 8]
NAMES = ["Loss", "Reference", "Blind (text n-grams, no model; 5-fold)"]


def _summary(with_intervals=True):
  """{column: {attack: AUC}} and {column: {attack: [low, high] or [None, None]}}, as the benchmark collects them."""
  aucs, intervals = {}, {}
  for col in [f"epoch_{e}" for e in EPOCHS] + ["shift"]:
    aucs[col] = {n: 0.55 + 0.04 * i + (0.05 * np.log2(int(col[6:])) if col != "shift" else 0.3)
                 for i, n in enumerate(NAMES)}
    intervals[col] = {n: [a - 0.03, a + 0.02] if with_intervals else [None, None] for n, a in aucs[col].items()}
  return aucs, intervals


def _bars(ax):
  """{(x, y): (low, high)} of every error bar drawn."""
  out = {}
  for container in ax.containers:
    if isinstance(container, ErrorbarContainer):
      segment = container.lines[2][0].get_segments()[0]
      out[tuple(segment.mean(axis=0))] = (segment[0][1], segment[1][1])
  return out


def test_every_attack_has_its_interval_at_every_epoch_and_on_the_shift_split():
  aucs, intervals = _summary()
  title = "Offline chitchat benchmark\nGPT-NeoX (3 layers, hidden 192), seed 0; 499 members vs 499 non-members"
  fig = benchmark_plots.auc_figure(aucs, intervals, EPOCHS, 1, title)
  ax = fig.axes[0]
  assert ax.get_title() == title
  assert list(ax.get_xticks()) == EPOCHS and [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
  curves = [l for l in ax.get_lines() if l.get_label() in NAMES]
  assert [l.get_label() for l in curves] == NAMES
  bars = _bars(ax)
  assert len(bars) == len(NAMES) * (len(EPOCHS) + 1)  # each attack, each epoch and the shift split
  for curve, name in zip(curves, NAMES):
    for x, e in zip(curve.get_xdata(), EPOCHS):
      low, high = next(v for (bx, _), v in bars.items() if bx == x)  # the bar at this attack's point
      # 1e-12: matplotlib draws y - (y - low) and y + (high - y), float64 rounding of AUCs near 1
      np.testing.assert_allclose([low, high], intervals[f"epoch_{e}"][name], rtol=0, atol=1e-12)
      assert abs(np.log2(x / e)) < 0.1  # beside its epoch, apart from the other attacks' bars
  assert len({l.get_xdata()[0] for l in curves}) == len(NAMES)
  assert any("bootstrap interval" in t.get_text() for t in fig.legends[0].get_texts())
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=40)


def test_without_a_bootstrap_no_bar_and_no_legend_entry_for_one():
  aucs, intervals = _summary(with_intervals=False)
  fig = benchmark_plots.auc_figure(aucs, intervals, EPOCHS, 1, "no bootstrap")
  assert not _bars(fig.axes[0])
  assert not any("bootstrap" in t.get_text() for t in fig.legends[0].get_texts())
  assert benchmark_plots.interval([None, None]) is None and benchmark_plots.interval(None) is None
  assert benchmark_plots.interval([0.5, 0.6]) == (0.5, 0.6)
