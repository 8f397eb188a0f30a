"""The per-sample audit's report (experiments/per_sample.py; lira/per_canary.py computes it; docs/per_sample.md reads
it).

per_sample[_settings].json (schema "seqlira.per_canary"): the header every report opens with, the settings, and per
attack (LiRA variant or registered attack) and target FPR: the oracle point, the calibrated global and per-canary
thresholds' operating points (thresholds, calibration FPR, held-out FPR and TPR with exact and bootstrap intervals,
PPV at each prior), the vulnerable set (indices), the concentration of true positives, the split halves' overlap;
`pair` (two attacks' vulnerable sets against each other) and `compare` (another run's) where made.
per_sample[_settings].csv: one row per (attack, canary); .md: the tables, the top canaries of every attack.
"""

import os

import numpy as np

from lira import metrics
from lira.errors import InputError
from lira import per_canary as ps
from lira.reports import provenance
from lira.reports import tables
import run_folder

STEM = "per_sample"
TEXT_CHARS = 48
SHARES = (0.01, 0.1)  # the concentration's top shares of canaries


def check_same_canaries(run_dir, other_dir):
  """Refuse two run folders whose canaries differ, with one line saying how: their number and length, their token ids
  (canaries.npy) or texts (texts.json), their scored positions (mask.npy); runs that record neither ids nor texts
  cannot be told apart and are refused too."""
  def shape(d):
    path = os.path.join(d, run_folder.names.LOSSES)
    if not os.path.exists(path):
      raise InputError(f"{path}: not found")
    return run_folder.load_npy(path, mmap=True).shape

  (_, N, T), (_, N2, T2) = shape(run_dir), shape(other_dir)
  if (N, T) != (N2, T2):
    raise InputError(f"{other_dir} holds N = {N2} canaries of T = {T2} positions, {run_dir} N = {N} of T = {T}: not "
                     "the same canaries")
  compared = False
  for name in (run_folder.names.CANARIES, run_folder.names.TEXTS):
    have = [os.path.exists(os.path.join(d, name)) for d in (run_dir, other_dir)]
    if have[0] != have[1]:
      with_it, without = (run_dir, other_dir) if have[0] else (other_dir, run_dir)
      raise InputError(f"{with_it} has {name} and {without} has not: cannot tell that their canaries are the same")
    if not have[0]:
      continue
    compared = True
    if name == run_folder.names.CANARIES:
      a, b = (run_folder.load_npy(os.path.join(d, name)) for d in (run_dir, other_dir))
      if a.shape != b.shape:
        raise InputError(f"{name}: shape {list(a.shape)} in {run_dir}, {list(b.shape)} in {other_dir}")
      differ = np.flatnonzero((a != b).reshape(len(a), -1).any(axis=1))
    else:
      a, b = (run_folder.load_json(os.path.join(d, name)) for d in (run_dir, other_dir))
      a, b = (t.get("texts") if isinstance(t, dict) else t for t in (a, b))
      differ = np.flatnonzero([x != y for x, y in zip(a, b)]) if len(a) == len(b) else np.arange(1)
    if differ.size:
      raise InputError(f"{name}: canary {int(differ[0])} differs between {run_dir} and {other_dir} ({differ.size} "
                       "canaries differ): not the same canaries")
  if not compared:
    raise InputError(f"neither {run_dir} nor {other_dir} records its canaries ({run_folder.names.CANARIES} or "
                     f"{run_folder.names.TEXTS}): cannot tell that they are the same")
  masks = [os.path.join(d, run_folder.names.MASK) for d in (run_dir, other_dir)]
  a, b = (run_folder.load_npy(p) if os.path.exists(p) else np.ones((N, T), bool) for p in masks)
  differ = np.flatnonzero((a != b).any(axis=1))
  if differ.size:
    raise InputError(f"{run_folder.names.MASK}: canary {int(differ[0])} is scored at other positions in {run_dir} "
                     f"than in {other_dir} ({differ.size} canaries differ)")


def planted(config, N):
  """shifted_N: a synthetic run's canaries that carry the membership signal by construction (config.json's
  shifted_canaries, make_synthetic --frac_canaries), or None."""
  indices = (config or {}).get("shifted_canaries")
  if indices is None:
    return None
  shifted_N = np.zeros(N, bool)
  shifted_N[np.asarray(indices, np.int64)] = True
  return shifted_N


