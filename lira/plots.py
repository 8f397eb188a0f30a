"""Figures: log-log ROC curves, TPR versus reduced length, TPR versus number of shadow models (Rossi et al. 2025)."""

import collections

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

STRATEGY_COLORS = {"group": "tab:blue", "min": "tab:orange", "max": "tab:green"}
COVARIANCE_STYLES = {"independent": "-", "oas": "--"}
FPR_FLOOR = 1e-5


def _tpr_at(fpr_G, tpr_G, fpr):
  """Max TPR over points with FPR <= target (as lira.metrics.tpr_at_fpr, on a given curve)."""
  ok_G = fpr_G <= fpr
  return float(tpr_G[ok_G].max()) if ok_G.any() else 0.0


def roc_figure(curves, title=None, fpr_min=None):
  """Log-log ROC curves; curves = [(label, fpr, tpr, auc_or_None)], legend with AUC and TPR@0.1% FPR."""
  curves = [(label, np.asarray(f, dtype=np.float64), np.asarray(t, dtype=np.float64), a) for label, f, t, a in curves]
  if fpr_min is None:
    # Below the smallest nonzero FPR (about 1/n_neg) nothing is resolved; show down to 1e-5 at most.
    positive = [f[f > 0].min() for _, f, _, _ in curves if (f > 0).any()]
    fpr_min = max(FPR_FLOOR, min(positive)) if positive else FPR_FLOOR
  fig, ax = plt.subplots(figsize=(5.0, 5.0))
  ax.plot([fpr_min, 1.0], [fpr_min, 1.0], ls="--", color="gray", lw=1, label="chance")
  for label, fpr_G, tpr_G, auc_value in curves:
    parts = [str(label)]
    if auc_value is not None:
      parts.append(f"AUC {auc_value:.4f}")
    parts.append(f"TPR@0.1% {100 * _tpr_at(fpr_G, tpr_G, 1e-3):.2f}%")
    # Points at FPR or TPR 0 sit on the axis edge instead of vanishing off the log scale.
    ax.plot(np.maximum(fpr_G, fpr_min), np.maximum(tpr_G, fpr_min), lw=1.5, label=", ".join(parts))
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlim(fpr_min, 1.0)
  ax.set_ylim(fpr_min, 1.0)
  ax.set_xlabel("False positive rate")
  ax.set_ylabel("True positive rate")
  if title:
    ax.set_title(title)
  ax.legend(loc="lower right", fontsize=7)
  ax.grid(True, which="major", alpha=0.3)
  fig.tight_layout()
  return fig


def length_grid_figure(rows, fpr_label="TPR @ 0.01% FPR", title=None):
  """TPR versus reduced length K per strategy; solid = independent, dashed = OAS, black = no reduction (Figs. 11-14)."""
  fig, ax = plt.subplots(figsize=(6.0, 4.0))
  lines = collections.defaultdict(list)
  for row in rows:
    if row["strategy"] != "none":
      lines[(row["strategy"], row["covariance"])].append((int(row["K"]), float(row["tpr"])))
  order = {s: i for i, s in enumerate(STRATEGY_COLORS)}
  for (strategy, covariance), points in sorted(lines.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0])):
    k_K, tpr_K = np.array(sorted(points)).T
    ax.plot(k_K, tpr_K, marker="o", ms=3, color=STRATEGY_COLORS.get(strategy),
            ls=COVARIANCE_STYLES.get(covariance, ":"), label=f"{strategy} ({covariance})")
  for row in rows:
    if row["strategy"] == "none":
      ax.axhline(float(row["tpr"]), color="black", lw=1.2, ls=COVARIANCE_STYLES.get(row["covariance"], ":"),
                 label=f"no reduction ({row['covariance']})")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("Reduced length K")
  ax.set_ylabel(fpr_label)
  if title:
    ax.set_title(title)
  ax.legend(fontsize=7)
  ax.grid(True, alpha=0.3)
  fig.tight_layout()
  return fig


def sweep_figure(rows, ylabel="TPR @ 0.01% FPR", title=None, xlabel="Models per subset m (each target: m-1 shadow models)"):
  """TPR versus number of models m: mean over draws with a min-max band, one line per variant (Fig. 5).

  Points whose target FPR is not resolved by the negatives available (row["resolved"] False) are hollow;
  undefined points (NaN: too few models of a class) are left out.
  """
  fig, ax = plt.subplots(figsize=(6.0, 4.0))
  by_variant = collections.defaultdict(lambda: collections.defaultdict(list))
  resolved = collections.defaultdict(dict)
  for row in rows:
    if np.isfinite(float(row["tpr"])):
      by_variant[row["variant"]][int(row["m"])].append(float(row["tpr"]))
      resolved[row["variant"]][int(row["m"])] = bool(row.get("resolved", True))
  any_unresolved = False
  for variant, by_m in by_variant.items():
    m_S = np.array(sorted(by_m))
    tprs = [np.asarray(by_m[m]) for m in m_S]
    mean_S = np.array([t.mean() for t in tprs])
    (line,) = ax.plot(m_S, mean_S, marker="o", ms=3, label=str(variant))
    ax.fill_between(m_S, [t.min() for t in tprs], [t.max() for t in tprs], color=line.get_color(), alpha=0.2, lw=0)
    hollow = np.array([not resolved[variant][m] for m in m_S])
    if hollow.any():
      any_unresolved = True
      ax.plot(m_S[hollow], mean_S[hollow], ls="none", marker="o", ms=6, mfc="white", mec=line.get_color())
  ax.set_xscale("log", base=2)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title or any_unresolved:
    ax.set_title((title or "") + ("\n(hollow: FPR not resolved by the negatives available)" if any_unresolved else ""),
                 fontsize=9)
  ax.legend(fontsize=7)
  ax.grid(True, alpha=0.3)
  fig.tight_layout()
  return fig
