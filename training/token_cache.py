"""A cache of the data step's two slow results, each a pure function of its inputs: the BPE tokenizer trained on a
corpus split, and a split's texts encoded and packed into T-token sequences (seconds to tens of seconds each for the
CPU default's corpus, on every run and every resume). An entry is named by the SHA-256 of everything its result
depends on (the texts, the vocabulary size or the tokenizer's own JSON, T, the tokenizers version), so a hit is the
same result, byte for byte; a file that cannot be read is rebuilt.

Where: $SEQLIRA_CACHE, else $XDG_CACHE_HOME/seqlira, else ~/.cache/seqlira; SEQLIRA_CACHE=off turns it off. A folder
that cannot be written is skipped (the result is computed as without the cache). Plain .npy and JSON, no pickle.
"""

import hashlib
import os

import run_folder
from lira.errors import InputError

OFF = "off"


def folder():
  """The cache folder, or None when SEQLIRA_CACHE=off."""
  where = os.environ.get("SEQLIRA_CACHE")
  if where == OFF:
    return None
  if not where:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    where = os.path.join(base, "seqlira")
  return where


def key(*parts, texts=()):
  """The hex SHA-256 of the parts (strings or numbers) and the texts, each text delimited."""
  import tokenizers
  h = hashlib.sha256(f"tokenizers {tokenizers.__version__}\0".encode())
  for part in parts:
    h.update(f"{part}\0".encode())
  for text in texts:
    h.update(text.encode("utf-8", "surrogatepass"))
    h.update(b"\0\1")
  return h.hexdigest()


def cached(name, make, load, save):
  """make() through the cache: load(path) on a hit, else make() then save(path, result) (best effort)."""
  where = folder()
  if where is None:
    return make()
  path = os.path.join(where, name)
  if os.path.exists(path):
    try:
      return load(path)
    except Exception:  # noqa: BLE001 - any entry that does not load (tokenizers raises a bare Exception) is rebuilt
      pass
  result = make()
  try:
    save(path, result)
  except (OSError, InputError):
    pass
  return result


def packed(texts, tokenizer, seq_len, make):
  """tokens_SxT of the texts packed by `make()` (training.data.pack_sequences), through the cache."""
  texts = list(texts)
  name = f"packed_{key('packed', seq_len, tokenizer.to_str(), texts=texts)[:40]}.npy"
  return cached(name, make, lambda p: run_folder.load_npy(p), run_folder.save_npy)


def bpe(texts, vocab_size, make):
  """The BPE tokenizer `make()` trains on the texts (training.data.train_bpe_tokenizer), through the cache."""
  import tokenizers
  texts = list(texts)
  name = f"bpe_{key('bpe', vocab_size, texts=texts)[:40]}.json"
  return cached(name, make, tokenizers.Tokenizer.from_file,
                lambda p, tok: run_folder.save_text(p, tok.to_str()))


def clear():
  """Remove every entry (the files this module wrote) from the cache folder."""
  where = folder()
  if where is None or not os.path.isdir(where):
    return 0
  names = [n for n in os.listdir(where) if n.startswith(("packed_", "bpe_")) and n.endswith((".npy", ".json"))]
  for n in names:
    os.remove(os.path.join(where, n))
  return len(names)
