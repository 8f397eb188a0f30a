"""Text and markdown tables of (name, summary) rows, as lira.metrics.summarize returns them: AUC and TPR% at each
FPR with their intervals, and `n/r` where the FPR needs more non-members than the run has."""

from lira.metrics import DEFAULT_FPRS, fpr_key, min_negatives


def pct(x):
  return "-" if x is None else f"{100.0 * x:.2f}"


def tpr_cell(value, ci, resolved=True):
  """A TPR (%) with its interval, or n/r where the FPR needs more non-members than the run has (the one rule of every
  table: an unresolved TPR is never shown as a number)."""
  return cell(value, ci) if resolved else "n/r"


def cell(value, ci, scale_pct=True):
  fmt = pct if scale_pct else (lambda v: "-" if v is None else f"{v:.4f}")
  if ci is None or ci[0] is None:
    return fmt(value)
  return f"{fmt(value)} [{fmt(ci[0])}, {fmt(ci[1])}]"


def _fpr_label(fpr):
  return f"TPR@{100.0 * float(fpr):g}%"


def _has_ci(ci):
  return ci is not None and any(v is not None for v in ci)


def _pairs(rows):
  """[(name, summary)] of rows given as (name, summary) pairs or as dicts with "name" and "summary" (what
  lira.evaluate_variants and the attack rows give)."""
  out = []
  for row in rows:
    if isinstance(row, dict):
      if "name" not in row or "summary" not in row:
        raise ValueError(f"a table row as a dict needs 'name' and 'summary', got keys {sorted(row)}")
      row = (row["name"], row["summary"])
    name, summary = row
    out.append((name, summary))
  return out


def _table_cells(rows, fprs, first="variant", unit="canaries"):
  """Header, body cells and footnotes shared by the text and markdown tables."""
  rows = _pairs(rows)
  header = [first, "AUC"] + [_fpr_label(f) for f in fprs]
  body, unresolved = [], {}
  for name, summary in rows:
    cells = [str(name), cell(summary.get("auc"), summary.get("auc_ci"), scale_pct=False)]
    for fpr in fprs:
      entry = summary.get("tpr", {}).get(fpr_key(fpr))
      if entry is None:
        cells.append("-")
      elif not entry.get("resolved", True):
        cells.append("n/r")
        unresolved.setdefault(fpr_key(fpr), (fpr, entry.get("min_negatives", min_negatives(fpr)), []))[2].append(
            (str(name), summary.get("n_neg")))
      else:
        cells.append(cell(entry["tpr"], entry.get("ci")))
    body.append(cells)
  notes = []
  if any(_has_ci(s.get("auc_ci")) or any(_has_ci(e.get("ci")) for e in s.get("tpr", {}).values()) for _, s in rows):
    notes.append(f"TPR in %; [bracketed] = bootstrap percentile interval over {unit}.")
  for name, s in rows:
    if s.get("n_boot_undefined"):
      notes.append(f"{name}: intervals from {s['n_boot'] - s['n_boot_undefined']} of {s['n_boot']} bootstrap "
                   f"replicates; {s['n_boot_undefined']} drew no member or no non-member pair and have no ROC.")
  for fpr, need, names in unresolved.values():
    have = ", ".join(f"{n}: {h:,}" if h is not None else n for n, h in names)
    notes.append(f"n/r = not resolved: {_fpr_label(fpr)} FPR needs >= {need:,} negatives; available {have}.")
  return header, body, notes


def format_table(rows, fprs=DEFAULT_FPRS, first="variant", unit="canaries"):
  """Fixed-width text table of (name, summary) rows (or lira.evaluate_variants' row dicts): AUC and TPR% at each FPR
  with CIs, n/r where unresolved."""
  header, body, notes = _table_cells(rows, fprs, first, unit)
  widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
  lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
           for r in [header] + body]
  lines.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(lines + notes)


def format_markdown(rows, fprs=DEFAULT_FPRS, first="variant", unit="canaries"):
  """Markdown table of (name, summary) rows for results.md, footnotes below."""
  header, body, notes = _table_cells(rows, fprs, first, unit)
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
  lines += ["| " + " | ".join(r) + " |" for r in body]
  if notes:
    lines.append("")
    lines += [f"{n}  " if i < len(notes) - 1 else n for i, n in enumerate(notes)]
  return "\n".join(lines)


def text_cell(text, chars):
  """A canary's text for a table cell: whitespace runs as one space, other unprintable characters (random-token
  canaries decode to control bytes) as escapes such as \\x00, cut to `chars`, `|` escaped; '' for None."""
  if not text:
    return ""
  text = " ".join(text.split())
  text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
  text = text if len(text) <= chars else text[:chars - 3] + "..."
  return text.replace("|", "\\|")

