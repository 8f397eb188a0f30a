"""Reference-free attacks on a shadow run's canaries, target by target, pooled like the LiRA rows.

For target model m the attack sees only that model's arrays: lp = -losses[m] (NaN where mask.npy is False), mu[m] and
sigma[m]; it scores the N canaries with Loss, Zlib, Min-K% or Min-K%++ (attacks/), giving scores [M, N]. These are
pooled over all M x N (model, canary) pairs with keep.npy as the labels, by lira.metrics.summarize with the same
FPRs, bootstrap replicates and seed as the LiRA rows, so both sit in one table. A shadow run scores all T positions
(the trainer prepends BOS, so a canary's first token is predicted too), unlike the features folder's lp, whose
position 0 is NaN; mask.npy, where present, marks the scored positions (False -> NaN here).
"""

import dataclasses
import os

import numpy as np

import attacks as A
from attacks import report as attack_report
from lira import metrics
from lira import rmia
from lira.reports import run_folder
from lira.errors import InputError, MissingFileError

SHADOW_ATTACKS = ("loss", "zlib", "min_k", "min_k_pp")
DEFAULTS = {"attacks": None, "k": attack_report.DEFAULTS["k"]}


@dataclasses.dataclass(frozen=True)
class AttackRows:
  """Rows for lira.reports.loo_report.evaluate_run: [{name, attack, params, summary}], scores {attack: [M, N]}, settings."""
  rows: list
  scores: dict
  settings: dict
  defaults: dict
  styles: dict
  notes: tuple = ()

  def __add__(self, other):
    """Both sets of rows in one table (the first's rows first)."""
    attacks = list(self.settings.get("attacks", [])) + list(other.settings.get("attacks", []))
    return AttackRows(self.rows + other.rows, {**self.scores, **other.scores},
                      {**self.settings, **other.settings, "attacks": attacks},
                      {**self.defaults, **other.defaults}, {**self.styles, **other.styles}, self.notes + other.notes)


def target_lp(loss_NxT, mask_NxT=None):
  """lp = -loss of one target model, float64 [N, T], NaN where the mask says a position is not scored."""
  lp_NxT = -np.asarray(loss_NxT, dtype=np.float64)
  if mask_NxT is not None:
    lp_NxT = np.where(np.asarray(mask_NxT, bool), lp_NxT, np.nan)
  return lp_NxT


def shadow_scores(attack, loss_MxNxT, mask_NxT=None, mu_MxNxT=None, sigma_MxNxT=None, texts=None, k=DEFAULTS["k"]):
  """Scores [M, N] of one reference-free attack, computed on each target model m from its own arrays alone."""
  if attack not in SHADOW_ATTACKS:
    raise InputError(f"--attacks: {attack!r} cannot run on a shadow run; choose from {', '.join(SHADOW_ATTACKS)}")
  out = []
  for m in range(np.shape(loss_MxNxT)[0]):
    lp_NxT = target_lp(loss_MxNxT[m], mask_NxT)
    if attack == "loss":
      out.append(A.loss(lp_NxT))
    elif attack == "zlib":
      out.append(A.zlib(lp_NxT, texts))
    elif attack == "min_k":
      out.append(A.min_k(lp_NxT, k))
    else:
      out.append(A.min_k_pp(lp_NxT, mu_MxNxT[m], sigma_MxNxT[m], k))
  return np.stack(out)


