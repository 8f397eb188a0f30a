"""Tests for lira.plots: every figure builds from tiny inputs and saves as PNG."""

import matplotlib.pyplot as plt
import numpy as np

from lira import metrics, plots


def _save(fig, tmp_path, name):
  path = tmp_path / name
  fig.savefig(path, dpi=50)
  plt.close(fig)
  assert path.stat().st_size > 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_roc_figure(tmp_path):
  rng = np.random.default_rng(0)
  keep_MxN = rng.uniform(size=(4, 50)).argsort(0) < 2
  scores_MxN = rng.normal(size=(4, 50)) + keep_MxN
  fpr, tpr, _ = metrics.roc(scores_MxN, keep_MxN)
  curves = [("strong", fpr, tpr, metrics.auc(scores_MxN, keep_MxN)), ("chance-ish", [0, 0.5, 1], [0, 0.5, 1], None)]
  fig = plots.roc_figure(curves, title="tiny")
  ax = fig.axes[0]
  assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
  assert ax.get_xlim() == (0.01, 1.0)  # 100 negatives: nothing below 1/100 is resolved
  assert any("AUC" in t.get_text() and "TPR@0.1%" in t.get_text() for t in ax.get_legend().get_texts())
  _save(fig, tmp_path, "roc.png")


def test_length_grid_figure(tmp_path):
  rows = [{"strategy": s, "covariance": c, "K": k, "tpr": 0.1 * i + 0.01 * k}
          for i, s in enumerate(("group", "min", "max")) for c in ("independent", "oas") for k in (1, 2, 4, 8)]
  rows += [{"strategy": "none", "covariance": c, "K": 128, "tpr": t} for c, t in (("independent", 0.3), ("oas", 0.4))]
  fig = plots.length_grid_figure(rows)
  ax = fig.axes[0]
  assert ax.get_xscale() == "log"
  assert len(ax.get_lines()) == 8  # 3 strategies x 2 covariances + 2 baselines
  _save(fig, tmp_path, "grid.png")


def test_sweep_figure(tmp_path):
  rows = [{"variant": v, "m": m, "draw": d, "tpr": 0.01 * m + 0.001 * d + (v == "oas")}
          for v in ("independent", "oas") for m in (2, 4, 8) for d in range(3)]
  fig = plots.sweep_figure(rows)
  ax = fig.axes[0]
  assert len(ax.get_lines()) == 2 and len(ax.collections) == 2
  np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [0.021, 0.041, 0.081])
  _save(fig, tmp_path, "sweep.png")
