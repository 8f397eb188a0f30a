"""The features folder (schema "seqlira.features/1", docs/outputs.md): the one reader, and the writers its builder uses.

A features folder holds everything the pretraining-data attacks need, so every attack is recomputed without the
model: lp / mu / sigma [N, T], top1 [N, T] (bool: the model's top-1 token is the text's), the conditional lp
under ReCaLL prefixes, EM-MIA's pair lp, the reference model's lp and top1 (and, on the same tokens, ref_kl: the KL
of its next-token distribution from the model's), the neighbours' lp, texts.json and labels.npy. Arrays are read
lazily (memory-mapped, no pickle) and every shape an attack relies on is checked against lp's [N, T] before any attack
runs.
"""

import json
import os

import numpy as np

from attacks.rows import as_rows
import run_folder
from lira.errors import InputError, MissingFileError

SCHEMA = "seqlira.features/1"

# Every file of the folder by its short name (lp -> lp.npy, meta -> features.json, ...).
FILES = run_folder.names.FEATURE_FILES


# Per-token arrays (NaN where unscored): expected shape from lp's (N, T); None = any size on that axis.
_PER_TOKEN = {
    "lp": lambda N, T: (N, T), "mu": lambda N, T: (N, T), "sigma": lambda N, T: (N, T),
    "cond_lp_shots": lambda N, T: (None, N, T), "cond_lp_member": lambda N, T: (N, T),
    "cond_lp_ensemble": lambda N, T: (None, N, T), "pair_lp": lambda N, T: (N, N, T),
    "ref_lp": lambda N, T: (N, None), "ref_kl": lambda N, T: (N, T), "neighbour_lp": lambda N, T: (N, None, None),
}
_OTHER = {"ids": lambda N, T: (N, T), "mask": lambda N, T: (N, T), "top1": lambda N, T: (N, T),
          "ref_top1": lambda N, T: (N, None), "labels": lambda N, T: (N,),
          "source_index": lambda N, T: (N,)}


def check_complete(folder):
  """Refuse a folder that experiments.extract_features has not finished: features.json is written last, so a
  folder without it (build.json and some arrays, pairs/ chunks) is an interrupted extraction, never read as is."""
  if not os.path.isdir(folder):
    raise MissingFileError(f"features folder {folder!r} does not exist")
  if os.path.exists(os.path.join(folder, FILES["meta"])):
    return
  if os.path.exists(os.path.join(folder, run_folder.names.LOSSES)) or os.path.exists(
      os.path.join(folder, run_folder.names.KEEP)):
    raise InputError(f"{folder} is a shadow run folder (losses.npy, keep.npy), not a features folder: score its "
                     f"canaries with python -m experiments.evaluate --run_dir={folder} --attacks=...; a features "
                     "folder is built by experiments.extract_features")
  started = os.path.exists(os.path.join(folder, run_folder.names.FEATURES_BUILD))
  if not started and not any(os.path.exists(os.path.join(folder, f)) for f in FILES.values()):
    raise MissingFileError(f"{folder} is not a features folder (no features.json); build one with python -m "
                           "experiments.extract_features --out_dir=" + folder)
  pairs = os.path.join(folder, run_folder.names.PAIRS_DIR)
  chunks = len([n for n in os.listdir(pairs) if n.endswith(".npy")]) if os.path.isdir(pairs) else 0
  doing = f" ({chunks} chunk(s) of EM-MIA's pairs are done in pairs/)" if chunks else ""
  raise InputError(f"features folder {folder} is incomplete: it has no features.json, which "
                   f"experiments.extract_features writes last, so its extraction was interrupted{doing}; re-run the "
                   "same extract_features command to finish it (it resumes where it stopped)")


def _shape_text(shape):
  return "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"


