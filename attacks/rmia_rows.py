"""RMIA rows for a shadow run's reports: leave-one-out RMIA (lira/rmia.py) on the run's canaries and population.

Model m is the target and the other M - 1 its reference models, as for the LiRA rows; the scores [M, N] are pooled
over all (model, canary) pairs with keep.npy as the labels by lira.metrics.summarize, with the same FPRs, bootstrap
replicates and seed, so RMIA sits in the same table, ROC and results.json as the LiRA variants. The population's
per-token losses come from population_losses.npy [M, Z, T] (and population_mask.npy) beside losses.npy.
"""

import numpy as np

from attacks.shadow import AttackRows
from lira import metrics
from lira import rmia
from lira.errors import InputError
from lira.reports import plots
from lira.reports import run_folder

DEFAULTS = {"rmia_gamma": rmia.RMIA().gamma, "rmia_a": rmia.RMIA().a}
NOTE = ("RMIA: model m the target, the other M - 1 its reference models (as LiRA), scored against the run's "
        "population (population_losses.npy); score = fraction of population samples z with LR(x) / LR(z) >= gamma.")


def options_for(attack, gamma=DEFAULTS["rmia_gamma"], a=DEFAULTS["rmia_a"], reduction=None, balance_counts=True):
  """lira.rmia.RMIA of a command's attack name under the command's flags."""
  return rmia.RMIA.named(attack, gamma=gamma, a=a, reduction=reduction, balance_counts=balance_counts)


def split(attacks):
  """(reference-free attack names, RMIA attack names) of an --attacks list, order kept."""
  attacks = list(dict.fromkeys(attacks or []))
  return [a for a in attacks if a not in rmia.ATTACKS], [a for a in attacks if a in rmia.ATTACKS]


def rmia_rows(run_dir, attacks, *, gamma=DEFAULTS["rmia_gamma"], a=DEFAULTS["rmia_a"], reduction=None,
              balance_counts=True, n_boot=metrics.N_BOOT, seed=0, fprs=metrics.DEFAULT_FPRS, progress=False):
  """The RMIA attacks' rows for a shadow run (AttackRows): every option and file is checked before any scoring."""
  chosen = [options_for(name, gamma, a, reduction, balance_counts) for name in dict.fromkeys(attacks)]
  run = run_folder.load_run(run_dir, mmap=True)
  pop_MxZxT, pop_mask_ZxT = run_folder.load_population(run_dir, mmap=True)
  for options in chosen:  # every undefined canary is reported before the first attack runs
    undefined_N = rmia.undefined_canaries(run.keep_MxN, options)
    if undefined_N.any():
      raise InputError(f"{run_dir}: canary {int(np.flatnonzero(undefined_N)[0])} has too few models for "
                       f"{options.name} ({int(undefined_N.sum())} canaries): it needs an IN and an OUT reference "
                       "model besides each target (offline: an OUT one)")
  rows, scores = [], {}
  for attack, options in zip(dict.fromkeys(attacks), chosen):
    score_MxN = rmia.leave_one_out(run.loss_MxNxT, run.keep_MxN, pop_MxZxT, options, mask_NxT=run.mask_NxT,
                                   pop_mask_ZxT=pop_mask_ZxT)
    summary = metrics.summarize(score_MxN, run.keep_MxN, fprs=fprs, n_boot=n_boot, seed=seed)
    params = {k: v for k, v in (("rmia_gamma", gamma), ("rmia_a", a)) if k != "rmia_a" or not options.online}
    rows.append({"name": options.name, "attack": attack, "params": params, "summary": summary,
                 "population": int(pop_MxZxT.shape[1])})
    scores[attack] = score_MxN
  settings = {"attacks": list(scores), "rmia_gamma": float(gamma), "rmia_a": float(a)}
  styles = {r["name"]: plots.rmia_style(r["attack"]) for r in rows}
  return AttackRows(rows, scores, settings, {"attacks": None, **DEFAULTS}, styles, (NOTE,))
