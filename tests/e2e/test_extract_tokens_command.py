"""extract_tokens as a user runs it, on the base checkpoint a pythia-config shadow run pretrains (the run is
tests/training/test_pipeline.py's fixture, built again in this module)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from test_pipeline import pythia_run  # noqa: F401  (a fixture: the tiny pythia run on the small corpus)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_extract_tokens_cli_on_the_base_checkpoint(tmp_path, pythia_run):
  """lp, mu, sigma of padded texts equal each text scored alone; and transformers' log-probs where torch exists."""
  import jax.numpy as jnp
  from models import hf_convert
  from models import token_loss
  base = os.path.join(pythia_run, "base_model")
  texts = ["hi there, how are you doing today?", "fine", "I like to go hiking with my dog on weekends."]
  (tmp_path / "t.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts) + "\n")
  out = tmp_path / "out"
  cmd = [sys.executable, "-m", "experiments.extract_tokens", f"--model={base}", f"--texts={tmp_path / 't.jsonl'}",
         f"--out_dir={out}", "--batch_size=2"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  ids_BxT, mask_BxT, lp, mu, sigma, top1 = (np.load(out / f"{n}.npy")
                                             for n in ("token_ids", "mask", "lp", "mu", "sigma", "top1"))
  assert top1.dtype == bool and not top1[:, 0].any() and not top1[~mask_BxT].any()
  assert json.loads((out / "texts.json").read_text())["texts"] == texts
  assert np.isnan(lp[:, 0]).all() and np.isnan(lp[~mask_BxT]).all()
  module = hf_convert.from_pretrained(base)
  for b in range(3):
    n = int(mask_BxT[b].sum())
    alone = [np.asarray(s)[0] for s in token_loss.sequence_statistics(
        lambda x, m: module(x, attention_mask=m), jnp.asarray(ids_BxT[b:b + 1, :n]))]
    for ours, ref in zip((-lp[b, 1:n], mu[b, 1:n], sigma[b, 1:n]), alone):
      # padded and unpadded rows have other shapes, so other reduction orders (~1e-6 of O(1-10) values): as above
      np.testing.assert_allclose(ours, ref[1:], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(top1[b, 1:n], alone[3][1:])  # the argmax of those logits
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  hf = transformers.GPTNeoXForCausalLM.from_pretrained(base, attn_implementation="eager").eval()
  with torch.no_grad():
    logp = torch.log_softmax(hf(torch.from_numpy(ids_BxT.astype(np.int64)),
                                attention_mask=torch.from_numpy(mask_BxT.astype(np.int64))).logits, -1).numpy()
  hf_lp = np.take_along_axis(logp[:, :-1], ids_BxT[:, 1:, None], -1)[..., 0]
  np.testing.assert_allclose(lp[:, 1:][mask_BxT[:, 1:]], hf_lp[mask_BxT[:, 1:]], rtol=1e-4, atol=1e-4)  # as above
