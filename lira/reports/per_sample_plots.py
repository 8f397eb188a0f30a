"""The per-sample audit's figures (experiments/per_sample.py): the distribution of per-canary TPR, two attacks'
per-canary TPR against each other, and per-canary AUC on two runs against each other."""

import math
import textwrap

import numpy as np
# matplotlib is imported inside the functions that draw

from lira import per_canary

FPR_COLORS = ("tab:blue", "tab:red", "tab:green", "tab:purple", "tab:brown")
CATEGORY_COLORS = {"both": "tab:red", "first only": "tab:blue", "second only": "tab:orange", "neither": "0.6"}


def _grid(n, width=3):
  import matplotlib
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt
  cols = min(width, n)
  rows = math.ceil(n / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.9 * rows + 0.9), squeeze=False)
  for ax in axes.ravel()[n:]:
    ax.set_visible(False)
  return fig, axes.ravel()[:n]


def _title(fig, title):
  lines = [w for line in title.split("\n") for w in textwrap.wrap(line, 120, break_long_words=False)]
  fig.suptitle("\n".join(lines), fontsize=9.5)
  fig.tight_layout()


def tpr_histogram(audits, title):
  """One panel per attack: the histogram of per-canary TPR at each FPR's calibrated global threshold, the pooled
  held-out TPR marked."""
  fig, axes = _grid(len(audits))
  for ax, (label, audit) in zip(axes, audits.items()):
    n = max(1, int(np.max(audit["fprs"][0]["canary"]["n_in_N"])))  # TPRs are k / n: one bin per k
    bins = (np.arange(n + 2) - 0.5) / n
    for i, entry in enumerate(audit["fprs"]):
      color = FPR_COLORS[i % len(FPR_COLORS)]
      tpr_N = per_canary.canary_tpr(entry["canary"])
      ax.hist(tpr_N[np.isfinite(tpr_N)], bins=bins, histtype="step", lw=1.6, color=color,
              label=f"FPR {100 * entry['fpr']:g}%: {int(entry['canary']['vulnerable_N'].sum())} vulnerable")
      ax.axvline(entry["global"]["tpr"], color=color, ls=(0, (1, 1.5)), lw=2.2,
                 label=f"pooled TPR {100 * entry['global']['tpr']:.1f}%")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlim(bins[0], bins[-1])
    ax.set_xlabel("per-canary TPR (its IN models above the threshold)")
    ax.set_ylabel("canaries")
    ax.set_title(label, fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
  _title(fig, title)
  return fig


def _categories(a_N, b_N):
  return {"both": a_N & b_N, "first only": a_N & ~b_N, "second only": ~a_N & b_N, "neither": ~a_N & ~b_N}


def pair_scatter(label_a, label_b, audit_a, audit_b, title, seed=0):
  """One panel per FPR: per-canary TPR of attack a (x) against attack b (y) at the calibrated global thresholds,
  coloured by which of them finds the canary vulnerable (TPRs are counts over IN models: jittered a little)."""
  fig, axes = _grid(len(audit_a["fprs"]))
  rng = np.random.default_rng(seed)
  for ax, ea, eb in zip(axes, audit_a["fprs"], audit_b["fprs"]):
    x_N, y_N = per_canary.canary_tpr(ea["canary"]), per_canary.canary_tpr(eb["canary"])
    jitter = 0.012
    for name, sel_N in _categories(ea["canary"]["vulnerable_N"], eb["canary"]["vulnerable_N"]).items():
      if sel_N.any():
        ax.scatter(x_N[sel_N] + rng.uniform(-jitter, jitter, sel_N.sum()),
                   y_N[sel_N] + rng.uniform(-jitter, jitter, sel_N.sum()), s=6, alpha=0.6,
                   color=CATEGORY_COLORS[name], lw=0,
                   label=f"vulnerable: {name.replace('first', label_a).replace('second', label_b)} ({int(sel_N.sum())})")
    ax.plot([0, 1], [0, 1], color="black", lw=0.7, ls=":")
    ax.set_xlim(-0.04, 1.04)
    ax.set_ylim(-0.04, 1.04)
    ax.set_xlabel(f"{label_a}: per-canary TPR")
    ax.set_ylabel(f"{label_b}: per-canary TPR")
    ax.set_title(f"calibrated threshold at FPR {100 * ea['fpr']:g}%", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", markerscale=2)
  _title(fig, title)
  return fig


def compare_scatter(audits, other_audits, other_name, records, title, seed=0):
  """One panel per attack: per-canary TPR at the calibrated global threshold of the lowest FPR on this run (x) against
  the other run (y), jittered, coloured by which run finds the canary vulnerable there; the panel's title gives
  Spearman's rho of per-canary TPR and of per-canary AUC (which saturates at 1 where most canaries leak)."""
  fig, axes = _grid(len(audits))
  rng = np.random.default_rng(seed)
  by_name = {r["name"]: r for r in records}
  for ax, (label, audit) in zip(axes, audits.items()):
    ea, eb = audit["fprs"][-1], other_audits[label]["fprs"][-1]
    x_N, y_N = per_canary.canary_tpr(ea["canary"]), per_canary.canary_tpr(eb["canary"])
    for name, sel_N in _categories(ea["canary"]["vulnerable_N"], eb["canary"]["vulnerable_N"]).items():
      if sel_N.any():
        ax.scatter(x_N[sel_N] + rng.uniform(-0.012, 0.012, sel_N.sum()),
                   y_N[sel_N] + rng.uniform(-0.012, 0.012, sel_N.sum()), s=6, alpha=0.6,
                   color=CATEGORY_COLORS[name], lw=0,
                   label=f"{name.replace('first', 'this run').replace('second', other_name)} ({int(sel_N.sum())})")
    ax.plot([0, 1], [0, 1], color="black", lw=0.7, ls=":")
    ax.set_xlim(-0.04, 1.04)
    ax.set_ylim(-0.04, 1.04)
    ax.set_xlabel("per-canary TPR, this run")
    ax.set_ylabel(f"per-canary TPR, {other_name}")
    record = by_name.get(label, {})
    rho_tpr = next((o["tpr_spearman"] for o in record.get("fprs", []) if o["fpr"] == ea["fpr"]), None)
    rho_auc = record.get("auc_spearman")
    words = lambda r: "n/a" if r is None else f"{r:.2f}"
    ax.set_title(f"{label}\nSpearman: TPR {words(rho_tpr)}, AUC {words(rho_auc)}", fontsize=9.5)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, markerscale=2,
              title=f"vulnerable at FPR {100 * ea['fpr']:g}%", title_fontsize=7)
  _title(fig, title)
  return fig
