"""Fine-tuning shadow runs of the GPT-2 and Llama families (experiments/configs/gpt2.py:tiny, llama.py:tiny) end to
end: the base pretrained and saved as a folder that transformers loads, the copies fine-tuned from it, and the stored
arrays (losses, top1, the base model's) equal to transformers' PyTorch model on the same weights, for the base and for
a fine-tuned copy written back as a Hugging Face folder."""

import os

import numpy as np
import pytest

from experiments.configs import gpt2 as gpt2_configs
from experiments.configs import llama as llama_configs
import run_folder
from training import pipeline
from training import run_data
from training import shadow_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CONFIGS = {"gpt2": gpt2_configs, "llama": llama_configs}


@pytest.fixture(scope="module", params=list(CONFIGS))
def lm_run(request, tmp_path_factory, small_corpus):
  mp = pytest.MonkeyPatch()
  mp.setattr(run_data, "_corpus", lambda cfg: small_corpus)
  run_dir = str(tmp_path_factory.mktemp(request.param))
  cfg = CONFIGS[request.param].get_config("tiny")
  assert pipeline.run(cfg, run_dir, progress=False)
  yield cfg, run_dir
  mp.undo()


def torch_losses(folder, canaries_NxT, bos_id):
  """(-ln p(x_t | BOS, x_<t), top-1 correct) [N, T] of the canaries under transformers' model of `folder`."""
  model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
  inputs = np.concatenate([np.full((len(canaries_NxT), 1), bos_id), canaries_NxT[:, :-1]], axis=1)
  with torch.no_grad():
    logits = model(torch.tensor(inputs, dtype=torch.long)).logits.double()
  targets = torch.tensor(canaries_NxT, dtype=torch.long)
  loss = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
  return loss.numpy(), (logits.argmax(-1) == targets).numpy()


@pytest.mark.slow
def test_the_base_and_a_fine_tuned_copy_equal_transformers_on_the_stored_arrays(lm_run, tmp_path):
  from models import hf_convert
  cfg, run_dir = lm_run
  data = run_data.prepare_data(cfg, run_dir, progress=False)
  run = run_folder.load_run(run_dir)
  M, N, T = cfg.shadow.num_models, cfg.canaries.num_canaries, cfg.data.seq_len
  assert run.loss_MxNxT.shape == (M, N, T)
  canaries_NxT = np.load(os.path.join(run_dir, "canaries.npy"))
  # float32 on both sides, sums in other orders: losses of size ~6 a few ulps apart; 1e-4 is 20x that
  loss, top1 = torch_losses(os.path.join(run_dir, "base_model"), canaries_NxT, data.bos_id)
  np.testing.assert_allclose(np.load(os.path.join(run_dir, "base_losses.npy")), loss, rtol=0, atol=1e-4)
  np.testing.assert_array_equal(np.load(os.path.join(run_dir, "base_top1.npy")), top1)
  # model 4 (group 1, second copy) written back as a Hugging Face folder
  copy, _, _ = shadow_model.load_shadow_model(run_dir, 4)
  hf_convert.save_pretrained(copy, str(tmp_path / "copy4"))
  loss, top1 = torch_losses(str(tmp_path / "copy4"), canaries_NxT, data.bos_id)
  np.testing.assert_allclose(run.loss_MxNxT[4], loss, rtol=0, atol=1e-4)
  np.testing.assert_array_equal(np.load(os.path.join(run_dir, "top1.npy"))[4], top1)
  assert not np.allclose(run.loss_MxNxT[4], np.load(os.path.join(run_dir, "base_losses.npy")))  # it moved
