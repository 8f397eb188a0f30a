"""training/token_cache.py: the data step through the cache gives the run the data it gives without it, byte for
byte (tokenizer.json, canaries.npy, keep.npy, the training sequences), a damaged entry is rebuilt, and
SEQLIRA_CACHE=off turns it off."""

import os

import numpy as np

from experiments.configs import lstm
from training import run_data
from training import token_cache


def prepare(tmp_path, name, monkeypatch, cache):
  monkeypatch.setenv("SEQLIRA_CACHE", cache)
  run = tmp_path / name
  run.mkdir()
  cfg = lstm.get_config("tiny")
  cfg.population.size = 0
  data = run_data.prepare_data(cfg, str(run), progress=False)
  files = {f: (run / f).read_bytes() for f in sorted(os.listdir(run))}
  return data, files


def test_the_cached_data_step_gives_the_same_run_byte_for_byte(tmp_path, monkeypatch, small_corpus):
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: small_corpus)
  cache = str(tmp_path / "cache")
  plain, plain_files = prepare(tmp_path, "plain", monkeypatch, "off")
  assert not os.path.exists(cache)
  first, first_files = prepare(tmp_path, "first", monkeypatch, cache)  # fills the cache
  names = sorted(os.listdir(cache))
  assert [n.split("_")[0] for n in names] == ["bpe", "packed"] and names[0].endswith(".json")
  second, second_files = prepare(tmp_path, "second", monkeypatch, cache)  # reads it
  for data, files in ((first, first_files), (second, second_files)):
    assert files == plain_files  # tokenizer.json, canaries.npy, keep.npy
    np.testing.assert_array_equal(data.examples_ExT, plain.examples_ExT)
  # a damaged entry is rebuilt, not trusted
  for n in names:
    with open(os.path.join(cache, n), "wb") as f:
      f.write(b"garbage")
  third, third_files = prepare(tmp_path, "third", monkeypatch, cache)
  assert third_files == plain_files
  np.testing.assert_array_equal(third.examples_ExT, plain.examples_ExT)
  monkeypatch.setenv("SEQLIRA_CACHE", cache)
  assert token_cache.clear() == 2 and os.listdir(cache) == []


def test_an_entry_is_named_by_everything_it_depends_on():
  a = token_cache.key("packed", 12, "{tokenizer}", texts=["ab", "c"])
  assert a != token_cache.key("packed", 12, "{tokenizer}", texts=["a", "bc"])  # texts delimited
  assert a != token_cache.key("packed", 13, "{tokenizer}", texts=["ab", "c"])
  assert a == token_cache.key("packed", 12, "{tokenizer}", texts=["ab", "c"])