class Features:
  """A features folder read lazily: `features[name]` loads (memory-mapped) and shape-checks one array."""

  def __init__(self, folder):
    if not os.path.isdir(folder):
      raise MissingFileError(f"features folder {folder!r} does not exist")
    self.folder = folder
    self._cache = {}
    self._rows_checked = set()
    check_complete(folder)
    self.meta = self._json("meta")
    if not isinstance(self.meta, dict) or self.meta.get("schema") != SCHEMA:
      schema = self.meta.get("schema") if isinstance(self.meta, dict) else None
      raise InputError(f"{self.path('meta')}: schema {schema!r}, expected {SCHEMA!r}")
    if not self.has("lp"):
      raise MissingFileError(f"features folder {folder} has no lp.npy, which every attack needs")
    listed = self.meta.get("arrays") or {}
    if gone := [FILES.get(name, f"{name}.npy") for name in listed if not self.has(name)]:
      raise InputError(f"{self.path('meta')} lists {', '.join(gone)}, which {folder} lacks: the folder was changed "
                       "after its extraction; re-run experiments.extract_features (--overwrite) to rebuild it")
    lp = self._load("lp")
    if lp.ndim != 2:
      raise InputError(f"{self.path('lp')}: expected [N, T], got shape {list(lp.shape)}")
    self.N, self.T = (int(s) for s in lp.shape)
    if self.meta.get("n_texts") not in (None, self.N):
      raise InputError(f"{self.path('meta')}: n_texts = {self.meta['n_texts']}, but lp.npy has N = {self.N} rows")

  def path(self, name):
    """The file of an array or JSON by its short name."""
    return os.path.join(self.folder, FILES.get(name, f"{name}.npy"))

  def has(self, name):
    return os.path.exists(self.path(name))

  def _json(self, name):
    with open(self.path(name)) as f:
      try:
        return json.load(f)
      except json.JSONDecodeError as e:
        raise InputError(f"{self.path(name)}: not valid JSON ({e})") from e

  def _load(self, name):
    if name not in self._cache:
      path = self.path(name)
      if name in ("texts", "neighbours", "prefix", "meta"):
        self._cache[name] = self._json(name)
      else:
        array = run_folder.load_npy(path, mmap=True)
        if name in _PER_TOKEN and not np.issubdtype(array.dtype, np.floating):
          raise InputError(f"{path}: expected floating-point log-probabilities, got dtype {array.dtype}")
        self._cache[name] = array
    return self._cache[name]

  def __getitem__(self, name):
    """One array (or texts.json's list), shape-checked against lp's [N, T]."""
    value = self._load(name)
    self._check_shape(name, value)
    return value

  def _check_shape(self, name, value):
    path = self.path(name)
    if name == "texts":
      if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InputError(f"{path}: expected a JSON list of strings")
      if len(value) != self.N:
        raise InputError(f"{path}: {len(value)} texts, but lp.npy has N = {self.N} rows")
      return
    if name == "neighbours":
      if not isinstance(value, list) or len(value) != self.N:
        raise InputError(f"{path}: expected a list of N = {self.N} lists of neighbour texts")
      return
    rule = _PER_TOKEN.get(name) or _OTHER.get(name)
    if rule is None:
      return
    if name in ("top1", "ref_top1") and value.dtype != bool:
      raise InputError(f"{path}: expected bool top-1 correctness, got dtype {value.dtype}")
    want = rule(self.N, self.T)
    shape = value.shape
    if len(shape) != len(want) or any(w is not None and s != w for s, w in zip(shape, want)):
      raise InputError(f"{path}: shape {list(shape)} does not match {_shape_text(want)} of lp.npy "
                       f"[N, T] = [{self.N}, {self.T}]")
    if name == "neighbour_lp" and self.has("neighbours"):
      counts = {len(j) for j in self._load("neighbours")}
      if counts != {shape[1]}:
        raise InputError(f"{path}: J = {shape[1]} neighbours per text, but {self.path('neighbours')} holds "
                         f"{sorted(counts)}")

  def available(self, attack):
    """The files `attack` (an attacks.registry.Attack) reads that the folder lacks ([] when it can run)."""
    return [FILES[n] for n in attack.features if not self.has(n)]

  def arrays_for(self, attack):
    """{name: array} of everything `attack` reads, shape-checked, with all-NaN rows refused (file named)."""
    missing = self.available(attack)
    if missing:
      hint = ""
      if FILES["pair_lp"] in missing and os.path.isdir(os.path.join(self.folder, run_folder.names.PAIRS_DIR)):
        hint = " (pairs/ holds chunks: the pair extraction did not finish; re-run it to resume)"
      elif FILES["ref_kl"] in missing:
        hint = (" (the KL between the two models' next-token distributions, which extract_features computes when the "
                "reference model reads the texts as the same token ids over the same vocabulary; a folder built "
                "before it gets it by re-running its extract_features command)")
      elif {FILES["top1"], FILES["ref_top1"]} & set(missing):
        hint = (" (the top-1 correctness arrays, which extract_features writes from the same forward pass as lp; a "
                "folder built before them gets them by re-running its extract_features command, which keeps the "
                "arrays it has)")
      raise MissingFileError(f"attack {attack.name} needs {', '.join(missing)}, which {self.folder} lacks{hint}")
    out = {name: self[name] for name in attack.features}
    for name, value in out.items():
      if name in _PER_TOKEN and name not in self._rows_checked:
        as_rows(self.path(name), value, value.ndim)
        self._rows_checked.add(name)
    return out

  def labels(self):
    """labels.npy as int8 [N] (1 member, 0 non-member, -1 unknown); other values refused."""
    if not self.has("labels"):
      raise MissingFileError(f"features folder {self.folder} has no labels.npy (1 member, 0 non-member per text)")
    labels_N = np.asarray(self["labels"])
    if not np.issubdtype(labels_N.dtype, np.integer) and labels_N.dtype != bool:
      raise InputError(f"{self.path('labels')}: expected integer labels, got dtype {labels_N.dtype}")
    labels_N = labels_N.astype(np.int8)
    bad = ~np.isin(labels_N, (-1, 0, 1))
    if bad.any():
      raise InputError(f"{self.path('labels')}: text {int(np.flatnonzero(bad)[0])} has label "
                       f"{int(labels_N[bad][0])}; labels are 1 (member), 0 (non-member) or -1 (unknown)")
    return labels_N

  def known_labels(self):
    """labels as bool [N] (True = member) for metrics; unknown (-1) labels and a single class are refused."""
    labels_N = self.labels()
    unknown = np.flatnonzero(labels_N == -1)
    if unknown.size:
      raise InputError(f"{self.path('labels')}: {unknown.size} text(s) have label -1 (unknown; first: text "
                       f"{int(unknown[0])}); AUC and TPR need every text labelled 1 (member) or 0 (non-member)")
    n_pos = int((labels_N == 1).sum())
    if n_pos == 0 or n_pos == self.N:
      raise InputError(f"{self.path('labels')}: needs both members and non-members (got {n_pos} members of "
                       f"{self.N} texts)")
    return labels_N == 1