def recovery(vulnerable_N, planted_N):
  """How a vulnerable set recovers the planted canaries: {planted, vulnerable, found, precision, recall}."""
  found = int((vulnerable_N & planted_N).sum())
  v, p = int(vulnerable_N.sum()), int(planted_N.sum())
  return {"planted": p, "vulnerable": v, "found": found, "precision": found / v if v else None,
          "recall": found / p if p else None}


def attack_record(label, audit, halves=None, planted_N=None):
  """The JSON record of one attack's audit (lira.per_canary.audit), with its split halves' comparison and, on a
  synthetic run with planted canaries, how its vulnerable sets recover them."""
  fprs = []
  for entry in audit["fprs"]:
    c = entry["canary"]
    record = {"fpr": entry["fpr"], "oracle": {**entry["oracle"], "threshold": _json(entry["oracle"]["threshold"])},
              **{kind: entry[kind] for kind in ps.KINDS},
              "vulnerable": {"count": int(c["vulnerable_N"].sum()), "canaries": np.flatnonzero(c["vulnerable_N"]).tolist(),
                             "rule": f"TPR interval's lower bound > held-out FPR {entry['global']['fpr']:.4g} + margin"},
              "concentration": {"oracle": ps.concentration(entry["oracle_hits_N"], SHARES),
                                "global": ps.concentration(c["hits_N"], SHARES)}}
    if planted_N is not None:
      record["planted"] = recovery(c["vulnerable_N"], planted_N)
    fprs.append(record)
  auc_N = audit["auc_N"]
  out = {"name": label, "per_canary_auc": {"mean": _json(np.nanmean(auc_N)), "median": _json(np.nanmedian(auc_N)),
                                           "undefined": int(np.isnan(auc_N).sum())},
         "fprs": fprs}
  if halves is not None:
    out["halves"] = halves
  return out


def _fpr_overlap(ea, eb):
  """One FPR of two audits against each other: their vulnerable sets' overlap and the rank correlation of per-canary
  TPR at their calibrated global thresholds."""
  rho, _ = ps.rank_correlation(ps.canary_tpr(ea["canary"]), ps.canary_tpr(eb["canary"]))
  return {"fpr": ea["fpr"], "held_out_fpr": [ea["global"]["fpr"], eb["global"]["fpr"]], "tpr_spearman": rho,
          **ps.overlap(ea["canary"]["vulnerable_N"], eb["canary"]["vulnerable_N"])}


def halves_record(models_a, models_b, audit_a, audit_b):
  """The split halves of one attack: the two halves' models, per-canary AUC rank correlation, and per FPR the overlap
  of their vulnerable sets."""
  rho, n = ps.rank_correlation(audit_a["auc_N"], audit_b["auc_N"])
  return {"models_a": [int(m) for m in models_a], "models_b": [int(m) for m in models_b],
          "auc_spearman": rho, "auc_canaries": n,
          "fprs": [_fpr_overlap(ea, eb) for ea, eb in zip(audit_a["fprs"], audit_b["fprs"])]}


def pair_record(label_a, label_b, audit_a, audit_b):
  """Two attacks' per-canary results against each other: AUC rank correlation and per FPR the overlap of their
  vulnerable sets (a: the first attack's)."""
  rho, n = ps.rank_correlation(audit_a["auc_N"], audit_b["auc_N"])
  return {"a": label_a, "b": label_b, "auc_spearman": rho, "auc_canaries": n,
          "fprs": [_fpr_overlap(ea, eb) for ea, eb in zip(audit_a["fprs"], audit_b["fprs"])]}


def compare_record(other_dir, audits, other_audits):
  """This run's attacks against the same attacks on another run with the same canaries."""
  rows = []
  for label, audit in audits.items():
    other = other_audits[label]
    rho, n = ps.rank_correlation(audit["auc_N"], other["auc_N"])
    rows.append({"name": label, "auc_spearman": rho, "auc_canaries": n,
                 "fprs": [_fpr_overlap(e, o) for e, o in zip(audit["fprs"], other["fprs"])]})
  return {"run_dir": other_dir, "attacks": rows}


