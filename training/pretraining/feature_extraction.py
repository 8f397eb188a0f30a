"""Build a features folder: every per-token array the pretraining-data attacks read, so each attack is recomputed
later without the model (docs/outputs.md, "Features folder").

Stages, each written atomically as soon as it is done and skipped when already on disk, so a killed build resumes:
token ids and lp / mu / sigma / top1; ReCaLL's conditional lp under 1..S non-member shots, under S member shots
(Con-ReCall) and under G disjoint groups of the shots (the ensemble); EM-MIA's N x N pairs in chunks of rows; a
reference model's lp and top1, and, when it reads the texts as the same token ids over the same vocabulary, the KL of
its next-token distribution from the model's at each position (ref_kl, token-level InfoRMIA's correction); neighbour
lp. A prefix is the token-level concatenation of its shots' ids (each shot cut to
max_length tokens, as the texts are; the separator's ids between shots and before the text), so the text keeps exactly the tokens it has in lp.

Prefix shots are drawn from the evaluated texts' known non-members (and as many known members, the Con-ReCall
member prefix), and every text used in a prefix leaves the evaluated set, as the official ReCaLL code does (it
removes an equal number of members to keep the classes balanced); or they come from separate prefix texts, and an
evaluated text equal to one of them is removed and counted.
"""

import json
import os

import numpy as np

from attacks import feature_folder as folder_io  # the folder's one reader and writer: file names, schema
import run_folder
from lira.errors import InputError

PAIR_CHUNK = 32  # prefix rows per pairs/ chunk: what a kill loses at most


def _path(out_dir, name):
  return os.path.join(out_dir, name)


def _have(out_dir, *names):
  """Whether the arrays (short names: lp, pair_lp, ...) are already on disk: their stage is done."""
  return all(os.path.exists(_path(out_dir, folder_io.FILES[n])) for n in names)


def choose_prefix(labels_N, shots, seed=0):
  """(non-member source indices in shot order, member source indices): `shots` of each, drawn without
  replacement from the labelled texts (seeded)."""
  labels_N = np.asarray(labels_N)
  rng = np.random.default_rng(seed)
  picked = []
  for label, name in ((0, "non-members"), (1, "members")):
    pool = np.flatnonzero(labels_N == label)
    if len(pool) < shots + 1:
      raise InputError(f"{shots} prefix shots need at least {shots + 1} known {name} among the texts (labels), "
                       f"found {len(pool)}")
    picked.append(sorted(rng.choice(pool, shots, replace=False).tolist()))
  rng.shuffle(picked[0])  # shot order: the sweep's s shots are the first s
  return [int(i) for i in picked[0]], [int(i) for i in picked[1]]


def ensemble_groups(shots_S, groups):
  """The shots split into `groups` disjoint prefixes of (nearly) equal size, in shot order (ReCaLL Sec. 5.2)."""
  if not 1 <= groups <= len(shots_S):
    raise InputError(f"ensemble groups must be between 1 and the {len(shots_S)} shots, got {groups}")
  return [list(map(int, part)) for part in np.array_split(np.asarray(shots_S), groups)]


def _prefix_ids(token_lists, sep_ids):
  """Token-level concatenation shot + sep + shot + ... + sep (the separator also precedes the text)."""
  out = []
  for ids in token_lists:
    out += list(ids) + list(sep_ids)
  return np.asarray(out, np.int32)


def _context(module):
  return getattr(module.config, "max_position_embeddings", None)


def _check_fits(module, prefix_len, T, what):
  context = _context(module)
  if context is not None and prefix_len + T > context:
    raise InputError(f"{what}: a prefix of {prefix_len} tokens plus texts of up to {T} tokens exceeds the model's "
                     f"context of {context} tokens; use fewer shots or a smaller --max_length")


def _settings_check(out_dir, settings, overwrite):
  """A folder started with other settings is refused (no mixing of two builds); the same settings resume."""
  path = _path(out_dir, run_folder.names.FEATURES_BUILD)
  if os.path.exists(path) and overwrite:  # start afresh: no stale array may be taken for a finished stage
    run_folder.remove_files(out_dir, folder_io.FILES.values())
    remove_pair_chunks(out_dir)
  elif os.path.exists(path):
    old = run_folder.load_json(path)
    if old != run_folder.standard_json(settings):
      changed = sorted(k for k in set(old) | set(settings) if old.get(k) != run_folder.standard_json(settings).get(k))
      raise InputError(f"{out_dir} holds features built with other settings ({', '.join(changed)}); choose another "
                       f"--out_dir, or pass --overwrite to rebuild it")
  run_folder.save_json(path, settings)