def load_features(folder):
  """Open a features folder (lp.npy required); arrays are read when first asked for."""
  return Features(folder)


def array_shapes(folder):
  """{name: shape} of the .npy arrays a features folder holds (features.json's "arrays")."""
  out = {}
  for name, file in FILES.items():
    path = os.path.join(folder, file)
    if file.endswith(".npy") and os.path.exists(path):
      out[name] = list(run_folder.load_npy(path, mmap=True).shape)
  return out


def write_array(folder, name, array):
  """Write one array of the folder by its short name (lp, cond_lp_shots, ...), atomically, never pickled."""
  if name not in FILES or not FILES[name].endswith(".npy"):
    raise InputError(f"unknown features array {name!r}; choose from "
                     f"{', '.join(n for n, f in FILES.items() if f.endswith('.npy'))}")
  run_folder.save_npy(os.path.join(folder, FILES[name]), array)


def write_json(folder, name, obj):
  """Write texts.json, neighbours.json or prefix.json (strict JSON, atomically)."""
  if name not in ("texts", "neighbours", "prefix"):
    raise InputError(f"unknown features JSON {name!r}; choose from texts, neighbours, prefix")
  run_folder.save_json(os.path.join(folder, FILES[name]), obj)


def write_meta(folder, meta):
  """Write features.json with the schema and the shapes of the arrays present (`arrays`); returns what it wrote."""
  meta = {**meta, "schema": SCHEMA, "arrays": array_shapes(folder)}
  run_folder.save_json(os.path.join(folder, FILES["meta"]), meta)
  return meta