def csv_rows(audits, texts=None):
  """One row per (attack, canary): its pairs, AUC and per FPR its counts at the global threshold."""
  rows = []
  for label, audit in audits.items():
    tprs = [ps.canary_tpr(entry["canary"]) for entry in audit["fprs"]]
    for n in range(audit["auc_N"].size):
      row = {"attack": label, "canary": n, "in_models": int(audit["n_in_N"][n]),
             "out_models": int(audit["n_out_N"][n]), "auc": _csv(audit["auc_N"][n])}
      for entry, tpr_N in zip(audit["fprs"], tprs):
        c, key = entry["canary"], f"@{metrics.fpr_key(entry['fpr'])}"
        row.update({f"hits{key}": int(c["hits_N"][n]), f"in_decided{key}": int(c["n_in_N"][n]),
                    f"tpr{key}": _csv(tpr_N[n]),
                    f"tpr_low{key}": _csv(c["low_N"][n]), f"tpr_high{key}": _csv(c["high_N"][n]),
                    f"out_above{key}": int(c["false_N"][n]), f"out_decided{key}": int(c["n_out_N"][n]),
                    f"vulnerable{key}": int(c["vulnerable_N"][n])})
      row["text"] = "" if texts is None else texts[n]
      rows.append(row)
  return rows


def top_canaries(audit, at=0, top=20):
  """The `top` canaries at the `at`-th FPR, by the lower bound of their TPR interval, then their AUC."""
  c = audit["fprs"][at]["canary"]
  low_N = np.nan_to_num(c["low_N"], nan=-1.0)
  auc_N = np.nan_to_num(audit["auc_N"], nan=-1.0)
  return np.lexsort((np.arange(low_N.size), -auc_N, -low_N))[:top]


# ---- text ----

def _pct(x, digits=2):
  return "n/a" if x is None else f"{100 * x:.{digits}f}"


def _ci(pair, digits=2):
  return "" if pair is None or None in pair else f" [{_pct(pair[0], digits)}, {_pct(pair[1], digits)}]"


def _threshold(t):
  return "n/a" if t is None else f"{t:.4g}"


def _table(header, rows, align=None):
  """A plain-text table (aligned columns), the same rows as the markdown one."""
  cells = [header] + [[str(v) for v in row] for row in rows]
  widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
  lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells]
  lines.insert(1, "  ".join("-" * w for w in widths))
  return "\n".join(lines)


def _markdown_table(header, rows):
  return "\n".join(["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"] +
                   ["| " + " | ".join(str(v) for v in row) + " |" for row in rows])


def operating_rows(report):
  """Per attack, FPR and threshold: threshold, held-out FPR [exact] (non-member pairs), TPR [exact] (member pairs)."""
  rows = []
  for a in report["attacks"]:
    for e in a["fprs"]:
      o = e["oracle"]
      rows.append([a["name"], f"{100 * e['fpr']:g}%", "oracle (all pairs)", _threshold(o["threshold"]),
                   f"{_pct(o['fpr'], 3)} ({o['n_neg']})", _pct(o["tpr"]) + ("" if o["resolved"] else " (n/r)")])
      for kind in ps.KINDS:
        p = e[kind]
        t = p["thresholds"]
        shown = (", ".join(_threshold(f["threshold"]) for f in t) if kind == "global" else
                 f"median {_threshold(t['median'])}")
        rows.append(["", "", f"calibrated {kind.replace('_', '-')}", shown,
                     f"{_pct(p['fpr'], 3)}{_ci(p['fpr_ci_exact'], 3)} ({p['n_neg']})",
                     f"{_pct(p['tpr'])}{_ci(p['tpr_ci_exact'])} ({p['n_pos']})"])
  return ["attack", "FPR", "threshold", "threshold value (per fold)", "realised FPR % [exact] (pairs)",
          "TPR % [exact] (pairs)"], rows


def ppv_rows(report):
  """Per attack and FPR, at the calibrated global threshold: PPV at each prior [bootstrap]."""
  priors = report["settings"]["priors"]
  rows = []
  for a in report["attacks"]:
    for e in a["fprs"]:
      p = e["global"]
      boot = p.get("ppv_ci_boot", {})
      rows.append([a["name"], f"{100 * e['fpr']:g}%"] +
                  [f"{_pct(p['ppv'][metrics.fpr_key(pi)], 1)}{_ci(boot.get(metrics.fpr_key(pi)), 1)}"
                   for pi in priors])
  return ["attack", "FPR"] + [f"PPV % at pi={100 * pi:g}%" for pi in priors], rows


def ppv_note(report):
  """A line naming, per attack and FPR, the largest prior at which a positive is more likely wrong than right."""
  wrong = []
  for a in report["attacks"]:
    for e in a["fprs"]:
      below = [pi for pi in report["settings"]["priors"]
               if (e["global"]["ppv"][metrics.fpr_key(pi)] or 0.0) < 0.5]
      if below:
        wrong.append(f"{a['name']} at {100 * e['fpr']:g}% (pi <= {100 * max(below):g}%)")
  if not wrong:
    return None
  return ("A positive is more likely wrong than right (PPV < 50%) for: " + "; ".join(wrong) +
          ". At a prior pi a positive is mostly right only where TPR / FPR > (1 - pi) / pi.")


