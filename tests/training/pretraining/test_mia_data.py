"""Tests for training.pretraining.mia_data: WikiMIA, MIMIR and users' labelled texts, from fixture files the tests
write."""

import json
import os

import numpy as np
import pytest

from lira.errors import InputError, MissingFileError
from training.pretraining import mia_data

WIKI_ROWS = [{"input": "Paris is the capital of France.", "label": 1},
             {"input": "The 2024 Olympics opened in July.", "label": 0},
             {"input": "Water boils at 100 degrees.", "label": 1}]


def write_jsonl(path, values):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.writelines(json.dumps(v) + "\n" for v in values)


def write_mimir(root, domain="arxiv", split="ngram_13_0.8", members=("m one", "m two", "m three"),
                nonmembers=("n one", "n two"), neighbours=3, parent="cache_100_200_1000_512"):
  """MIMIR's layout as its hub loading script reads it (python_scripts/mimir.py in iamgroot42/mimir)."""
  stem = domain if split == "none" else f"{domain}_{split}"
  write_jsonl(f"{root}/{parent}/train/{stem}.jsonl", members)
  write_jsonl(f"{root}/{parent}/test/{stem}.jsonl", nonmembers)
  if neighbours:
    suffix = "_neighbors_25_bert_in_place_swap.jsonl"
    write_jsonl(f"{root}/{parent}/train_neighbors/{stem}{suffix}",
                [[f"{t} nb{j}" for j in range(neighbours)] for t in members])
    write_jsonl(f"{root}/{parent}/test_neighbors/{stem}{suffix}",
                [[f"{t} nb{j}" for j in range(neighbours)] for t in nonmembers])
  return f"{root}/{parent}"


# --- WikiMIA ---------------------------------------------------------------------------------------

def check_wiki(texts, labels):
  assert texts == [r["input"] for r in WIKI_ROWS]
  assert labels.dtype == np.int8 and labels.tolist() == [1, 0, 1]


def test_wikimia_from_jsonl_json_rows_json_columns_and_parquet(tmp_path):
  write_jsonl(f"{tmp_path}/w.jsonl", WIKI_ROWS)
  check_wiki(*mia_data.load_wikimia(32, path=f"{tmp_path}/w.jsonl"))
  (tmp_path / "rows.json").write_text(json.dumps(WIKI_ROWS))
  check_wiki(*mia_data.load_wikimia(64, path=f"{tmp_path}/rows.json"))
  cols = {"input": [r["input"] for r in WIKI_ROWS], "label": [r["label"] for r in WIKI_ROWS]}
  (tmp_path / "cols.json").write_text(json.dumps(cols))
  check_wiki(*mia_data.load_wikimia(128, path=f"{tmp_path}/cols.json"))
  pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
  pq.write_table(pa.Table.from_pylist(WIKI_ROWS), f"{tmp_path}/w.parquet")
  check_wiki(*mia_data.load_wikimia(256, path=f"{tmp_path}/w.parquet"))


def test_wikimia_folder_picks_the_asked_length_also_under_data(tmp_path):
  write_jsonl(f"{tmp_path}/data/WikiMIA_length64.jsonl", WIKI_ROWS)
  write_jsonl(f"{tmp_path}/data/WikiMIA_length32.jsonl", WIKI_ROWS[:1])
  check_wiki(*mia_data.load_wikimia(64, path=str(tmp_path)))
  assert len(mia_data.load_wikimia(32, path=str(tmp_path))[0]) == 1
  with pytest.raises(MissingFileError, match="WikiMIA_length128"):
    mia_data.load_wikimia(128, path=str(tmp_path))


def test_wikimia_bad_input_names_length_file_row_and_field(tmp_path):
  with pytest.raises(InputError, match=r"\[32, 64, 128, 256\]"):
    mia_data.load_wikimia(100, path="unused")
  path = f"{tmp_path}/w.jsonl"
  write_jsonl(path, [WIKI_ROWS[0], {"label": 1}])
  with pytest.raises(InputError, match=r"w\.jsonl: row 1 has no field 'input'"):
    mia_data.load_wikimia(32, path=path)
  write_jsonl(path, [{"input": "x"}])
  with pytest.raises(InputError, match=r"w\.jsonl: row 0 has no field 'label'"):
    mia_data.load_wikimia(32, path=path)
  write_jsonl(path, [{"input": "x", "label": 2}])
  with pytest.raises(InputError, match=r"row 0 field 'label'.*got 2"):
    mia_data.load_wikimia(32, path=path)
  (tmp_path / "bad.jsonl").write_text('{"input": "x", "label": 1}\n{oops\n')
  with pytest.raises(InputError, match=r"bad\.jsonl: line 2 is not valid JSON"):
    mia_data.load_wikimia(32, path=f"{tmp_path}/bad.jsonl")
  with pytest.raises(MissingFileError, match="nowhere.jsonl"):
    mia_data.load_wikimia(32, path=f"{tmp_path}/nowhere.jsonl")


