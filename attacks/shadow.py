"""Attacks on a shadow run's canaries, leave-one-out, pooled like the LiRA rows (every attack of the registry that
scores leave-one-out: attacks/catalogue.py).

Model m is the target in turn. A reference-free attack (Loss, Zlib, Min-K%, Min-K%++) sees only that model's arrays:
lp = -losses[m] (NaN where mask.npy is False), mu[m] and sigma[m]; RMIA and WBC take the other M - 1 models as
references. Each gives scores [M, N], pooled over all M x N (model, canary) pairs with keep.npy as the labels by
lira.metrics.summarize with the same FPRs, bootstrap replicates and seed as the LiRA rows, so all sit in one table.
A shadow run scores all T positions (the trainer prepends BOS, so a canary's first token is predicted too), unlike
the features folder's lp, whose position 0 is NaN; mask.npy, where present, marks the scored positions (False -> NaN
here).
"""

import dataclasses
import functools
import os

import numpy as np

from lira import metrics
from lira.errors import InputError, MissingFileError
from lira.evaluation import ModelRows
from lira.reports import population_files
import run_folder
from lira.scoring import Scoring


@dataclasses.dataclass(frozen=True)
class AttackRows:
  """Rows for lira.reports.loo_report.evaluate_run: [{name, attack, params, summary}], scores {attack: [M, N]}, settings."""
  rows: list
  scores: dict
  settings: dict
  defaults: dict
  styles: dict
  notes: tuple = ()
  words: str = ""  # the settings that acted, for titles: "k=0.2, rmia_gamma=1"
  population: dict = dataclasses.field(default_factory=dict)  # Chosen.population_record: the report records it


def target_lp(loss_NxT, mask_NxT=None):
  """lp = -loss of one target model, float64 [N, T], NaN where the mask says a position is not scored."""
  lp_NxT = -np.asarray(loss_NxT, dtype=np.float64)
  if mask_NxT is not None:
    lp_NxT = np.where(np.asarray(mask_NxT, bool), lp_NxT, np.nan)
  return lp_NxT


class ShadowRun:
  """What an attack's leave-one-out scorer reads of a shadow run: loss_MxNxT, keep_MxN, mask_NxT, the scoring's
  shared settings (reduction, balance_counts), and on request the canaries' texts, the per-token moments and the
  population (each read and checked once). `subset(models)` is the run restricted to some models (shadow_sweep)."""

  def __init__(self, run_dir, loss_MxNxT, keep_MxN, mask_NxT, scoring=None, model_ids=None, parent=None):
    self.run_dir, self.loss_MxNxT, self.keep_MxN, self.mask_NxT = run_dir, loss_MxNxT, keep_MxN, mask_NxT
    self.scoring = Scoring.of(scoring)
    self.model_ids = model_ids
    self._parent = parent
    self._cache = {}

  @classmethod
  def load(cls, run_dir, scoring=None):
    run = run_folder.load_run(run_dir, mmap=True)
    return cls(run_dir, run.loss_MxNxT, run.keep_MxN, run.mask_NxT, scoring)

  @property
  def num_models(self):
    return self.loss_MxNxT.shape[0]

  def subset(self, models):
    """The run restricted to `models` (sorted model ids), read lazily (lira.evaluation.ModelRows)."""
    models = np.asarray(models)
    return ShadowRun(self.run_dir, ModelRows(self.loss_MxNxT, models), self.keep_MxN[models], self.mask_NxT,
                     self.scoring, models, parent=(self, models))

  def _once(self, key, make):
    if key not in self._cache:
      self._cache[key] = make()
    return self._cache[key]

  def target_lp(self, m):
    """Model m's lp = -loss [N, T] (NaN where unscored)."""
    if self._parent is not None:
      parent, models = self._parent
      return parent.target_lp(int(models[m]))
    return target_lp(self.loss_MxNxT[m], self.mask_NxT)

  def texts(self):
    """The canaries as text (canary_texts)."""
    if self._parent is not None:
      return self._parent[0].texts()
    return self._once("texts", lambda: canary_texts(self.run_dir, self.loss_MxNxT.shape[1], self.mask_NxT))

  def moments(self, m=None):
    """(mu, sigma) [M, N, T] memory-mapped, or model m's [N, T] each."""
    if self._parent is not None:
      parent, models = self._parent
      return parent.moments() if m is None else parent.moments(int(models[m]))
    mu, sigma = self._once("moments", lambda: _moments(self.run_dir, self.loss_MxNxT.shape))
    return (mu, sigma) if m is None else (mu[m], sigma[m])

  def population(self):
    """(pop_MxZxT, pop_mask_ZxT or None): the population's per-token losses on these models."""
    if self._parent is not None:
      parent, models = self._parent
      pop_MxZxT, pop_mask_ZxT = parent.population()
      return ModelRows(pop_MxZxT, models), pop_mask_ZxT
    return self._once("population", lambda: population_files.load_population(self.run_dir, mmap=True))

  def top1(self):
    """top1.npy [M, N, T] bool (memory-mapped; this run's models' rows): whether each model's top-1 token at a
    position is the canary's."""
    if self._parent is not None:
      parent, models = self._parent
      return ModelRows(parent.top1(), models)
    return self._once("top1", lambda: _top1(self.run_dir, self.loss_MxNxT.shape))

  def base_losses(self):
    """The canaries' per-token losses on the base model [N, T] (base_losses.npy of a fine-tuning run)."""
    if self._parent is not None:
      return self._parent[0].base_losses()
    return self._once("base", lambda: _base_losses(self.run_dir, self.loss_MxNxT.shape[1:]))

  def prepare(self, attacks):
    """Read every input the attacks need ("texts", "moments", "population", "base", "top1") now: a missing file is
    named, with the attack that needs it, before any scoring."""
    for attack in attacks:
      for need in attack.needs:
        load = {"texts": self.texts, "moments": self.moments, "population": self.population,
                "base": self.base_losses, "top1": self.top1}[need]
        if need == "population":  # its own message says how to make the population
          load()
          continue
        try:
          load()
        except MissingFileError as e:
          raise MissingFileError(f"attack {attack.name} needs {e}") from e

  def check_rows(self):
    """Every (model, canary) has a scored position; the error names losses.npy, the model and the canary."""
    self._once("rows", lambda: _check_rows(self.run_dir, self))

  def check_defined(self, undefined_N, name, why):
    """Refuse an attack some canary cannot be scored by, naming the canary."""
    if np.any(undefined_N):
      raise InputError(f"{self.run_dir}: canary {int(np.flatnonzero(undefined_N)[0])} has too few models for "
                       f"{name} ({int(np.sum(undefined_N))} canaries): {why}")