def _encode(tokenizer, texts, max_length):
  from training import per_token
  return per_token.encode_batch(tokenizer, texts, max_length)


def _same_tokens(ref_tokenizer, texts, max_length, ids_NxT):
  """Whether the reference tokenizer gives the texts the target's token ids (then the two models' distributions
  over one vocabulary can be compared position by position)."""
  ref_ids_NxT, _ = _encode(ref_tokenizer, texts, max_length)
  return ref_ids_NxT.shape == ids_NxT.shape and bool((ref_ids_NxT == ids_NxT).all())


def _lp_of_texts(module, tokenizer, texts, max_length, batch_size, bos_id=None, top1=False):
  """lp [len(texts), T] (NaN at padding, and at position 0 without BOS) of texts under their own tokenisation;
  with top1, (lp, top1) from the same forward pass."""
  from training import per_token
  ids, mask = _encode(tokenizer, texts, max_length)
  lp, _, _, top1_NxT = per_token.causal_lm_statistics(module, ids, mask, batch_size, bos_id)
  return (lp, top1_NxT) if top1 else lp


def build_features(out_dir, model_path, texts, labels=None, *, tokenizer=None, max_length=128, batch_size=16,
                   prefix_shots=0, prefix_texts=None, ensemble=0, separator="", pairs=False, reference_model=None,
                   neighbours=None, neighbour_method=None, seed=0, dtype="float32", overwrite=False, progress=True,
                   argv=None, module=None, bos_id=None):
  """Write the features folder for `texts` (labels: 1 member, 0 non-member, -1 / None unknown); returns out_dir.

  prefix_shots: S ReCaLL shots drawn from the labelled texts (when prefix_texts is None) or the first S of
  prefix_texts (known non-members; default all of them). ensemble: G disjoint prefixes cut from the S shots.
  pairs: EM-MIA's pair_lp [N, N, T]. reference_model: a folder or hub id. neighbours: one list of neighbour texts
  per input text (neighbour_method names how they were made). module: an already loaded model (a shadow run's,
  training.shadow_model); bos_id: the model reads BOS first (a shadow run's models), so position 0 is scored.
  """
  from training import data as data_lib
  from training import per_token
  from training.pretraining import prefix_lp
  from tqdm import tqdm

  for name, value, low in (("prefix_shots (--shots)", prefix_shots, 0), ("ensemble (--ensemble)", ensemble, 0),
                           ("max_length (--max_length)", max_length, 1), ("batch_size (--batch_size)", batch_size, 1)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
      raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
  texts = list(texts)
  n_in = len(texts)
  labels_N = np.full(n_in, -1, np.int8) if labels is None else np.asarray(labels, np.int8)
  if labels_N.shape != (n_in,):
    raise InputError(f"labels: {len(labels_N)} values for {n_in} texts")
  if not set(np.unique(labels_N).tolist()) <= {-1, 0, 1}:
    raise InputError(f"labels must be 1 (member), 0 (non-member) or -1 (unknown), got {sorted(set(labels_N))}")
  if neighbours is not None and len(neighbours) != n_in:
    raise InputError(f"neighbours: {len(neighbours)} lists for {n_in} texts")
  if ensemble and not prefix_shots and prefix_texts is None:
    raise InputError("ensemble needs prefix shots (prefix_shots or prefix_texts)")
  settings = dict(schema=folder_io.SCHEMA, model=str(model_path), tokenizer=str(tokenizer or model_path), max_length=max_length,
                  n_input=n_in, prefix_shots=prefix_shots, prefix_texts=None if prefix_texts is None else
                  len(prefix_texts), ensemble=ensemble, separator=separator, pairs=bool(pairs),
                  reference_model=None if reference_model is None else str(reference_model),
                  neighbours=neighbour_method if neighbours is not None else None, seed=seed, dtype=dtype,
                  bos_id=bos_id)

  from models import hf_convert
  if module is None:  # the model first: a wrong --model is named as the model, not as a missing tokenizer
    hf_convert.check_source(model_path)
  ref_tok = None
  if reference_model is not None:  # checked now, not after hours of the other stages
    hf_convert.check_source(reference_model)
    ref_tok = data_lib.load_tokenizer(reference_model)
  tok = data_lib.load_tokenizer(tokenizer or model_path)
  # Prefix shots and the texts they remove from the evaluated set.
  keep = np.ones(n_in, bool)
  nonmember_shots, member_shots, prefix_info, removed = [], [], None, 0
  if prefix_texts is not None:
    prefix_texts = list(prefix_texts)[:prefix_shots or None]
    if not prefix_texts:
      raise InputError("prefix_texts is empty")
    shot_texts = set(prefix_texts)
    keep &= np.array([t not in shot_texts for t in texts])
    removed = int((~keep).sum())
    nonmember_ids = [e.ids[:max_length] for e in tok.encode_batch(prefix_texts, add_special_tokens=False)]
    prefix_info = {"nonmember_texts": prefix_texts, "nonmember": [], "member": []}
  elif prefix_shots:
    nonmember_shots, member_shots = choose_prefix(labels_N, prefix_shots, seed)
    keep[nonmember_shots + member_shots] = False
    removed = 2 * prefix_shots
    nonmember_ids = [e.ids[:max_length] for e in tok.encode_batch([texts[i] for i in nonmember_shots], add_special_tokens=False)]
    prefix_info = {"nonmember": nonmember_shots, "member": member_shots}
  source_N = np.flatnonzero(keep)
  eval_texts = [texts[i] for i in source_N]
  if not eval_texts:
    raise InputError("no text is left to evaluate once the prefix texts are removed")
  sep_ids = tok.encode(separator, add_special_tokens=False).ids if separator else []

  ids_NxT, mask_NxT = _encode(tok, eval_texts, max_length)
  N, T = ids_NxT.shape
  if module is None:
    if bos_id is not None:
      raise InputError("bos_id is for a loaded shadow-run model (module=...)")
    module = hf_convert.from_pretrained(model_path, dtype=dtype)
  if ids_NxT.max() >= module.config.vocab_size:
    raise InputError(f"the tokenizer gives id {ids_NxT.max()} but {model_path} embeds {module.config.vocab_size}")
  prefix_sets = {}
  if prefix_info is not None:
    S = len(nonmember_ids)
    prefix_sets["cond_lp_shots"] = [_prefix_ids(nonmember_ids[:s + 1], sep_ids) for s in range(S)]
    if member_shots:
      member_ids = [e.ids[:max_length]
                    for e in tok.encode_batch([texts[i] for i in member_shots], add_special_tokens=False)]
      prefix_sets["cond_lp_member"] = [_prefix_ids(member_ids, sep_ids)]
      prefix_info["member_token_ids"] = [list(map(int, ids)) for ids in member_ids]
    if ensemble:
      groups = ensemble_groups(list(range(S)), ensemble)
      prefix_info["ensemble"] = [[(nonmember_shots or list(range(S)))[i] for i in g] for g in groups]
      prefix_sets["cond_lp_ensemble"] = [_prefix_ids([nonmember_ids[i] for i in g], sep_ids) for g in groups]
    prefix_info["nonmember_token_ids"] = [list(map(int, ids)) for ids in nonmember_ids]
    prefix_info["separator_token_ids"] = list(map(int, sep_ids))
    prefix_info.update(separator=separator, score_first="position 0 of every cond_lp holds ln p(t_0 | P)",
                       concatenation="token ids of each shot, then the separator's ids, before the text's ids")
    for name, prefixes in prefix_sets.items():
      _check_fits(module, max(len(p) for p in prefixes) + (bos_id is not None), T, name)
  if pairs:
    _check_fits(module, int(mask_NxT.sum(1).max()) + (bos_id is not None), T, "pairs")

  # Everything is checked; the long work starts.
  run_folder.check_writable(out_dir, "choose another out_dir")
  _settings_check(out_dir, settings, overwrite)
  save = lambda name, array: folder_io.write_array(out_dir, name, array)  # noqa: E731
  folder_io.write_json(out_dir, "texts", eval_texts)
  save("labels", labels_N[source_N])
  save("source_index", source_N.astype(np.int64))
  save("ids", ids_NxT)
  save("mask", mask_NxT)
  if prefix_info is not None:
    folder_io.write_json(out_dir, "prefix", prefix_info)
  if not _have(out_dir, "lp", "mu", "sigma", "top1"):  # one forward pass; what a stage already wrote is kept
    lp, mu, sigma, top1 = per_token.causal_lm_statistics(module, ids_NxT, mask_NxT, batch_size, bos_id)
    for name, array in (("mu", mu), ("sigma", sigma), ("top1", top1), ("lp", lp)):
      if not _have(out_dir, name):
        save(name, array)
  for name, prefixes in prefix_sets.items():
    if _have(out_dir, name):
      continue
    cond = [prefix_lp.conditional_lp(module, p, ids_NxT, mask_NxT, batch_size=batch_size, bos_id=bos_id)
            for p in tqdm(prefixes, desc=name, disable=not progress or len(prefixes) == 1)]
    save(name, cond[0] if name == "cond_lp_member" else np.stack(cond))
  if pairs and not _have(out_dir, "pair_lp"):
    save("pair_lp", _pairs(out_dir, module, ids_NxT, mask_NxT, batch_size, progress, bos_id))
    remove_pair_chunks(out_dir)
  if reference_model is not None:
    ref = None
    if not _have(out_dir, "ref_lp", "ref_top1"):
      ref = hf_convert.from_pretrained(reference_model, dtype=dtype)
      ref_lp, ref_top1 = _lp_of_texts(ref, ref_tok, eval_texts, max_length, batch_size, top1=True)
      for name, array in (("ref_top1", ref_top1), ("ref_lp", ref_lp)):
        if not _have(out_dir, name):
          save(name, array)
    if bos_id is None and not _have(out_dir, "ref_kl") and _same_tokens(ref_tok, eval_texts, max_length, ids_NxT):
      ref = ref or hf_convert.from_pretrained(reference_model, dtype=dtype)
      if ref.config.vocab_size == module.config.vocab_size:  # token-level InfoRMIA's correction
        save("ref_kl", per_token.reference_kl(module, ref, ids_NxT, mask_NxT, batch_size))
  J = None
  if neighbours is not None:
    lists = [list(neighbours[i]) for i in source_N]
    J = len(lists[0])
    if any(len(n) != J for n in lists):
      raise InputError(f"neighbours: every text needs the same number of neighbours; found {sorted({len(n) for n in lists})}")
    folder_io.write_json(out_dir, "neighbours", lists)
    if not _have(out_dir, "neighbour_lp"):
      flat = [t for n in lists for t in n]
      lp_flat = _lp_of_texts(module, tok, flat, max_length, batch_size, bos_id)
      save("neighbour_lp", lp_flat.reshape(N, J, -1))
  meta = dict(argv=list(argv) if argv is not None else None, model=str(model_path),
              tokenizer=str(tokenizer or model_path), max_length=max_length, n_texts=N,
              prefix=None if prefix_info is None else {k: v for k, v in prefix_info.items()
                                                          if not k.endswith(("_texts", "token_ids"))},
              reference_model=settings["reference_model"],
              neighbours=None if neighbours is None else {"method": neighbour_method, "count": J},
              removed_prefix_texts=removed, bos_first=bos_id is not None,
              label_names={"1": "member", "0": "non-member", "-1": "unknown"},
              notes=[f"{removed} text(s) used in ReCaLL prefixes were removed from the evaluated set"] if removed
              else [])
  folder_io.write_meta(out_dir, meta)  # schema and array shapes added; written last: the folder is complete
  return out_dir


def _pairs(out_dir, module, ids_NxT, mask_NxT, batch_size, progress, bos_id=None):
  """pair_lp [N, N, T] (text p's tokens alone, no separator, before text x) in chunks of PAIR_CHUNK prefix rows under pairs/ (each atomic; done chunks are skipped)."""
  from training.pretraining import prefix_lp
  from tqdm import tqdm
  N = len(ids_NxT)
  folder = _path(out_dir, run_folder.names.PAIRS_DIR)
  os.makedirs(folder, exist_ok=True)
  chunks = [(s, min(N, s + PAIR_CHUNK)) for s in range(0, N, PAIR_CHUNK)]
  parts = []
  with tqdm(total=N, desc="EM-MIA pairs (prefix rows)", disable=not progress) as bar:
    for start, stop in chunks:
      path = os.path.join(folder, f"rows_{start:06d}_{stop:06d}.npy")
      if not os.path.exists(path):
        run_folder.save_npy(path, prefix_lp.pair_lp(module, ids_NxT, mask_NxT, rows=range(start, stop),
                                                batch_size=batch_size, bos_id=bos_id))
      parts.append(run_folder.load_npy(path))
      bar.update(stop - start)
  return np.concatenate(parts)


def remove_pair_chunks(out_dir):
  """Drop pairs/ once pair_lp.npy holds every row."""
  import shutil
  shutil.rmtree(_path(out_dir, run_folder.names.PAIRS_DIR), ignore_errors=True)


def summary(out_dir):
  """A few lines saying what the folder holds (printed by experiments.extract_features)."""
  with open(_path(out_dir, folder_io.FILES["meta"])) as f:
    meta = json.load(f)
  labels = run_folder.load_npy(_path(out_dir, folder_io.FILES["labels"]))
  counts = {name: int((labels == v).sum()) for v, name in ((1, "members"), (0, "non-members"), (-1, "unknown"))}
  lines = [f"{meta['n_texts']} texts ({', '.join(f'{c} {n}' for n, c in counts.items() if c)}) in {out_dir}"]
  lines += [f"  {name}.npy {shape}" for name, shape in meta["arrays"].items()]
  lines += [f"  note: {note}" for note in meta["notes"]]
  return "\n".join(lines)
