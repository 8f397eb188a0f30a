"""Time lira.metrics.summarize (one attack's AUC, TPRs and canary-bootstrap intervals) before and after the one-sort,
exact-integer bootstrap, on synthetic [M, N] scores, and check that every version gives the same summary.

  python benchmarks/bootstrap_speed.py                      # M=484 models, N=10000 canaries: AUC ~0.99 and ~0.6
  python benchmarks/bootstrap_speed.py --M 16 --N 500 --out /tmp/bootstrap_speed.json   # smoke test
  python benchmarks/bootstrap_speed.py --backends numpy     # without the jax backend

"before" is the implementation this replaced, copied verbatim below (sklearn's roc_curve and roc_auc_score, each
sorting the pairs, then rank_pairs' argsort and float64 sums over [replicate, pair] arrays, one replicate at a time
at the default size); the helpers it shares with today's lira.metrics are imported from there, unchanged. "numpy"
and "jax" are lira.metrics.summarize(..., backend=...); jax runs on its default device, and its first call includes
compiling (its client is started before the first timed call). Every row's summary must equal the before row's
(AUC, TPRs, their intervals, the plot's ROC points): the "same" column. Each ratio is before's time over the row's,
in the same run. Members' scores are N(shift, 1) and non-members' N(0, 1): AUC = Phi(shift / sqrt 2).
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lira import metrics  # noqa: E402
from lira import weighted_roc  # noqa: E402
from lira.errors import InputError  # noqa: E402
from lira.metrics import (DEFAULT_FPRS, LEVEL, N_BOOT, _json_floats, _percentile_ci, bootstrap_weights,  # noqa: E402
                          check_pairs, curve_tpr_at_fpr, downsample_roc, fpr_key, is_resolved, min_negatives)

CASES = {"strong": 3.29, "weak": 0.358}  # member shift: AUC ~0.99 and ~0.6

# ----------------------------------------------------------------------------------------------
# before: lira.metrics as it was (summarize and what it called that has changed since), verbatim.

_CHUNK_ELEMENTS = 8_000_000


def roc(scores, labels, sample_weight=None):
  """ROC curve (fpr, tpr, thresholds) with every threshold kept; higher score = member (label True)."""
  scores = np.asarray(scores, dtype=np.float64).ravel()
  labels = np.asarray(labels).ravel().astype(bool)
  if sample_weight is not None:
    sample_weight = np.asarray(sample_weight, dtype=np.float64).ravel()
  from sklearn import metrics as skm  # here, not at the top: sklearn's import (~1 s) would slow every command's --help
  return skm.roc_curve(labels, scores, drop_intermediate=False, sample_weight=sample_weight)


def auc(scores, labels, sample_weight=None):
  """Area under the ROC curve (sklearn roc_auc_score)."""
  scores = np.asarray(scores, dtype=np.float64).ravel()
  labels = np.asarray(labels).ravel().astype(bool)
  if sample_weight is not None:
    sample_weight = np.asarray(sample_weight, dtype=np.float64).ravel()
  from sklearn import metrics as skm  # imported where used, as in roc
  return float(skm.roc_auc_score(labels, scores, sample_weight=sample_weight))


@dataclasses.dataclass(frozen=True)
class RankedPairs:
  """Valid (model, canary) pairs sorted once by descending score, with tie groups (one threshold each)."""
  n_canaries: int
  score_P: np.ndarray  # sorted scores, descending
  canary_neg_Pn: np.ndarray  # canary of each negative pair, in sorted order
  canary_pos_Pp: np.ndarray  # canary of each positive pair, in sorted order
  nneg_upto_G1: np.ndarray  # negatives at or above tie group g (index 0 = the empty top point)
  npos_upto_G1: np.ndarray  # positives at or above tie group g
  end_P_G: np.ndarray  # index in score_P of the last pair of each tie group
  nneg_before_Pp: np.ndarray  # for each positive: negatives strictly above its tie group
  nneg_through_Pp: np.ndarray  # for each positive: negatives up to the end of its tie group
  nneg_N: np.ndarray  # negative pairs per canary
  npos_N: np.ndarray  # positive pairs per canary


def rank_pairs(scores_MxN, labels_MxN, valid_MxN=None):
  """Sort the valid pairs by descending score once and index their tie groups for weighted ROCs."""
  scores_MxN, labels_MxN, valid_MxN = check_pairs(scores_MxN, labels_MxN, valid_MxN)
  n_canaries = scores_MxN.shape[1]
  canary_MxN = np.broadcast_to(np.arange(n_canaries), scores_MxN.shape)
  score_P = scores_MxN[valid_MxN]
  label_P = labels_MxN[valid_MxN]
  canary_P = canary_MxN[valid_MxN]
  order_P = np.argsort(-score_P, kind="stable")
  score_P, label_P, canary_P = score_P[order_P], label_P[order_P], canary_P[order_P]
  # A tie group ends where the next score differs (or at the last pair).
  end_P_G = np.flatnonzero(np.r_[score_P[1:] != score_P[:-1], True]) if score_P.size else np.zeros(0, int)
  neg_cum_P = np.cumsum(~label_P)
  pos_cum_P = np.cumsum(label_P)
  nneg_upto_G1 = np.r_[0, neg_cum_P[end_P_G]].astype(np.int64)
  npos_upto_G1 = np.r_[0, pos_cum_P[end_P_G]].astype(np.int64)
  group_P = np.cumsum(np.r_[0, score_P[1:] != score_P[:-1]]) if score_P.size else np.zeros(0, int)
  group_pos_Pp = group_P[label_P]
  return RankedPairs(
      n_canaries=n_canaries,
      score_P=score_P,
      canary_neg_Pn=canary_P[~label_P].astype(np.intp),
      canary_pos_Pp=canary_P[label_P].astype(np.intp),
      nneg_upto_G1=nneg_upto_G1,
      npos_upto_G1=npos_upto_G1,
      end_P_G=end_P_G,
      nneg_before_Pp=nneg_upto_G1[group_pos_Pp],
      nneg_through_Pp=nneg_upto_G1[group_pos_Pp + 1],
      nneg_N=np.bincount(canary_P[~label_P], minlength=n_canaries).astype(np.int64),
      npos_N=np.bincount(canary_P[label_P], minlength=n_canaries).astype(np.int64),
  )


def weighted_stats(ranked, w_BxN, fprs):
  """The replaced replicates: lira.metrics keeps them as the fallback outside its exact-integer range."""
  return weighted_roc.weighted_stats_reference(ranked, w_BxN, fprs)


def bootstrap_ci(scores_MxN, labels_MxN, fprs=DEFAULT_FPRS, n_boot=N_BOOT, level=LEVEL, seed=0, valid_MxN=None):
  """Percentile intervals over canary-bootstrap replicates: (tpr_ci_Fx2, auc_ci_2, n_undefined).

  A replicate that draws no member pair or no non-member pair has no ROC; it cannot be given a value
  without inventing one, so the intervals are taken over the other replicates and n_undefined counts
  the ones left out (summaries report it as n_boot_undefined; all undefined gives NaN intervals).
  """
  ranked = scores_MxN if isinstance(scores_MxN, RankedPairs) else rank_pairs(scores_MxN, labels_MxN, valid_MxN)
  w_BxN = bootstrap_weights(ranked.n_canaries, n_boot, seed)
  tpr_BxF, auc_B = weighted_stats(ranked, w_BxN, fprs)
  # TPR and AUC are undefined in the same replicates (no negatives or no positives drawn).
  n_undefined = int(np.isnan(auc_B).sum())
  tpr_ci_Fx2 = np.stack([_percentile_ci(tpr_BxF[:, f], level) for f in range(tpr_BxF.shape[1])])
  return tpr_ci_Fx2.reshape(-1, 2), _percentile_ci(auc_B, level), n_undefined


def summarize(scores_MxN, labels_MxN, fprs=DEFAULT_FPRS, n_boot=N_BOOT, level=LEVEL, seed=0, valid_MxN=None):
  """JSON-ready summary of one attack: AUC, TPR at each FPR with bootstrap CIs and resolution, and a plot-sized ROC.

  n_boot_undefined counts the bootstrap replicates left out of the intervals (no member or no non-member drawn).
  """
  scores_MxN, labels_MxN, valid_MxN = check_pairs(scores_MxN, labels_MxN, valid_MxN)
  score_P, label_P = scores_MxN[valid_MxN], labels_MxN[valid_MxN]
  n_pos, n_neg = int(label_P.sum()), int((~label_P).sum())
  if n_pos == 0 or n_neg == 0:
    raise InputError(f"need both members and non-members among valid pairs (got {n_pos} and {n_neg})")
  fpr_G, tpr_G, _ = roc(score_P, label_P)
  auc_value = auc(score_P, label_P)
  if n_boot > 0:
    ranked = rank_pairs(scores_MxN, labels_MxN, valid_MxN)
    tpr_ci_Fx2, auc_ci_2, n_undefined = bootstrap_ci(ranked, None, fprs, n_boot, level, seed)
  else:
    tpr_ci_Fx2, auc_ci_2, n_undefined = np.full((len(fprs), 2), np.nan), np.full(2, np.nan), 0
  tpr = {}
  for f, fpr in enumerate(fprs):
    tpr[fpr_key(fpr)] = {
        "fpr": float(fpr),
        "tpr": curve_tpr_at_fpr(fpr_G, tpr_G, fpr),
        "ci": _json_floats(tpr_ci_Fx2[f]),
        "resolved": is_resolved(n_neg, fpr),
        "min_negatives": min_negatives(fpr),
    }
  keep = downsample_roc(fpr_G, tpr_G, fprs=fprs)
  return {
      "auc": auc_value,
      "auc_ci": _json_floats(auc_ci_2),
      "n_pos": n_pos,
      "n_neg": n_neg,
      "n_excluded": int((~valid_MxN).sum()),
      "n_boot": int(n_boot),
      "n_boot_undefined": n_undefined,
      "ci_level": float(level),
      "tpr": tpr,
      "roc": {"fpr": fpr_G[keep].tolist(), "tpr": tpr_G[keep].tolist()},
  }


# ----------------------------------------------------------------------------------------------
# The benchmark.


def make_keep(M, N, rng):
  """keep_MxN as in the LiRA reference code: every canary IN for exactly M / 2 models."""
  return rng.uniform(size=(M, N)).argsort(0) < M // 2


def machine_info():
  """What the timings were taken on."""
  info = {
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
      "cpu_count": os.cpu_count(),
      "platform": platform.platform(),
      "python": platform.python_version(),
      "numpy": np.__version__,
  }
  if "jax" in sys.modules:
    jax = sys.modules["jax"]
    info["jax"] = jax.__version__
    info["jax_devices"] = [str(d) for d in jax.devices()]
  return info


def timed(fn, *args, **kwargs):
  """(seconds, result) of one call."""
  start = time.perf_counter()
  result = fn(*args, **kwargs)
  return time.perf_counter() - start, result


def print_table(rows):
  """One line per case and version."""
  head = f"{'case':<8} {'AUC':>7} {'version':<12} {'seconds':>9} {'before/this':>11} {'same':>5}"
  print(head)
  print("-" * len(head))
  for r in rows:
    print(f"{r['case']:<8} {r['auc']:>7.4f} {r['version']:<12} {r['seconds']:>9.3f} {r['speedup']:>11.1f} "
          f"{'yes' if r['same'] else 'NO':>5}")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--M", type=int, default=484, help="models (even)")
  parser.add_argument("--N", type=int, default=10000, help="canaries")
  parser.add_argument("--n_boot", type=int, default=N_BOOT, help="bootstrap replicates")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES),
                      help=f"member shifts: {CASES} (AUC ~0.99, ~0.6)")
  parser.add_argument("--backends", nargs="+", choices=metrics.BACKENDS, default=list(metrics.BACKENDS),
                      help="summarize backends timed against before")
  parser.add_argument("--out", default=None,
                      help="JSON file (default benchmarks/results/bootstrap_speed_M{M}_N{N}.json)")
  args = parser.parse_args(argv)
  if args.M % 2 or args.M < 2:
    parser.error("--M must be even and at least 2")
  out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"bootstrap_speed_M{args.M}_N{args.N}.json"
  import sklearn.metrics  # noqa: F401  before's roc and auc import it: not inside the first timed call
  if "jax" in args.backends:  # start jax's client once, outside every timed call
    import jax.numpy as jnp
    jnp.zeros(1).block_until_ready()

  rows = []
  for case in args.cases:
    rng = np.random.default_rng(args.seed)
    keep_MxN = make_keep(args.M, args.N, rng)
    scores_MxN = rng.normal(size=(args.M, args.N)) + CASES[case] * keep_MxN
    kwargs = {"n_boot": args.n_boot, "seed": args.seed}
    before_s, want = timed(summarize, scores_MxN, keep_MxN, **kwargs)
    versions = [("before", before_s, want)]
    for backend in args.backends:
      calls = ["first", "second"] if backend == "jax" else [""]
      for call in calls:
        seconds, got = timed(metrics.summarize, scores_MxN, keep_MxN, backend=backend, **kwargs)
        versions.append((f"{backend} {call}".strip(), seconds, got))
    for version, seconds, got in versions:
      rows.append({"case": case, "shift": CASES[case], "auc": want["auc"], "version": version, "seconds": seconds,
                   "speedup": before_s / seconds, "same": got == want,
                   "summary": {k: v for k, v in got.items() if k != "roc"}})
      print(f"  {case} {version}: {seconds:.3f} s" + ("" if got == want else "  DIFFERS from before"), flush=True)

  machine = machine_info()
  print()
  print_table(rows)
  print(f"machine: {machine}")
  shown_out = os.path.relpath(out, ROOT) if out.resolve().is_relative_to(ROOT) else out.name  # no machine paths
  result = {"config": {**vars(args), "out": shown_out, "shifts": {c: CASES[c] for c in args.cases}},
            "machine": machine, "results": rows, "loadavg": os.getloadavg()}
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=2) + "\n")
  print(f"wrote {out}")
  if not all(r["same"] for r in rows):
    sys.exit("some summaries differ from before's")


if __name__ == "__main__":
  main()