def leak_rows(report):
  """Per attack and FPR: the vulnerable canaries, the concentration of true positives, the split halves' overlap."""
  rows = []
  for a in report["attacks"]:
    halves = {h["fpr"]: h for h in a.get("halves", {}).get("fprs", [])}
    for e in a["fprs"]:
      conc, h = e["concentration"], halves.get(e["fpr"])
      planted = e.get("planted")
      rows.append([a["name"], f"{100 * e['fpr']:g}%", e["vulnerable"]["count"] if planted is None else
                   f"{e['vulnerable']['count']} (precision {_pct(planted['precision'], 1)}%, recall "
                   f"{_pct(planted['recall'], 1)}% of {planted['planted']} planted)",
                   " / ".join(_pct(conc["oracle"][metrics.fpr_key(s)], 1) + "%" for s in SHARES),
                   " / ".join(_pct(conc["global"][metrics.fpr_key(s)], 1) + "%" for s in SHARES),
                   _overlap_cell(h)])
  return ["attack", "FPR", "vulnerable canaries", "TP share of top 1% / 10% canaries (oracle)",
          "(calibrated global)", "split halves: sets, both, Jaccard (chance), p, found again (chance)"], rows


def _overlap_cell(o):
  if o is None:
    return ""
  if o["jaccard"] is None:
    return f"{o['a']}, {o['b']}: both empty"
  found = "" if o["found"] is None else f", found {o['found']:.2f} ({o['chance_found']:.2f})"
  return (f"{o['a']}, {o['b']}, {o['both']}, {o['jaccard']:.2f} ({o['chance_jaccard']:.2f}), "
          f"{o['p_value']:.1e}{found}")


def top_rows(report, attack, texts=None):
  """The attack's top canaries at its first FPR: canary, AUC, TPR [exact] (hits / IN), OUT above, vulnerable, text."""
  rows = []
  for t in attack["top"]:
    rows.append([t["canary"], f"{t['auc']:.3f}" if t["auc"] is not None else "n/a",
                 f"{_pct(t['tpr'], 1)}{_ci([t['tpr_low'], t['tpr_high']], 1)} ({t['hits']}/{t['in_decided']})",
                 f"{t['out_above']}/{t['out_decided']}", "yes" if t["vulnerable"] else "",
                 tables.text_cell(t.get("text"), TEXT_CHARS)])
  fpr = attack["fprs"][0]["fpr"]
  return ["canary", "AUC", f"TPR % at the calibrated {100 * fpr:g}% threshold [exact] (hits/IN)",
          "OUT above", "vulnerable", "text"], rows


def top_record(audit, texts=None, top=20):
  """The top canaries' rows for the JSON and the tables."""
  c = audit["fprs"][0]["canary"]
  tpr_N = ps.canary_tpr(c)
  out = []
  for n in top_canaries(audit, 0, top):
    n = int(n)
    out.append({"canary": n, "auc": _json(audit["auc_N"][n]), "hits": int(c["hits_N"][n]),
                "in_decided": int(c["n_in_N"][n]),
                "tpr": _json(tpr_N[n]),
                "tpr_low": _json(c["low_N"][n]), "tpr_high": _json(c["high_N"][n]), "out_above": int(c["false_N"][n]),
                "out_decided": int(c["n_out_N"][n]), "vulnerable": bool(c["vulnerable_N"][n]),
                "text": None if texts is None else texts[n]})
  return out


def pair_rows(pair):
  rows = [[f"{100 * o['fpr']:g}%", o["a"], o["b"], o["both"], o["a"] - o["both"], o["b"] - o["both"],
           "n/a" if o["jaccard"] is None else f"{o['jaccard']:.2f} ({o['chance_jaccard']:.2f})",
           _num(o["tpr_spearman"])] for o in pair["fprs"]]
  return ["FPR", f"vulnerable: {pair['a']}", pair["b"], "both", "first only", "second only",
          "Jaccard (chance)", "per-canary TPR Spearman"], rows


