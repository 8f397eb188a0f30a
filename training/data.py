"""Dialogue corpora, byte-level BPE tokenizers and fixed-length token sequences for the shadow models."""

import os

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

import run_folder
from lira.errors import InputError, MissingPackageError, MissingFileError

BOS = "<|endoftext|>"  # id 0 in every tokenizer we train, as in Pythia's


def _clean(text):
  """Collapses every run of whitespace to one space and strips the ends."""
  return " ".join(str(text).split())


def _utterances(texts):
  """Whitespace-normalised utterances with the empty ones dropped."""
  return [u for u in (_clean(t) for t in texts) if u]


def load_chitchat():
  """Chit-Chat conversations (7,168) sorted by id, each a list of utterances, one per message."""
  import chitchat_dataset  # the package reads its bundled JSON on construction

  ds = chitchat_dataset.Dataset()
  return [_utterances(m["text"] for turn in ds[k]["messages"] for m in turn) for k in sorted(ds)]


# Hub datasets with several configurations and none marked default: the one holding the full data.
_HUB_CONFIGS = {"bavard/personachat_truecased": "full"}


def load_personachat(name_or_path, split="train", config=None):
  """PersonaChat conversations in the bavard/personachat_truecased row format, sorted by conv_id.

  `name_or_path` is a hub id (online only), a local dataset folder, or a local JSON/JSONL file with one
  row per turn: history (the utterances so far) and candidates (the last one is the true reply). Each
  conversation is its longest history plus that row's true reply.
  """
  try:
    import datasets
    import pyarrow.compute as pc
  except ImportError as e:
    raise MissingPackageError("load_personachat needs Hugging Face datasets: pip install datasets") from e
  from models import hub  # the hub only for hub ids
  if os.path.isfile(name_or_path):
    ds = datasets.load_dataset("json", data_files={split: name_or_path}, split=split)
  elif os.path.isdir(name_or_path) or not hub.is_hub_id(name_or_path):
    ds = datasets.load_dataset(name_or_path, config or _HUB_CONFIGS.get(name_or_path), split=split)
  else:
    hub.prepare()  # no network: offline mode at once, not 24 s of retries
    try:
      ds = datasets.load_dataset(name_or_path, config or _HUB_CONFIGS.get(name_or_path), split=split)
    except OSError as e:  # ConnectionError and the hub's not-found errors are OSErrors
      reason = hub.unreachable_reason() or f"the hub could not provide it: {e}"
      raise MissingFileError(f"could not load the dataset {name_or_path!r}: {reason}; pass a local copy as "
                             "--config.data.hub_id=PATH (a dataset folder or a JSON / JSONL file)") from e
  missing = {"conv_id", "utterance_idx", "history", "candidates"} - set(ds.column_names)
  if missing:
    raise InputError(f"{name_or_path} ({split}) lacks the PersonaChat fields {sorted(missing)}")
  if len(ds) == 0:
    return []
  conv_ids = np.asarray(ds["conv_id"], np.int64)
  history_len = pc.list_value_length(ds.data.column("history")).to_numpy(zero_copy_only=False)
  utterance_idx = np.asarray(ds["utterance_idx"], np.int64)
  # Sorted by (conv_id, history length, utterance_idx): each conv_id's last row has its longest history.
  order = np.lexsort((utterance_idx, history_len, conv_ids))
  last_of_group = np.append(conv_ids[order][1:] != conv_ids[order][:-1], True)
  rows = ds.select(order[last_of_group].tolist())
  return [_utterances(list(h) + [c[-1]]) for h, c in zip(rows["history"], rows["candidates"])]


def split_conversations(conversations, heldout_fraction=0.1, seed=0):
  """Splits by conversation with a seeded permutation; returns (train, heldout), each in input order."""
  if not 0.0 <= heldout_fraction < 1.0:
    raise InputError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
  n = len(conversations)
  perm = np.random.default_rng(seed).permutation(n)
  num_heldout = int(round(n * heldout_fraction))
  is_heldout = np.zeros(n, bool)
  is_heldout[perm[:num_heldout]] = True
  train = [c for c, h in zip(conversations, is_heldout) if not h]
  heldout = [c for c, h in zip(conversations, is_heldout) if h]
  return train, heldout


def conversation_texts(conversations):
  """One text per conversation: its utterances joined by newlines."""
  return ["\n".join(c) for c in conversations]


