"""docs/own_losses.md: its PyTorch example makes a run folder equal to extract_tokens --run_arrays."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from lira.reports import loo_report
import run_folder
from training import canaries
from training import data as data_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
M = 6  # the fewest models leave-one-out accepts for every variant (3 IN and 3 OUT per canary)


DOC = os.path.join("docs", "own_losses.md")


def doc_example():
  """The python block docs/own_losses.md marks as the own-losses example, as a namespace of its functions."""
  with open(os.path.join(ROOT, DOC)) as f:
    text = f.read()
  block = re.search(r"<!-- own-losses-example.*?-->\n```python\n(.*?)```", text, re.S)
  assert block, f"{DOC} lost its own-losses example"
  namespace = {}
  exec(compile(block.group(1), f"{DOC} (own-losses example)", "exec"), namespace)  # noqa: S102
  return namespace


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
  """M tiny random GPT-NeoX checkpoints saved by transformers, a BPE tokenizer, and right-padded texts."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  folder = tmp_path_factory.mktemp("own_losses")
  texts = [f"canary {i}: " + " ".join(["hello there", "how are you", "fine thanks"][j % 3] for j in range(i % 4 + 1))
           for i in range(12)]
  tokenizer = data_lib.train_bpe_tokenizer(texts * 5, 280, folder / "tokenizer.json")
  models = []
  for m in range(M):
    torch.manual_seed(m)
    config = transformers.GPTNeoXConfig(vocab_size=data_lib.vocab_size(tokenizer), hidden_size=32,
                                        num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                        rotary_pct=0.25, max_position_embeddings=64)
    model = transformers.GPTNeoXForCausalLM(config).eval()
    model.save_pretrained(folder / f"model_{m}", safe_serialization=True)
    models.append(model)
  (folder / "texts.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
  keep_MxN = canaries.keep_matrix(M, len(texts), seed=0)
  np.save(folder / "keep.npy", keep_MxN)
  return folder, models, tokenizer, texts, keep_MxN


@pytest.mark.slow
def test_doc_example_equals_extract_tokens_run_arrays(checkpoints, tmp_path):
  import torch
  from training import per_token
  folder, models, tokenizer, texts, keep_MxN = checkpoints
  ids_NxT, mask_NxT = per_token.encode_batch(tokenizer, texts, max_length=128)  # right-padded
  example = doc_example()
  ours = tmp_path / "from_doc"
  example["write_run"](str(ours), models, torch.from_numpy(ids_NxT.astype(np.int64)),
                       torch.from_numpy(mask_NxT.astype(np.int64)), keep_MxN)

  theirs = tmp_path / "from_extract_tokens"
  cmd = [sys.executable, "-m", "experiments.extract_tokens", "--run_arrays",
         "--model=" + ",".join(str(folder / f"model_{m}") for m in range(M)), f"--tokenizer={folder / 'tokenizer.json'}",
         f"--texts={folder / 'texts.jsonl'}", f"--keep={folder / 'keep.npy'}", f"--out_dir={theirs}"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]

  a, b = run_folder.load_run(str(ours)), run_folder.load_run(str(theirs))
  np.testing.assert_array_equal(a.mask_NxT, b.mask_NxT)
  np.testing.assert_array_equal(a.keep_MxN, b.keep_MxN)
  assert not a.mask_NxT[:, 0].any() and (a.mask_NxT.sum(axis=1) == mask_NxT.sum(axis=1) - 1).all()
  scored = np.broadcast_to(a.mask_NxT, a.loss_MxNxT.shape)
  assert np.isnan(a.loss_MxNxT[~scored]).all() and np.isnan(b.loss_MxNxT[~scored]).all()
  # Two float32 forward passes of the same weights (JAX and PyTorch) agree in their logits to ~1e-5 here (the
  # parity tests bound them by 1e-4); a loss, logsumexp(z) - z_t, moves by at most twice the largest logit change.
  np.testing.assert_allclose(b.loss_MxNxT[scored], a.loss_MxNxT[scored], rtol=0, atol=2e-4)
  assert (a.loss_MxNxT[scored] > 0).all()
  table, result = loo_report.evaluate_run(str(theirs), n_boot=0, progress=False)
  assert result["shape"] == {"M": M, "N": len(texts), "T": ids_NxT.shape[1]} and "OAS Shared" in table
