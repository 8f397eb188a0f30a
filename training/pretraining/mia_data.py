"""Membership benchmarks for pretraining-data attacks: WikiMIA, MIMIR and users' own labelled texts.

Every loader returns plain Python: `texts` (list of N str), `labels` (np.int8 [N]: 1 member,
0 non-member; read_labelled_texts also keeps -1, unknown) and, for MIMIR, `neighbours` (N lists of
strings, MIMIR's precomputed neighbour texts, in the order of `texts`).

- WikiMIA (Shi et al. 2024): hub dataset swj0419/WikiMIA, one split per length
  (WikiMIA_length32/64/128/256), rows {"input": str, "label": 0/1}.
- MIMIR (Duan et al. 2024): hub dataset iamgroot42/mimir, one config per domain, one split per
  n-gram filter ("ngram_13_0.8", ...). Its loading script (python_scripts/mimir.py in
  github.com/iamgroot42/mimir) reads four JSONL files per (domain, split) under
  cache_100_200_1000_512/ (cache_100_200_10000_512/ for full_pile):
    train/{domain}_{split}.jsonl                  one JSON string per line (members)
    test/{domain}_{split}.jsonl                   one JSON string per line (non-members)
    train_neighbors/{domain}_{split}_neighbors_25_bert_in_place_swap.jsonl   one JSON list per line
    test_neighbors/{domain}_{split}_neighbors_25_bert_in_place_swap.jsonl
  (split "none" drops the "_{split}" part). Hugging Face `datasets` >= 4 refuses loading scripts, so
  the hub path downloads these same four files with huggingface_hub and reads them like a local copy.
  The script pairs the files row by row (zip); we read each file whole, so members and non-members
  may differ in number in a local copy.
"""

import gzip
import json
import os

import numpy as np

from lira.errors import InputError, MissingFileError, MissingPackageError

WIKIMIA_ID = "swj0419/WikiMIA"
WIKIMIA_LENGTHS = (32, 64, 128, 256)
MIMIR_ID = "iamgroot42/mimir"
_NGRAM_SPLITS = ("ngram_7_0.2", "ngram_13_0.2", "ngram_13_0.8")
# Domains and splits exactly as MIMIR's loading script lists them (its BUILDER_CONFIGS).
MIMIR_SPLITS = {
    "arxiv": _NGRAM_SPLITS,
    "dm_mathematics": _NGRAM_SPLITS,
    "github": _NGRAM_SPLITS,
    "hackernews": _NGRAM_SPLITS,
    "pile_cc": _NGRAM_SPLITS,
    "pubmed_central": _NGRAM_SPLITS,
    "wikipedia_(en)": _NGRAM_SPLITS,
    "full_pile": ("none",),
    "c4": ("none",),
    "temporal_arxiv": ("2020_08", "2021_01", "2021_06", "2022_01", "2022_06", "2023_01", "2023_06"),
    "temporal_wiki": ("none",),
}
MIMIR_NEIGHBOUR_SUFFIX = "_neighbors_25_bert_in_place_swap"
_TEXT_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet")


def _open_text(path):
  """A text handle on path, gunzipped when it ends in .gz."""
  return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def _json_lines(path):
  """The values of a JSON-lines file, blank lines skipped; a bad line names the file and line."""
  values = []
  with _open_text(path) as f:
    for line_no, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        values.append(json.loads(line))
      except json.JSONDecodeError as e:
        raise InputError(f"{path}: line {line_no} is not valid JSON ({e.msg})") from None
  return values


def read_rows(path):
  """Rows (dicts) of a local JSONL, JSON (a list of rows, or columns of equal length) or parquet file."""
  if not os.path.isfile(path):
    raise MissingFileError(f"{path} does not exist")
  if path.endswith(".parquet"):
    try:
      import pyarrow.parquet as pq
    except ImportError as e:
      raise MissingPackageError(f"reading {path} needs pyarrow: pip install pyarrow") from e
    return pq.read_table(path).to_pylist()
  if path.endswith((".json", ".json.gz")):
    with _open_text(path) as f:
      try:
        obj = json.load(f)
      except json.JSONDecodeError:
        obj = None  # JSON lines under a .json name (what datasets' to_json writes)
    if obj is None:
      rows = _json_lines(path)
    elif isinstance(obj, dict) and all(isinstance(v, list) for v in obj.values()):
      lengths = {len(v) for v in obj.values()}
      if len(lengths) > 1:
        raise InputError(f"{path}: its columns {sorted(obj)} differ in length")
      rows = [dict(zip(obj, values)) for values in zip(*obj.values())]
    elif isinstance(obj, list):
      rows = obj
    elif isinstance(obj, dict):
      rows = [obj]  # one row of JSON lines under a .json name
    else:
      raise InputError(f"{path}: expected a list of rows or a dict of columns, got {type(obj).__name__}")
  else:
    rows = _json_lines(path)
  for i, row in enumerate(rows):
    if not isinstance(row, dict):
      raise InputError(f"{path}: row {i} is a {type(row).__name__}, not an object with named fields")
  return rows


