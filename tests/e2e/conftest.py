"""The corpus the e2e tests' training commands read: the tests' small corpus (tests/conftest.py: the first 400
Chit-Chat conversations, as tests/training's in-process runs use), written as a local PersonaChat JSONL file, read
with --config.data.corpus=personachat --config.data.hub_id=FILE. Training the BPE tokenizer on, and encoding, the
whole corpus took 10 s of every tiny training subprocess; no e2e test checks anything that needs more of it."""

import json

import pytest


@pytest.fixture(scope="session")
def corpus_flags(tmp_path_factory, small_corpus):
  """The --config.data flags of a train_shadows command (a resumed run passes the same)."""
  from training import data
  path = tmp_path_factory.mktemp("corpus") / "chitchat_400.jsonl"
  with open(path, "w") as f:
    for i, utterances in enumerate(small_corpus):
      row = {"conv_id": i, "utterance_idx": 0, "history": utterances[:-1], "candidates": [utterances[-1]]}
      f.write(json.dumps(row) + "\n")
  assert data.load_personachat(str(path)) == small_corpus
  return ("--config.data.corpus=personachat", f"--config.data.hub_id={path}")
