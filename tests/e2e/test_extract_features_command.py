"""extract_features and pretrain_attacks as a user runs them (subprocesses): a labelled JSONL to a features folder to
the attack table, and the features of a shadow run's LSTM, which reads BOS first."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from test_feature_extraction import _labelled, model_dir  # noqa: F401  (model_dir: a fixture, a tiny GPT-NeoX folder)
from training import data
from training import per_token


def _cli(*args):
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return subprocess.run([sys.executable, "-m", *args, "--noprogress"], cwd=root, capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": root})


@pytest.mark.slow
def test_commands_extract_every_feature_and_score_every_attack(model_dir, tmp_path):
  """As a user runs it: extract_features on a labelled JSONL, then pretrain_attacks on the folder."""
  texts, labels = _labelled(20)
  src = tmp_path / "texts.jsonl"
  src.write_text("".join(json.dumps({"text": t, "label": int(y)}) + "\n" for t, y in zip(texts, labels)))
  out = tmp_path / "feats"
  r = _cli("experiments.extract_features", f"--model={model_dir}", f"--texts={src}", f"--out_dir={out}",
           "--shots=2", "--ensemble=2", "--pairs", f"--reference_model={model_dir}", "--neighbours=offline",
           "--neighbour_count=2")
  assert r.returncode == 0, r.stderr[-2000:]
  assert "16 texts (8 members, 8 non-members)" in r.stdout
  assert json.load(open(out / "features.json"))["neighbours"] == {"method": "offline-unigram", "count": 2}
  r = _cli("experiments.pretrain_attacks", f"--features={out}")
  assert r.returncode == 0, r.stderr[-2000:]
  names = [row["name"] for row in json.load(open(out / "results.json"))["rows"]]
  for family in ("Loss", "Zlib", "Min-K%", "Min-K%++", "Reference", "Neighbourhood", "ReCaLL", "Con-ReCall",
                 "EM-MIA"):
    assert any(n == family or n.startswith(family + " ") for n in names), (family, names)
  # A second extraction with other settings into the same folder is one line, exit 2, nothing rewritten.
  r = _cli("experiments.extract_features", f"--model={model_dir}", f"--texts={src}", f"--out_dir={out}")
  assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.slow
def test_features_of_an_lstm_shadow_model_read_bos_first(tmp_path, monkeypatch):
  from experiments.configs import lstm as lstm_configs
  from training import pipeline
  from training import run_data
  from training import shadow_model
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: data.load_chitchat()[:400])
  run = tmp_path / "run"
  assert pipeline.run(lstm_configs.get_config("tiny"), str(run), progress=False)
  texts = data.conversation_texts(data.load_chitchat()[400:410])
  src = tmp_path / "texts.txt"
  src.write_text("\n".join(t.replace("\n", " ") for t in texts) + "\n")
  r = _cli("experiments.extract_features", f"--model={run}", "--model_id=4", f"--texts={src}",
           f"--out_dir={tmp_path / 'f'}", "--max_length=16")
  assert r.returncode == 0, r.stderr[-2000:]
  lp = np.load(tmp_path / "f" / "lp.npy")
  assert np.isfinite(lp[:, 0]).all() and json.load(open(tmp_path / "f" / "features.json"))["bos_first"]
  module, tokenizer, bos_id = shadow_model.load_shadow_model(str(run), 4)
  ids, mask = per_token.encode_batch(tokenizer, [t.replace("\n", " ") for t in texts], 16)
  # The same computation in another process: identical up to float32 rounding of O(5) values.
  np.testing.assert_allclose(lp, per_token.causal_lm_statistics(module, ids, mask, 16, bos_id)[0], atol=1e-5)