def _label(value, where, allowed=(0, 1)):
  """An integer label from a JSON value (1, 0, True, 1.0), else an InputError naming where it was."""
  if isinstance(value, (bool, int, float)) and float(value).is_integer() and int(value) in allowed:
    return int(value)
  raise InputError(f"{where}: label must be one of {list(allowed)}, got {value!r}")


def _texts_and_labels(rows, path, text_fields, allowed_labels=(0, 1), missing_label=None):
  """(texts, labels int8) from rows holding one of text_fields and "label" (or without it, `missing_label` if that
  is given); names any bad row and field."""
  texts, labels = [], []
  for i, row in enumerate(rows):
    field = next((f for f in text_fields if f in row), None)
    if field is None:
      raise InputError(f"{path}: row {i} has no field {' or '.join(repr(f) for f in text_fields)}")
    if "label" not in row and missing_label is None:
      raise InputError(f"{path}: row {i} has no field 'label'")
    if not isinstance(row[field], str):
      raise InputError(f"{path}: row {i} field {field!r} is a {type(row[field]).__name__}, not a string")
    texts.append(row[field])
    labels.append(_label(row.get("label", missing_label), f"{path}: row {i} field 'label'", allowed_labels))
  if not texts:
    raise InputError(f"{path} holds no rows")
  return texts, np.asarray(labels, np.int8)


def read_labelled_texts(path):
  """Users' own benchmark: rows {"text" (or "input"): str, "label": 1 member / 0 non-member / -1 unknown}; a row
  without "label" is unknown (-1)."""
  return _texts_and_labels(read_rows(path), path, ("text", "input"), allowed_labels=(1, 0, -1), missing_label=-1)


def _wikimia_file(folder, length):
  """The one file named WikiMIA_length{length}* in folder or folder/data (the hub repo's layout)."""
  stem = f"WikiMIA_length{length}"
  found = []
  for sub in (folder, os.path.join(folder, "data")):
    if os.path.isdir(sub):
      found += [os.path.join(sub, n) for n in sorted(os.listdir(sub))
                if n.startswith(stem) and n[len(stem):len(stem) + 1] in ("", ".", "-", "_")
                and n.endswith(_TEXT_SUFFIXES)]
  if len(found) != 1:
    what = "no file" if not found else f"{len(found)} files ({', '.join(found)})"
    raise MissingFileError(f"{folder}: expected one {stem}.jsonl/.json/.parquet file, found {what}")
  return found[0]


def _local_hint(kind, what):
  """How to pass a local copy of a hub benchmark, on the command line and in Python."""
  if kind == "wikimia":
    return (f"--texts=wikimia:{what}:PATH, PATH a folder holding WikiMIA_length{what}.jsonl (or .json, .parquet; "
            f"also under data/) or that file (in Python: load_wikimia({what}, path=PATH))")
  return (f"--texts=mimir:{what}:PATH, PATH a copy of the {MIMIR_ID} repo (holding cache_100_200_1000_512/) or of "
          "its cache_* folder (in Python: load_mimir(..., path=PATH))")


def load_wikimia(length=32, path=None):
  """WikiMIA (Shi et al. 2024) texts and labels: from the hub, or from a local file/folder in its format.

  `path` is a JSONL, JSON or parquet file of rows {"input", "label"} (taken as the asked length), or a
  folder holding WikiMIA_length{length}.* (also under data/, as the hub repo stores it).
  """
  if length not in WIKIMIA_LENGTHS:
    raise InputError(f"WikiMIA length must be one of {list(WIKIMIA_LENGTHS)}, got {length!r}")
  split = f"WikiMIA_length{length}"
  if path is not None:
    if os.path.isdir(path):
      path = _wikimia_file(path, length)
    return _texts_and_labels(read_rows(path), path, ("input",))
  try:
    import datasets
  except ImportError as e:
    raise MissingPackageError("loading WikiMIA from the hub needs Hugging Face datasets: pip install -e \".[hf]\" "
                              f"(or pass a local copy: {_local_hint('wikimia', length)})") from e
  from models import hub
  hub.prepare()  # no network: offline mode at once, not 24 s of retries
  try:
    ds = datasets.load_dataset(WIKIMIA_ID, split=split)
  except OSError as e:  # ConnectionError and the hub's not-found errors are OSErrors
    reason = hub.unreachable_reason() or f"the hub could not provide it: {e}"
    raise MissingFileError(f"could not load {WIKIMIA_ID} ({split}): {reason}; pass a local copy: "
                           f"{_local_hint('wikimia', length)}") from e
  return _texts_and_labels(list(ds), f"{WIKIMIA_ID} ({split})", ("input",))