def canary_texts(run_dir, num_canaries, mask_NxT=None):
  """The canaries as text: RUN/texts.json if present, else canaries.npy decoded with RUN/tokenizer.json.

  A canary's tokens run up to its last scored position (mask.npy), or all T without a mask.
  """
  texts_path = os.path.join(run_dir, "texts.json")
  if os.path.exists(texts_path):
    texts = run_folder.load_json(texts_path)
    texts = texts.get("texts") if isinstance(texts, dict) else texts
    if not isinstance(texts, list) or len(texts) != num_canaries:
      raise InputError(f"{texts_path}: expected a list of N = {num_canaries} canary texts")
    return [str(t) for t in texts]
  paths = [os.path.join(run_dir, f) for f in ("canaries.npy", "tokenizer.json")]
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise MissingFileError(f"attack zlib needs the canaries' texts: {' and '.join(missing)} (or texts.json) "
                           f"not found in the run folder")
  import tokenizers  # only Zlib needs it
  ids_NxT = run_folder.load_npy(paths[0])
  if ids_NxT.ndim != 2 or ids_NxT.shape[0] != num_canaries:
    raise InputError(f"{paths[0]}: expected token ids [N, T] with N = {num_canaries}, got {list(ids_NxT.shape)}")
  length_N = np.full(num_canaries, ids_NxT.shape[1])
  if mask_NxT is not None:
    mask_NxT = np.asarray(mask_NxT, bool)
    length_N = np.where(mask_NxT.any(axis=1), ids_NxT.shape[1] - np.argmax(mask_NxT[:, ::-1], axis=1), 0)
  tokenizer = tokenizers.Tokenizer.from_file(paths[1])
  return [tokenizer.decode(ids[:n].tolist()) for ids, n in zip(ids_NxT, length_N)]


def _moments(run_dir, shape):
  """mu.npy and sigma.npy [M, N, T] of the run (memory-mapped), shape-checked."""
  out = []
  for stat in ("mu", "sigma"):
    path = os.path.join(run_dir, f"{stat}.npy")
    if not os.path.exists(path):
      raise MissingFileError(f"attack min_k_pp needs {path} (per-token moments the shadow pipeline writes beside "
                             "losses.npy); it is absent")
    array = run_folder.load_npy(path, mmap=True)
    if array.shape != shape:
      raise InputError(f"{path}: shape {list(array.shape)} does not match losses.npy {list(shape)}")
    out.append(array)
  return out


def _check_rows(run_dir, run):
  """Every (model, canary) has a scored position; the error names losses.npy, the model and the canary."""
  for m in range(run.loss_MxNxT.shape[0]):
    empty_N = ~np.isfinite(target_lp(run.loss_MxNxT[m], run.mask_NxT)).any(axis=1)
    if empty_N.any():
      raise InputError(f"{os.path.join(run_dir, 'losses.npy')}: model {m}, canary {int(np.flatnonzero(empty_N)[0])} "
                       "has no scored position (all NaN or masked)")


def shadow_rows(run_dir, attacks, k=DEFAULTS["k"], n_boot=metrics.N_BOOT, seed=0, fprs=metrics.DEFAULT_FPRS):
  """The attacks' rows for a shadow run: scores [M, N] per attack, summarized over all pairs with keep.npy."""
  unknown = [a for a in attacks if a not in SHADOW_ATTACKS]
  if unknown:
    raise InputError(f"--attacks: {', '.join(unknown)} cannot run on a shadow run (no prefixes, reference model or "
                     f"neighbours there); choose from {', '.join(SHADOW_ATTACKS + tuple(rmia.ATTACKS))}")
  attack_report.check_k(k)
  attacks = list(dict.fromkeys(attacks))
  run = run_folder.load_run(run_dir, mmap=True)
  mu = sigma = texts = None
  if "min_k_pp" in attacks:
    mu, sigma = _moments(run_dir, run.loss_MxNxT.shape)
  if "zlib" in attacks:
    texts = canary_texts(run_dir, run.loss_MxNxT.shape[1], run.mask_NxT)
  _check_rows(run_dir, run)
  rows, scores = [], {}
  for attack in attacks:
    scores_MxN = shadow_scores(attack, run.loss_MxNxT, run.mask_NxT, mu, sigma, texts, k)
    uses_k = attack in ("min_k", "min_k_pp")
    name = attack_report.NAMES[attack] + (f" (k={k:g})" if uses_k else "")
    summary = metrics.summarize(scores_MxN, run.keep_MxN, fprs=fprs, n_boot=n_boot, seed=seed)
    rows.append({"name": name, "attack": attack, "params": {"k": k} if uses_k else {}, "summary": summary})
    scores[attack] = scores_MxN
  note = (f"{', '.join(r['name'] for r in rows)}: reference-free, each target model scored from its own losses (and "
          "mu, sigma) alone, no shadow models; pooled over the same (model, canary) pairs.")
  return AttackRows(rows, scores, {"attacks": attacks, "k": float(k)}, DEFAULTS,
                    {r["name"]: attack_report.style(r["attack"]) for r in rows}, (note,))