def canary_texts(run_dir, num_canaries, mask_NxT=None):
  """The canaries as text: RUN/texts.json if present, else canaries.npy decoded with RUN/tokenizer.json.

  A canary's tokens run up to its last scored position (mask.npy), or all T without a mask.
  """
  texts_path = os.path.join(run_dir, run_folder.names.TEXTS)
  if os.path.exists(texts_path):
    texts = run_folder.load_json(texts_path)
    texts = texts.get("texts") if isinstance(texts, dict) else texts
    if not isinstance(texts, list) or len(texts) != num_canaries:
      raise InputError(f"{texts_path}: expected a list of N = {num_canaries} canary texts")
    return [str(t) for t in texts]
  paths = [os.path.join(run_dir, f) for f in (run_folder.names.CANARIES, run_folder.names.TOKENIZER)]
  missing = [p for p in paths if not os.path.exists(p)]
  if missing:
    raise MissingFileError(f"the canaries' texts: {' and '.join(missing)} (or texts.json) not found in the run "
                           "folder")
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
      raise MissingFileError(f"{path} (per-token moments the shadow pipeline writes beside losses.npy); it is "
                             "absent")
    array = run_folder.load_npy(path, mmap=True)
    if array.shape != shape:
      raise InputError(f"{path}: shape {list(array.shape)} does not match losses.npy {list(shape)}")
    out.append(array)
  return out


def _top1(run_dir, shape):
  """top1.npy [M, N, T] bool of the run (memory-mapped), shape- and dtype-checked."""
  path = os.path.join(run_dir, run_folder.names.TOP1)
  if not os.path.exists(path):
    raise MissingFileError(f"{path}: the models' top-1 correctness per token, which train_shadows writes beside "
                           "losses.npy from the same forward pass; this run has none (made before the file existed: "
                           f"python -m experiments.train_shadows --run_dir={run_dir} adds it from the groups' "
                           "checkpoints; or not made by train_shadows)")
  array = run_folder.load_npy(path, mmap=True)
  if array.shape != tuple(shape) or array.dtype != bool:
    raise InputError(f"{path}: {array.dtype} {list(array.shape)}, expected bool {list(shape)} as losses.npy")
  return array


def _base_losses(run_dir, shape):
  """base_losses.npy [N, T] of the run, memory-mapped and shape-checked."""
  path = os.path.join(run_dir, run_folder.names.BASE_LOSSES)
  if not os.path.exists(path):
    raise MissingFileError(f"{path}: the canaries' per-token losses on the base model, which train_shadows writes for "
                           "a run that fine-tunes a base model (GPT-NeoX); this run has none (trained from scratch, "
                           "or made before the file existed)")
  array = run_folder.load_npy(path, mmap=True)
  if array.shape != tuple(shape):
    raise InputError(f"{path}: shape {list(array.shape)} does not match the canaries' [N, T] = {list(shape)}")
  return array