def test_wikimia_hub_path_calls_load_dataset_with_the_split(monkeypatch):
  datasets = pytest.importorskip("datasets")
  calls = []

  def fake_load_dataset(path, name=None, split=None, **kwargs):
    calls.append((path, name, split))
    return [dict(r) for r in WIKI_ROWS]  # iterating a datasets.Dataset yields the same dicts

  monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
  check_wiki(*mia_data.load_wikimia(128))
  assert calls == [("swj0419/WikiMIA", None, "WikiMIA_length128")]


def test_wikimia_hub_offline_is_a_clear_error(monkeypatch):
  datasets = pytest.importorskip("datasets")

  def offline(*args, **kwargs):
    raise ConnectionError("Couldn't reach 'swj0419/WikiMIA' on the Hub (LocalEntryNotFoundError)")

  monkeypatch.setattr(datasets, "load_dataset", offline)
  with pytest.raises(MissingFileError, match=r"swj0419/WikiMIA.*HF_HUB_OFFLINE is set.*pass a local copy: "
                                            r"--texts=wikimia:32:PATH.*load_wikimia\(32, path=PATH\)"):
    mia_data.load_wikimia(32)


def test_source_forms_with_a_local_copy(tmp_path):
  assert mia_data.parse_source("wikimia:64") == ("wikimia", {"length": 64, "path": None})
  assert mia_data.parse_source(f"wikimia:64:{tmp_path}") == ("wikimia", {"length": 64, "path": str(tmp_path)})
  assert mia_data.parse_source("mimir:arxiv") == ("mimir", {"domain": "arxiv", "path": None})
  assert mia_data.parse_source("mimir:arxiv:ngram_7_0.2") == ("mimir", {"domain": "arxiv", "split": "ngram_7_0.2",
                                                                        "path": None})
  assert mia_data.parse_source(f"mimir:arxiv:{tmp_path}") == ("mimir", {"domain": "arxiv", "path": str(tmp_path)})
  assert mia_data.parse_source(f"mimir:c4:none:{tmp_path}") == ("mimir", {"domain": "c4", "split": "none",
                                                                          "path": str(tmp_path)})
  assert mia_data.parse_source("texts.jsonl") == ("file", {"path": "texts.jsonl"})
  # wikimia:LENGTH:PATH and mimir:DOMAIN:SPLIT:PATH read the local copy, never the hub
  os.makedirs(tmp_path / "wiki" / "data")
  write_jsonl(f"{tmp_path}/wiki/data/WikiMIA_length64.jsonl", [{"input": "a b", "label": 1}, {"input": "c", "label": 0}])
  texts, labels, nb = mia_data.load_source(f"wikimia:64:{tmp_path}/wiki")
  assert texts == ["a b", "c"] and labels.tolist() == [1, 0] and nb is None
  write_mimir(tmp_path / "mimir")
  texts, labels, nb = mia_data.load_source(f"mimir:arxiv:ngram_13_0.8:{tmp_path}/mimir")
  assert texts == mia_data.load_mimir("arxiv", path=str(tmp_path / "mimir"))[0] and labels[0] == 1
  with pytest.raises(MissingFileError, match="nope"):
    mia_data.load_source(f"wikimia:32:{tmp_path}/nope")
  with pytest.raises(InputError, match="wikimia:LENGTH"):
    mia_data.load_source("wikimia:x")


# --- MIMIR -----------------------------------------------------------------------------------------

def test_mimir_local_from_repo_root_and_cache_folder(tmp_path):
  cache = write_mimir(tmp_path)
  for path in (str(tmp_path), cache):
    texts, labels, nb = mia_data.load_mimir("arxiv", "ngram_13_0.8", path=path)
    assert texts == ["m one", "m two", "m three", "n one", "n two"]
    assert labels.dtype == np.int8 and labels.tolist() == [1, 1, 1, 0, 0]
    assert nb == [[f"{t} nb{j}" for j in range(3)] for t in texts]


def test_mimir_split_none_and_full_pile_folder(tmp_path):
  write_mimir(tmp_path, domain="full_pile", split="none", parent="cache_100_200_10000_512")
  texts, labels, nb = mia_data.load_mimir("full_pile", "none", path=str(tmp_path))
  assert len(texts) == 5 and labels.sum() == 3 and len(nb) == 5
  assert mia_data.mimir_files("c4", "none")["member"] == "cache_100_200_1000_512/train/c4.jsonl"


def test_mimir_without_neighbour_files_gives_none(tmp_path):
  write_mimir(tmp_path, domain="github", split="ngram_7_0.2", neighbours=0)
  texts, labels, nb = mia_data.load_mimir("github", "ngram_7_0.2", path=str(tmp_path))
  assert nb is None and len(texts) == 5
  assert mia_data.load_mimir("github", "ngram_7_0.2", path=str(tmp_path), neighbours=False)[2] is None