def _check_mimir(domain, split):
  """InputError unless (domain, split) is one MIMIR publishes."""
  if domain not in MIMIR_SPLITS:
    raise InputError(f"unknown MIMIR domain {domain!r}; MIMIR has {list(MIMIR_SPLITS)}")
  if split not in MIMIR_SPLITS[domain]:
    raise InputError(f"MIMIR domain {domain!r} has no split {split!r}; it has {list(MIMIR_SPLITS[domain])}")


def mimir_files(domain, split="ngram_13_0.8"):
  """The four files of a MIMIR (domain, split) relative to the hub repo's root, keyed like its columns."""
  _check_mimir(domain, split)
  parent = "cache_100_200_10000_512" if domain == "full_pile" else "cache_100_200_1000_512"
  stem = domain if split == "none" else f"{domain}_{split}"
  return {
      "member": f"{parent}/train/{stem}.jsonl",
      "nonmember": f"{parent}/test/{stem}.jsonl",
      "member_neighbors": f"{parent}/train_neighbors/{stem}{MIMIR_NEIGHBOUR_SUFFIX}.jsonl",
      "nonmember_neighbors": f"{parent}/test_neighbors/{stem}{MIMIR_NEIGHBOUR_SUFFIX}.jsonl",
  }


def _local_mimir_files(path, files):
  """Local paths of MIMIR's files under path: the hub repo's root, or the cache_* folder itself."""
  parent = files["member"].split("/")[0]
  if os.path.isdir(os.path.join(path, parent)):
    return {k: os.path.join(path, *v.split("/")) for k, v in files.items()}
  return {k: os.path.join(path, *v.split("/")[1:]) for k, v in files.items()}  # holds train/, test/, ...


def _hub_mimir_files(files, want_neighbours):
  """Downloads MIMIR's files from the hub (huggingface_hub's cache); returns their local paths."""
  try:
    from huggingface_hub import hf_hub_download
  except ImportError as e:
    raise MissingPackageError("loading MIMIR from the hub needs huggingface_hub: pip install -e \".[hf]\" (or pass "
                              f"a local copy: {_local_hint('mimir', 'DOMAIN:SPLIT')})") from e
  from models import hub
  hub.prepare()  # no network: offline mode at once, not 24 s of retries
  keys = list(files) if want_neighbours else ["member", "nonmember"]
  local = {}
  for k in keys:
    try:
      local[k] = hf_hub_download(MIMIR_ID, files[k], repo_type="dataset")
    except OSError as e:  # offline, or no such file: huggingface_hub's errors are OSErrors
      reason = hub.unreachable_reason() or f"the hub could not provide it: {e}"
      raise MissingFileError(f"could not download {files[k]} of {MIMIR_ID}: {reason}; pass a local copy: "
                             f"{_local_hint('mimir', 'DOMAIN:SPLIT')}") from e
  return local


def _mimir_texts(path):
  """A MIMIR member/non-member file: one JSON string per line."""
  texts = _json_lines(path)
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise InputError(f"{path}: line {i + 1} holds a {type(t).__name__}, not a JSON string")
  if not texts:
    raise InputError(f"{path} holds no texts")
  return texts


def _mimir_neighbours(path, n):
  """A MIMIR neighbour file: one JSON list of strings per line (a list holding one such list also read)."""
  rows = _json_lines(path)
  if len(rows) != n:
    raise InputError(f"{path} has {len(rows)} lines for {n} texts")
  out = []
  for i, row in enumerate(rows):
    # MIMIR's own dumps nest one list per substring of the document; with one substring, unwrap it.
    if isinstance(row, list) and len(row) == 1 and isinstance(row[0], list):
      row = row[0]
    if not isinstance(row, list) or not row or not all(isinstance(s, str) for s in row):
      raise InputError(f"{path}: line {i + 1} is not a non-empty JSON list of strings")
    out.append(row)
  return out


