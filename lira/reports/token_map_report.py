"""Which tokens of a canary carry its leakage: a token-level score [M, N, U] (InfoRMIA's, attacks/informia.py) read
per canary over its IN and its OUT target models, the canaries that leak most, and their tokens coloured by score.

For canary n and unit u (a token position, or a group of K positions): in_NxU = the mean of s[m, n, u] over the models
m that trained on n, out_NxU = the mean over those that did not, and gap = in - out, the bits per token that training
on the canary adds to the target's score there. A canary's leakage is the mean gap over its valid units (the
difference of its mean IN and mean OUT sequence scores); the top canaries are those with the largest. Written by
experiments/token_map.py: token_map_<attack>.{json,md,png}.
"""

import math

import numpy as np

SCHEMA = "seqlira.token_map/1"


def per_canary(score_MxNxU, keep_MxN, valid_NxU):
  """(in_NxU, out_NxU, gap_N): the mean token score over each canary's IN and OUT models (NaN at invalid units or
  where a canary has no model of that class) and the mean over valid units of in - out."""
  keep = np.asarray(keep_MxN, bool)
  score = np.where(valid_NxU[None], np.asarray(score_MxNxU, np.float64), 0.0)
  means = []
  for member_MxN in (keep, ~keep):
    count_N = member_MxN.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
      mean_NxU = np.einsum("mnu,mn->nu", score, member_MxN.astype(np.float64)) / count_N[:, None]
    means.append(np.where(valid_NxU & (count_N[:, None] > 0), mean_NxU, np.nan))
  in_NxU, out_NxU = means
  gap_NxU = np.where(valid_NxU, in_NxU - out_NxU, 0.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    gap_N = gap_NxU.sum(axis=1) / valid_NxU.sum(axis=1)
  return in_NxU, out_NxU, gap_N


def top_canaries(gap_N, k):
  """The k canaries with the largest finite gap, largest first (ties: the lower index first)."""
  finite = np.flatnonzero(np.isfinite(gap_N))
  order = finite[np.lexsort((finite, -gap_N[finite]))]
  return [int(n) for n in order[:k]]


def build(score_MxNxU, keep_MxN, valid_NxU, tokens, k, attack, run, settings):
  """The report: the top k canaries, each with its tokens (strings, one per unit; None: unit numbers), its IN and OUT
  mean token scores and gap, and the run's shape and settings."""
  in_NxU, out_NxU, gap_N = per_canary(score_MxNxU, keep_MxN, valid_NxU)
  keep = np.asarray(keep_MxN, bool)
  rows = []
  for n in top_canaries(gap_N, k):
    units = np.flatnonzero(valid_NxU[n])
    rows.append({"canary": n, "gap_bits": float(gap_N[n]), "n_in": int(keep[:, n].sum()),
                 "n_out": int((~keep[:, n]).sum()), "units": [int(u) for u in units],
                 "tokens": [tokens[n][u] if tokens is not None else str(u) for u in units],
                 "in_bits": [float(in_NxU[n, u]) for u in units], "out_bits": [float(out_NxU[n, u]) for u in units]})
  M, N, U = np.shape(score_MxNxU)
  return {"schema": SCHEMA, "attack": attack, "run": run, "settings": settings, "shape": {"M": M, "N": N, "U": U},
          "mean_gap_bits": float(np.nanmean(gap_N)), "top": rows}


def markdown(report):
  """The top canaries as a table: gap, IN / OUT counts, and the three tokens with the largest gap."""
  lines = [f"# Tokens that carry the leakage: {report['attack']}, {report['run']}", "",
           f"Token scores in bits; gap = mean over IN target models - mean over OUT ones. Mean gap over all canaries: "
           f"{report['mean_gap_bits']:.3f} bits/token.", "",
           "| canary | gap (bits/token) | IN / OUT models | tokens with the largest gap (bits) |", "|---|---|---|---|"]
  for row in report["top"]:
    gaps = np.asarray(row["in_bits"]) - np.asarray(row["out_bits"])
    best = np.argsort(-gaps, kind="stable")[:3]
    shown = ", ".join(f"{row['tokens'][i]!r} ({gaps[i]:+.2f})" for i in best)
    lines.append(f"| {row['canary']} | {row['gap_bits']:.3f} | {row['n_in']} / {row['n_out']} | {shown} |")
  return "\n".join(lines) + "\n"


def figure(report, title):
  """One row per top canary: its tokens in order, each cell coloured by its gap, the mean token score over the
  canary's IN models less that over its OUT models (bits; diverging around 0), the token written in the cell and the
  gap below it. (The IN score alone is bounded near 1 bit by the online marginal, which holds the IN models' own
  probability at half weight; the OUT models' scores fall as far as the canary is memorised.)"""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib import colors

  rows = report["top"]
  width = max((len(r["units"]) for r in rows), default=1)
  gaps = [[v_in - v_out for v_in, v_out in zip(r["in_bits"], r["out_bits"])] for r in rows]
  values = [v for g in gaps for v in g if math.isfinite(v)]
  limit = max([abs(v) for v in values] + [1e-9])
  norm = colors.TwoSlopeNorm(vmin=-limit, vcenter=0.0, vmax=limit)
  cmap = plt.get_cmap("RdBu_r")
  fig, ax = plt.subplots(figsize=(max(8.0, 0.62 * width + 2.0), 0.75 * len(rows) + 1.6))
  for i, (row, gap_U) in enumerate(zip(rows, gaps)):
    for j, (token, gap) in enumerate(zip(row["tokens"], gap_U)):
      color = cmap(norm(gap)) if math.isfinite(gap) else (0.85, 0.85, 0.85, 1.0)
      ax.add_patch(matplotlib.patches.Rectangle((j, i), 0.96, 0.92, facecolor=color, edgecolor="none"))
      dark = math.isfinite(gap) and abs(norm(gap) - 0.5) > 0.3
      ax.text(j + 0.48, i + 0.38, _shown(token), ha="center", va="center", fontsize=6.5,
              color="white" if dark else "black", family="monospace")
      ax.text(j + 0.48, i + 0.75, f"{gap:+.1f}", ha="center", va="center", fontsize=5,
              color="white" if dark else "dimgray")
  ax.set_xlim(0, width)
  ax.set_ylim(len(rows), 0)
  ax.set_yticks([i + 0.46 for i in range(len(rows))])
  ax.set_yticklabels([f"canary {r['canary']}\ngap {r['gap_bits']:.2f}" for r in rows], fontsize=7)
  ax.set_xticks([j + 0.48 for j in range(width)])
  ax.set_xticklabels([str(j) for j in range(width)], fontsize=6)
  ax.set_xlabel("token (unit) of the canary; small number: the gap, bits")
  for side in ("top", "right", "bottom", "left"):
    ax.spines[side].set_visible(False)
  bar = fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.025, pad=0.01)
  bar.set_label("gap: mean token score over IN models - over OUT models (bits)", fontsize=7)
  ax.set_title(title, fontsize=9)
  fig.tight_layout()
  return fig


def _shown(token):
  """A token as a cell shows it: spaces as '_', line breaks as '/', at most 8 characters."""
  text = str(token).replace(" ", "_").replace("\n", "/").replace("\t", "_")
  return text if len(text) <= 8 else text[:7] + "~"