def _tokenizer_file(path):
  """Where to save: `path` itself if it names a .json file, else `path/tokenizer.json` (a folder)."""
  path = os.fspath(path)
  return path if path.endswith(".json") else os.path.join(path, run_folder.names.TOKENIZER)


def train_bpe_tokenizer(texts, vocab_size, path=None):
  """Byte-level BPE (BOS first, so id 0; min_frequency 2); saved as tokenizer.json at `path` if given.

  `path` is a .json file name or a folder (created if needed; then `path/tokenizer.json`). The
  vocabulary is smaller than `vocab_size` when the texts run out of pairs seen at least twice.
  """
  byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
  if vocab_size < len(byte_alphabet) + 1:
    raise InputError(f"vocab_size must be at least {len(byte_alphabet) + 1} (256 bytes + BOS), got {vocab_size}")
  tokenizer = tokenizers.Tokenizer(models.BPE())
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[BOS],
                                initial_alphabet=byte_alphabet, show_progress=False)
  tokenizer.train_from_iterator(texts, trainer=trainer)
  if path is not None:
    run_folder.save_text(_tokenizer_file(path), tokenizer.to_str())  # atomic, with the permissions of a plain write
  return tokenizer


def load_tokenizer(name_or_path):
  """A tokenizer from a tokenizer.json file, a folder holding one, or a hub id (online only)."""
  path = os.path.expanduser(str(name_or_path))
  if os.path.isfile(path):
    return tokenizers.Tokenizer.from_file(path)
  if os.path.isdir(path):
    file = os.path.join(path, run_folder.names.TOKENIZER)
    if not os.path.isfile(file):
      raise MissingFileError(f"no tokenizer.json in the folder {path}")
    return tokenizers.Tokenizer.from_file(file)
  from models import hub  # the hub only for hub ids
  if path.endswith(".json") or not hub.is_hub_id(path):
    raise MissingFileError(f"tokenizer not found: {path} does not exist")
  hub.prepare()  # no network: offline mode at once, not 24 s of retries
  try:
    return tokenizers.Tokenizer.from_pretrained(path)
  except Exception as e:  # the hub raises its own errors; name what was asked for
    reason = hub.unreachable_reason() or f"the hub could not provide it: {e}"
    raise MissingFileError(f"tokenizer {path!r} is not a local file or folder, and {reason}; pass a local "
                           "tokenizer.json or a folder holding one") from e


def bos_id(tokenizer):
  """Id of the BOS token "<|endoftext|>" (also Pythia's end-of-text token)."""
  i = tokenizer.token_to_id(BOS)
  if i is None:
    raise InputError(f"the tokenizer has no {BOS} token")
  return i


def vocab_size(tokenizer):
  """Number of token ids, special tokens included."""
  return tokenizer.get_vocab_size(with_added_tokens=True)


ENCODE_CHUNK = 1024  # texts per encode_batch call: a signal is handled between calls (tens of ms each)


def pack_sequences(texts, tokenizer, seq_len, between=None):
  """tokens_SxT int32: the texts' tokens with BOS between texts, cut into S chunks of T = seq_len.

  Texts that encode to no tokens are skipped (no doubled BOS); the incomplete last chunk is dropped. `between()` is
  called between chunks of the encoding (training.preemption.check: a stop there stops it).
  """
  if seq_len < 2:
    raise InputError(f"seq_len must be at least 2, got {seq_len}")
  sep = np.array([bos_id(tokenizer)], np.int32)
  texts = list(texts)
  pieces = []
  # In chunks: one encode_batch over a whole corpus holds the interpreter for seconds, and a Ctrl-C with it
  for start in range(0, len(texts), ENCODE_CHUNK):
    if between is not None:
      between()
    for enc in tokenizer.encode_batch(texts[start:start + ENCODE_CHUNK], add_special_tokens=False):
      if enc.ids:
        pieces += [np.asarray(enc.ids, np.int32), sep]
  stream = np.concatenate(pieces[:-1]) if pieces else np.zeros(0, np.int32)
  num_seqs = len(stream) // seq_len
  if num_seqs == 0:
    raise InputError(f"the corpus has {len(stream)} tokens (BOS separators included), fewer than "
                     f"seq_len={seq_len}: no sequence can be made")
  return stream[:num_seqs * seq_len].reshape(num_seqs, seq_len)