def load_mimir(domain, split="ngram_13_0.8", path=None, neighbours=True):
  """MIMIR (Duan et al. 2024) texts, labels and precomputed neighbours (None where absent or not asked).

  Members come first, then non-members, each in file order. `path` is a local copy laid out like the
  hub repo: its root (holding cache_100_200_1000_512/) or that cache folder itself (holding train/,
  test/, train_neighbors/, test_neighbors/). A local copy without both neighbour files gives None.
  """
  files = mimir_files(domain, split)
  if path is None:
    local = _hub_mimir_files(files, neighbours)
  else:
    if not os.path.isdir(path):
      raise MissingFileError(f"{path} is not a folder (expected a local copy of {MIMIR_ID})")
    local = _local_mimir_files(path, files)
  for k in ("member", "nonmember"):
    if not os.path.isfile(local[k]):
      raise MissingFileError(f"{local[k]} does not exist (MIMIR {domain} {split} {k}s)")
  members, nonmembers = _mimir_texts(local["member"]), _mimir_texts(local["nonmember"])
  texts = members + nonmembers
  labels = np.concatenate([np.ones(len(members), np.int8), np.zeros(len(nonmembers), np.int8)])
  nb = None
  if neighbours:
    have = [os.path.isfile(local.get(k, "")) for k in ("member_neighbors", "nonmember_neighbors")]
    if any(have) and not all(have):
      missing = local["member_neighbors" if not have[0] else "nonmember_neighbors"]
      raise MissingFileError(f"{missing} does not exist, though its counterpart does")
    if all(have):
      nb = (_mimir_neighbours(local["member_neighbors"], len(members))
            + _mimir_neighbours(local["nonmember_neighbors"], len(nonmembers)))
  return texts, labels, nb


def _looks_like_path(text):
  return text.startswith((".", "/", "~")) or os.sep in text or os.path.exists(text)


def parse_source(source):
  """(kind, arguments) of a command-line source: ("wikimia", {length, path}), ("mimir", {domain, split, path}) or
  ("file", {path}). wikimia:LENGTH[:PATH] and mimir:DOMAIN[:SPLIT][:PATH]: PATH is a local copy (no hub)."""
  if source.startswith("wikimia:"):
    _, length, *rest = source.split(":", 2)
    if not length.isdigit():
      raise InputError(f"source {source!r}: expected wikimia:LENGTH[:PATH], LENGTH 32, 64, 128 or 256")
    return "wikimia", {"length": int(length), "path": os.path.expanduser(rest[0]) if rest and rest[0] else None}
  if source.startswith("mimir:"):
    _, domain, *rest = source.split(":", 2)
    if not domain:
      raise InputError(f"source {source!r}: expected mimir:DOMAIN[:SPLIT][:PATH]")
    args = {"domain": domain, "path": None}
    if rest and rest[0]:
      head, sep, tail = rest[0].partition(":")
      if head in MIMIR_SPLITS.get(domain, ()) or (not sep and not _looks_like_path(head)):
        args["split"], args["path"] = head, tail or None
      else:  # mimir:DOMAIN:PATH, the default split
        args["path"] = rest[0]
    if args["path"] is not None:
      args["path"] = os.path.expanduser(args["path"])
    return "mimir", args
  return "file", {"path": source}


def load_source(source):
  """(texts, labels int8, neighbours or None) from a command-line source: wikimia:LENGTH[:PATH],
  mimir:DOMAIN[:SPLIT][:PATH] (PATH: a local copy, read instead of the hub), a JSONL / JSON / parquet file of
  {"text" or "input", "label"} rows, or a plain text file (one text per line, labels unknown, -1)."""
  kind, args = parse_source(source)
  if kind == "wikimia":
    return (*load_wikimia(args["length"], path=args["path"]), None)
  if kind == "mimir":
    return load_mimir(**args)
  if not os.path.isfile(source):
    raise MissingFileError(f"{source} does not exist (expected a file, wikimia:LENGTH[:PATH] or "
                           "mimir:DOMAIN[:SPLIT][:PATH])")
  if source.endswith((".jsonl", ".json", ".json.gz", ".parquet")):
    return (*read_labelled_texts(source), None)
  with _open_text(source) as f:
    texts = [line.rstrip("\n") for line in f if line.strip()]
  if not texts:
    raise InputError(f"{source} holds no texts")
  return texts, np.full(len(texts), -1, np.int8), None