def test_mimir_reads_its_own_nested_neighbour_dump(tmp_path):
  cache = write_mimir(tmp_path, neighbours=0)
  suffix = "_neighbors_25_bert_in_place_swap.jsonl"
  # MIMIR's run.py dumps one list per substring of each document: [[n0, n1, ...]].
  write_jsonl(f"{cache}/train_neighbors/arxiv_ngram_13_0.8{suffix}", [[["a", "b"]]] * 3)
  write_jsonl(f"{cache}/test_neighbors/arxiv_ngram_13_0.8{suffix}", [[["c", "d"]]] * 2)
  assert mia_data.load_mimir("arxiv", path=cache)[2] == [["a", "b"]] * 3 + [["c", "d"]] * 2


def test_mimir_bad_input(tmp_path):
  with pytest.raises(InputError, match=r"unknown MIMIR domain 'wiki'.*'pile_cc'.*'wikipedia_\(en\)'"):
    mia_data.load_mimir("wiki", path=str(tmp_path))
  with pytest.raises(InputError, match=r"no split 'ngram_5'.*'ngram_13_0.8'"):
    mia_data.load_mimir("arxiv", "ngram_5", path=str(tmp_path))
  with pytest.raises(MissingFileError, match=r"train[/\\]arxiv_ngram_13_0\.8\.jsonl"):
    mia_data.load_mimir("arxiv", path=str(tmp_path))
  cache = write_mimir(tmp_path)
  os.remove(f"{cache}/test_neighbors/arxiv_ngram_13_0.8_neighbors_25_bert_in_place_swap.jsonl")
  with pytest.raises(MissingFileError, match="test_neighbors"):
    mia_data.load_mimir("arxiv", path=cache)
  write_jsonl(f"{cache}/test_neighbors/arxiv_ngram_13_0.8_neighbors_25_bert_in_place_swap.jsonl", [["x"]])
  with pytest.raises(InputError, match="has 1 lines for 2 texts"):
    mia_data.load_mimir("arxiv", path=cache)
  write_jsonl(f"{cache}/train/arxiv_ngram_13_0.8.jsonl", [{"text": "not a string"}])
  with pytest.raises(InputError, match=r"train[/\\]arxiv_ngram_13_0\.8\.jsonl: line 1 holds a dict"):
    mia_data.load_mimir("arxiv", path=cache)


def test_mimir_hub_path_downloads_the_scripts_four_files(tmp_path, monkeypatch):
  huggingface_hub = pytest.importorskip("huggingface_hub")
  write_mimir(tmp_path, domain="pile_cc", split="ngram_13_0.2")
  asked = []

  def fake_download(repo_id, filename, repo_type=None, **kwargs):
    asked.append((repo_id, filename, repo_type))
    return os.path.join(str(tmp_path), *filename.split("/"))

  monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
  texts, labels, nb = mia_data.load_mimir("pile_cc", "ngram_13_0.2")
  assert labels.tolist() == [1, 1, 1, 0, 0] and nb[4] == ["n two nb0", "n two nb1", "n two nb2"]
  stem, suffix = "pile_cc_ngram_13_0.2", "_neighbors_25_bert_in_place_swap"
  assert asked == [("iamgroot42/mimir", f"cache_100_200_1000_512/{d}/{stem}{s}.jsonl", "dataset")
                   for d, s in (("train", ""), ("test", ""), ("train_neighbors", suffix), ("test_neighbors", suffix))]

  def offline(*args, **kwargs):
    raise huggingface_hub.errors.LocalEntryNotFoundError("cannot find the requested files")

  monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
  with pytest.raises(MissingFileError, match="iamgroot42/mimir.*pass a local copy: --texts=mimir:DOMAIN:SPLIT:PATH"):
    mia_data.load_mimir("pile_cc", "ngram_13_0.2")


# --- users' own texts ------------------------------------------------------------------------------

def test_read_labelled_texts_takes_text_or_input_and_unknown_labels(tmp_path):
  path = f"{tmp_path}/mine.jsonl"
  write_jsonl(path, [{"text": "a", "label": 1}, {"input": "b", "label": 0}, {"text": "c", "label": -1, "id": 7},
                     {"text": "d"}])
  texts, labels = mia_data.read_labelled_texts(path)
  assert texts == ["a", "b", "c", "d"] and labels.dtype == np.int8 and labels.tolist() == [1, 0, -1, -1]
  write_jsonl(path, [{"text": "a", "label": 1}, {"txt": "b", "label": 0}])
  with pytest.raises(InputError, match=r"mine\.jsonl: row 1 has no field 'text' or 'input'"):
    mia_data.read_labelled_texts(path)
  write_jsonl(path, [{"text": 3, "label": 1}])
  with pytest.raises(InputError, match=r"row 0 field 'text' is a int"):
    mia_data.read_labelled_texts(path)
  write_jsonl(f"{tmp_path}/one.json", [{"text": "a", "label": 0}])  # JSON lines under a .json name
  assert mia_data.read_labelled_texts(f"{tmp_path}/one.json")[0] == ["a"]
  write_jsonl(path, [])
  with pytest.raises(InputError, match="holds no rows"):
    mia_data.read_labelled_texts(path)
