"""Tests for training.data: corpora, the conversation split, byte-level BPE and sequence packing."""

import json

import numpy as np
import pytest

from training import data

TINY_TEXTS = ["hello world, hello there", "the cat sat on the mat\nthe dog sat too", "hello cat"]


@pytest.fixture(scope="module")
def chitchat():
  return data.load_chitchat()


@pytest.fixture(scope="module")
def small_tokenizer(chitchat):
  return data.train_bpe_tokenizer(data.conversation_texts(chitchat[:300]), 512)


def test_chitchat_matches_the_raw_dataset_sorted_by_id(chitchat):
  import chitchat_dataset

  raw = chitchat_dataset.Dataset()
  assert len(chitchat) == len(raw) == 7168
  keys = sorted(raw)
  for i in (0, 1, 4000, 7167):  # independent reference: every non-blank message, spaces collapsed
    want = [" ".join(m["text"].split()) for turn in raw[keys[i]]["messages"] for m in turn]
    assert chitchat[i] == [w for w in want if w]


def test_chitchat_has_no_empty_or_unnormalised_utterances(chitchat):
  assert all(len(c) > 0 for c in chitchat)
  for conv in chitchat:
    for u in conv:
      assert u and u == u.strip() and "\n" not in u and "  " not in u and "\t" not in u


def test_split_is_a_reproducible_partition_by_conversation():
  convs = [[f"utterance {i}"] for i in range(1000)]
  train, heldout = data.split_conversations(convs, heldout_fraction=0.1, seed=3)
  assert len(heldout) == 100 and len(train) == 900
  ids = lambda cs: {c[0] for c in cs}
  assert ids(train).isdisjoint(ids(heldout)) and ids(train) | ids(heldout) == ids(convs)
  assert data.split_conversations(convs, 0.1, seed=3) == (train, heldout)
  assert data.split_conversations(convs, 0.1, seed=4)[1] != heldout
  assert train == [c for c in convs if c[0] in ids(train)]  # input order kept
  with pytest.raises(ValueError, match="heldout_fraction"):
    data.split_conversations(convs, heldout_fraction=1.0)


def test_conversation_texts_join_utterances_with_newlines():
  assert data.conversation_texts([["a b", "c"], ["d"]]) == ["a b\nc", "d"]


def test_bpe_has_bos_zero_and_the_asked_vocab_size(small_tokenizer):
  assert data.bos_id(small_tokenizer) == 0 and small_tokenizer.id_to_token(0) == data.BOS
  assert data.vocab_size(small_tokenizer) == 512


def test_bpe_vocab_is_smaller_on_a_tiny_corpus():
  tok = data.train_bpe_tokenizer(TINY_TEXTS, 1000)
  assert 257 < data.vocab_size(tok) < 1000  # 256 bytes + BOS, then only merges of pairs seen twice


def test_bpe_round_trips_text_including_unseen_characters(small_tokenizer):
  for text in ["Hi! How are you doing today?\nGreat, thanks.", "naïve café 東京 🙂"]:
    ids = small_tokenizer.encode(text, add_special_tokens=False).ids
    assert data.BOS not in small_tokenizer.decode(ids) and small_tokenizer.decode(ids) == text
  assert len(small_tokenizer.encode("the the the the").ids) < len("the the the the")  # merges learned


def test_bpe_saves_atomically_and_loads_back(tmp_path, chitchat):
  texts = data.conversation_texts(chitchat[:200])
  tok = data.train_bpe_tokenizer(texts, 400, path=tmp_path / "tok")
  assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["tokenizer.json"]  # no temp left
  file_tok = data.train_bpe_tokenizer(texts, 400, path=tmp_path / "t.json")
  for name in (tmp_path / "tok", str(tmp_path / "tok" / "tokenizer.json"), tmp_path / "t.json"):
    loaded = data.load_tokenizer(name)
    assert data.bos_id(loaded) == 0
    for text in texts[:20]:
      assert loaded.encode(text).ids == tok.encode(text).ids == file_tok.encode(text).ids
  assert (tmp_path / "tok" / "tokenizer.json").read_bytes() == (tmp_path / "t.json").read_bytes()  # deterministic


def test_load_tokenizer_names_the_missing_path(tmp_path):
  with pytest.raises(FileNotFoundError, match="nowhere"):
    data.load_tokenizer(tmp_path / "nowhere")
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match="empty"):
    data.load_tokenizer(tmp_path / "empty")


def test_bos_id_requires_the_token():
  import tokenizers

  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  with pytest.raises(ValueError, match="endoftext"):
    data.bos_id(tok)


def test_pack_sequences_cuts_the_bos_separated_stream(small_tokenizer):
  texts = TINY_TEXTS * 5 + [""]
  seq_len = 7
  tokens_SxT = data.pack_sequences(texts, small_tokenizer, seq_len)
  stream = []  # reference: token lists joined by BOS, built one text at a time
  for t in texts:
    ids = small_tokenizer.encode(t, add_special_tokens=False).ids
    if ids:
      stream += ([0] if stream else []) + ids
  assert tokens_SxT.dtype == np.int32 and tokens_SxT.shape == (len(stream) // seq_len, seq_len)
  assert tokens_SxT.ravel().tolist() == stream[:tokens_SxT.size]
  assert stream.count(0) == 14 and int((tokens_SxT == 0).sum()) == stream[:tokens_SxT.size].count(0)
  first = small_tokenizer.encode(texts[0], add_special_tokens=False).ids
  assert tokens_SxT.ravel()[len(first)] == 0 and 0 not in first


def test_pack_sequences_errors_name_the_field(small_tokenizer):
  with pytest.raises(ValueError, match="seq_len"):
    data.pack_sequences(TINY_TEXTS, small_tokenizer, 1)
  n = sum(len(small_tokenizer.encode(t).ids) for t in TINY_TEXTS) + 2
  with pytest.raises(ValueError, match=f"has {n} tokens.*seq_len={n + 1}"):
    data.pack_sequences(TINY_TEXTS, small_tokenizer, n + 1)
  assert data.pack_sequences(TINY_TEXTS, small_tokenizer, n).shape == (1, n)


def _persona_rows():
  """Two conversations in the bavard/personachat_truecased layout, rows shuffled."""
  convs = {7: ["Hi there!", "Hello, how are you?", "Good,  thanks.", "I like dogs.", "Me too!", "Great."],
           2: ["Do you surf?", "Yes, every day.", "Cool."]}
  rows = []
  for conv_id, utts in convs.items():
    for i, reply_at in enumerate(range(1, len(utts), 2)):
      rows.append({"personality": ["i like dogs ."], "candidates": ["Something else.", utts[reply_at]],
                   "history": utts[:reply_at], "conv_id": conv_id, "utterance_idx": i})
  return rows[::-1]


def test_personachat_rebuilds_conversations_from_local_jsonl(tmp_path):
  pytest.importorskip("datasets")
  path = tmp_path / "personachat.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in _persona_rows()))
  convs = data.load_personachat(str(path))
  assert convs == [["Do you surf?", "Yes, every day."],  # conv 2 (reply at index 1; "Cool." never answered)
                   ["Hi there!", "Hello, how are you?", "Good, thanks.", "I like dogs.", "Me too!", "Great."]]
  assert data.load_personachat(str(path), split="validation") == convs  # a local file is any split


def test_personachat_names_missing_fields(tmp_path):
  pytest.importorskip("datasets")
  path = tmp_path / "bad.jsonl"
  path.write_text(json.dumps({"history": ["a"], "conv_id": 0}) + "\n")
  with pytest.raises(ValueError, match="candidates"):
    data.load_personachat(str(path))