def compare_rows(compare):
  rows = []
  for a in compare["attacks"]:
    for o in a["fprs"]:
      rows.append([a["name"], f"{100 * o['fpr']:g}%", _num(a["auc_spearman"]), _num(o["tpr_spearman"]),
                   _overlap_cell(o)])
  return ["attack", "FPR", "Spearman: per-canary AUC", "per-canary TPR",
          "vulnerable: sets, both, Jaccard (chance), p, found again (chance)"], rows


def _num(x):
  return "n/a" if x is None else f"{x:.3f}"


def _intro(report):
  s = report["settings"]
  return (f"{report['setting']}\nThresholds calibrated on shadow models: {s['folds']} folds of models, each fold's "
          f"threshold set on the other folds' OUT scores and applied to its own models (member: score > threshold). "
          f"Intervals: [exact] Clopper-Pearson {100 * ps.LEVEL:g}% over pairs; PPV [bootstrap] over canaries "
          f"({s['n_boot']} replicates). Vulnerable: the canary's TPR interval's lower bound above the held-out FPR + "
          f"{s['margin']:g}.")


def text(report):
  """What the command prints: the tables, the first attack's top canaries."""
  parts = [_intro(report)]
  for title, (header, rows) in (("Operating points", operating_rows(report)),
                                ("Precision of a positive at the calibrated global threshold", ppv_rows(report)),
                                ("Which canaries leak", leak_rows(report))):
    parts += ["", title, _table(header, rows)]
    if title.startswith("Precision") and ppv_note(report):
      parts.append(ppv_note(report))
  first = report["attacks"][0]
  header, rows = top_rows(report, first)
  parts += ["", f"Top {len(rows)} canaries of {first['name']} (per_sample*.md lists every attack's)",
            _table(header, rows)]
  if report.get("pair"):
    header, rows = pair_rows(report["pair"])
    parts += ["", f"{report['pair']['a']} against {report['pair']['b']} (AUC Spearman "
              f"{_rho(report['pair'])})", _table(header, rows)]
  if report.get("compare"):
    header, rows = compare_rows(report["compare"])
    parts += ["", f"Against {report['compare']['run_dir']}", _table(header, rows)]
  return "\n".join(parts)


def _rho(record):
  return "n/a" if record["auc_spearman"] is None else f"{record['auc_spearman']:.3f}"


def markdown(report):
  parts = [f"# Which canaries leak: {report['run']}", "", _intro(report).replace("\n", "\n\n")]
  for title, (header, rows) in (("Operating points", operating_rows(report)),
                                ("Precision of a positive at the calibrated global threshold", ppv_rows(report)),
                                ("Which canaries leak", leak_rows(report))):
    parts += ["", f"## {title}", "", _markdown_table(header, rows)]
    if title.startswith("Precision") and ppv_note(report):
      parts += ["", ppv_note(report)]
  if report.get("pair"):
    header, rows = pair_rows(report["pair"])
    parts += ["", f"## {report['pair']['a']} against {report['pair']['b']}", "",
              f"Per-canary AUC Spearman {_rho(report['pair'])}.", "", _markdown_table(header, rows)]
  if report.get("compare"):
    header, rows = compare_rows(report["compare"])
    parts += ["", f"## Against another run: {report['compare']['run_dir']}", "", _markdown_table(header, rows)]
  for attack in report["attacks"]:
    header, rows = top_rows(report, attack)
    parts += ["", f"## Top canaries: {attack['name']}", "", _markdown_table(header, rows)]
  return "\n".join(parts) + "\n"


def paths(out_dir, settings, defaults):
  """The report's files: json, md, csv and the figures' PNGs, named by the settings that differ from the defaults."""
  names = {ext: (STEM, ext) for ext in ("json", "md", "csv")}
  names.update({"tpr_png": (f"{STEM}_tpr", "png"), "pair_png": (f"{STEM}_pair", "png"),
                "compare_png": (f"{STEM}_runs", "png")})
  return {key: provenance.report_path(out_dir, stem, ext, settings, defaults) for key, (stem, ext) in names.items()}


def write(report, rows, files, figures):
  """Write the JSON, markdown, CSV and the figures {key: matplotlib figure}; the paths written."""
  run_folder.save_json(files["json"], report)
  run_folder.save_text(files["md"], markdown(report))
  run_folder.save_csv(files["csv"], rows)
  written = [files["json"], files["md"], files["csv"]]
  for key, fig in figures.items():
    run_folder.save_figure(files[key], fig)
    written.append(files[key])
  return written


def _json(x):
  x = float(x)
  return x if np.isfinite(x) else None


def _csv(x):
  x = float(x)
  return f"{x:.6g}" if np.isfinite(x) else ""