def _shown(value):
  return ",".join(str(v) for v in value) if isinstance(value, (tuple, list)) else f"{value:g}"


def _check_rows(run_dir, run):
  """Every (model, canary) has a scored position; the error names losses.npy, the model and the canary."""
  for m in range(run.loss_MxNxT.shape[0]):
    empty_N = ~np.isfinite(target_lp(run.loss_MxNxT[m], run.mask_NxT)).any(axis=1)
    if empty_N.any():
      raise InputError(f"{os.path.join(run_dir, run_folder.names.LOSSES)}: model {m}, canary {int(np.flatnonzero(empty_N)[0])} "
                       "has no scored position (all NaN or masked)")


@dataclasses.dataclass(frozen=True)
class Chosen:
  """The named attacks on a shadow run, every input and setting checked: run, attacks, settings (all), acted (the
  settings that act on them, what report names and titles carry)."""
  run: ShadowRun
  attacks: list
  settings: dict
  acted: dict
  defaults: dict  # every registered setting's default

  @property
  def words(self):
    return ", ".join(f"{n}={_shown(v)}" for n, v in self.acted.items())

  def styles(self):
    return {a.label(self.settings): a.style for a in self.attacks}

  def scorers(self):
    """[(row name, scorer(model_ids, on_undefined))]: each attack on a subset of the run's models (shadow_sweep)."""
    def scorer(attack, model_ids, on_undefined="raise"):
      return attack.leave_one_out(self.run.subset(model_ids), self.settings, on_undefined)
    return [(a.label(self.settings), functools.partial(scorer, a)) for a in self.attacks]

  def population_size(self):
    """Z of the population, when an attack reads it (else None)."""
    if any("population" in a.needs for a in self.attacks):
      return int(self.run.population()[0].shape[1])
    return None

  def population_record(self):
    """What a report records of the population it was made from (population_files.record), when an attack reads it;
    else {}."""
    if any("population" in a.needs for a in self.attacks):
      return population_files.record(self.run.run_dir)
    return {}


def choose(run_dir, attacks, settings=None, scoring=None, given=(), where="leave_one_out"):
  """The named attacks (attacks.catalogue) ready to score a shadow run's pairs, or separate targets with it as the
  reference models (where="targets"): an unknown name, a setting out of range or
  given without an attack that reads it, a missing file and every undefined canary are reported here, before any
  attack scores."""
  from attacks.catalogue import ATTACKS
  chosen = ATTACKS.chosen(attacks, where)
  settings = ATTACKS.checked_settings(settings or {}, chosen, given, where)
  run = ShadowRun.load(run_dir, scoring)
  run.prepare(chosen)
  for attack in chosen:
    if attack.check is not None:
      attack.check(run, settings)
  acted = {n: settings[n] for n in dict.fromkeys(n for attack in chosen for n in attack.acting(settings))}
  return Chosen(run, chosen, settings, acted, ATTACKS.defaults())


def shadow_rows(run_dir, attacks, settings=None, scoring=None, *, n_boot=metrics.N_BOOT, seed=0,
                fprs=metrics.DEFAULT_FPRS, given=()):
  """The rows of the named attacks on a shadow run (`choose`): scores [M, N] per attack, summarized over all pairs
  with keep.npy. settings: {setting: value} (the registry's defaults for the others); `given`: the settings the user
  set, refused when no named attack reads them."""
  from attacks.catalogue import ATTACKS
  c = choose(run_dir, attacks, settings, scoring, given)
  rows, scores, notes = [], {}, {}
  for attack in c.attacks:
    scores_MxN = attack.leave_one_out(c.run, c.settings)
    summary = metrics.summarize(scores_MxN, c.run.keep_MxN, fprs=fprs, n_boot=n_boot, seed=seed)
    row = {"name": attack.label(c.settings), "attack": attack.name, "params": attack.params(c.settings),
           "summary": summary}
    if "population" in attack.needs:
      row["population"] = c.population_size()
    rows.append(row)
    scores[attack.name] = scores_MxN
    if attack.note:
      notes.setdefault(attack.note, []).append(row["name"])
  return AttackRows(rows, scores, {"attacks": [a.name for a in c.attacks], **c.acted},
                    {"attacks": None, **ATTACKS.defaults()}, c.styles(),
                    tuple(note.format(names=", ".join(names)) for note, names in notes.items()), c.words,
                    c.population_record())
