"""GPT-2 against Hugging Face's PyTorch GPT2LMHeadModel: per-token log-probabilities of random tiny configs (several
seeds, ragged padding, tied and untied heads), a training step's loss and gradient norms, and the HF folder both ways
(models/hf_convert.py). Folders are written by transformers' save_pretrained from random configs: nothing is
downloaded. The config and name-map checks run without torch."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lira.errors import InputError
from models import get_model
from models import hf_convert
from tests.models.lm_parity import hf_lp, our_lp
from models import token_loss
from models.gpt2 import GPT2Config, GPT2LMHeadModel

T = 12
# Rows: no padding, and right padding (the last 3 and the last 7 are pads), as a batch of ragged texts has it.
MASK_BxT = np.ones((3, T), np.int64)
MASK_BxT[1, T - 3:] = 0
MASK_BxT[2, T - 7:] = 0
# Float32 end to end on both sides: logits of size <= ~10 carry rounding of a few ulps (1e-6) per layer from sums
# taken in other orders (XLA against torch's kernels), so log-probabilities agree to 2e-5 absolute, 20x that.
ATOL = 2e-5
# (seed, config): three seeds of the default (tied head, gelu_new), then the other settings a checkpoint may have
CASES = [(0, {}), (1, {}), (2, {}), (0, dict(tie_word_embeddings=False)), (1, dict(activation_function="gelu")),
         (2, dict(scale_attn_by_inverse_layer_idx=True, n_inner=40))]


def test_config_round_trips_and_refuses_what_it_cannot_run():
  config = GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=4, tie_word_embeddings=False)
  assert hf_convert.config_from_hf_dict(json.loads(json.dumps(config.to_hf_dict()))) == config
  assert config.intermediate_size == 64 and config.head_dim == 4
  with pytest.raises(InputError, match="not divisible"):
    GPT2Config(n_embd=10, n_head=4)
  with pytest.raises(InputError, match="activation_function 'relu' unsupported"):
    GPT2Config(activation_function="relu")
  with pytest.raises(InputError, match="model_type 'bert' has no conversion here; available: gpt_neox, gpt2, llama"):
    hf_convert.config_from_hf_dict({"model_type": "bert"})
  with pytest.raises(InputError, match="cross-attention"):
    GPT2Config.from_hf_dict({"model_type": "gpt2", "add_cross_attention": True})


def test_the_family_builds_a_causal_model_whose_name_map_covers_it():
  fm = get_model("gpt2", vocab_size=40, n_embd=16, n_layer=2, n_head=2, n_positions=T)
  module = nnx.merge(fm.graphdef, fm.init(jax.random.key(0)))
  tokens = np.random.default_rng(0).integers(0, 40, (2, T))
  logits = np.asarray(module(jnp.asarray(tokens)))
  changed = tokens.copy()
  changed[:, 7] = (changed[:, 7] + 1) % 40
  after = np.asarray(module(jnp.asarray(changed)))
  np.testing.assert_array_equal(logits[:, :7], after[:, :7])  # position t never sees tokens after t
  assert not np.allclose(logits[:, 7:], after[:, 7:])
  table = hf_convert.name_table(module.config)
  assert "lm_head.weight" not in table and table["transformer.wpe.weight"][1] == (T, 16)
  with pytest.raises(InputError, match="tokens exceed GPT-2's 12 learned positions"):
    module(jnp.zeros((1, T + 1), jnp.int32))


def test_bfloat16_compute_close_to_float32():
  fm = get_model("gpt2", vocab_size=61, n_embd=32, n_layer=2, n_head=4, n_positions=T)
  for tied in (True, False):
    model = fm if tied else get_model("gpt2", vocab_size=61, n_embd=32, n_layer=2, n_head=4, n_positions=T,
                                      tie_word_embeddings=False)
    params = jax.tree.map(lambda x: x * 5.0, model.init(jax.random.key(1)))  # far from init: sharp attention
    tokens = jnp.asarray(np.random.default_rng(5).integers(0, 61, (3, T)))
    ref = np.asarray(model.apply(params, tokens, jnp.asarray(MASK_BxT)))
    bf16 = np.asarray(model.with_compute_dtype("bfloat16").apply(params, tokens, jnp.asarray(MASK_BxT)))
    keep = MASK_BxT == 1
    assert bf16.dtype == np.float32  # float32 logits whatever the compute dtype
    err = np.abs(bf16[keep] - ref[keep]).max() / np.abs(ref[keep]).max()
    # bfloat16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3); two layers of 32-128-term products and a
    # 61-way head grow that to ~1e-2 of the largest logit; float32 rounding would be 1e-6, a wrong op O(1)
    assert err < 0.05, (tied, err)
    assert not np.array_equal(bf16, ref)  # it did compute in bfloat16


# ---------------------------------------------------------------- against transformers

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def hf_model(seed, **extra):
  """A random tiny GPT2LMHeadModel, its weights far from init (std 0.2; layer norms near 1) so attention is sharp."""
  config = transformers.GPT2Config(vocab_size=61, n_positions=T, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                   embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **extra)
  torch.manual_seed(seed)
  model = transformers.GPT2LMHeadModel(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_((1.0 if "ln_" in name and name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
  return model


@pytest.mark.parametrize("seed, extra", CASES, ids=["tied0", "tied1", "tied2", "untied", "gelu", "inverse_layer_idx"])
def test_per_token_log_probabilities_equal_transformers(tmp_path, seed, extra):
  hf = hf_model(seed, **extra)
  hf.save_pretrained(tmp_path)
  module = hf_convert.from_pretrained(str(tmp_path))
  assert isinstance(module, GPT2LMHeadModel)
  tokens = np.random.default_rng(seed).integers(0, 61, (3, T))
  ours, theirs = our_lp(module, tokens, MASK_BxT), hf_lp(hf, tokens, MASK_BxT)
  scored = MASK_BxT[:, 1:].astype(bool)  # positions whose token is real
  np.testing.assert_allclose(ours[scored], theirs[scored], rtol=0, atol=ATOL)
  assert np.abs(theirs[scored]).max() > 1.0  # not a near-uniform model: the comparison has something to see


@pytest.mark.parametrize("tied", [True, False])
def test_a_saved_model_loads_in_transformers_with_the_same_log_probabilities(tmp_path, tied):
  hf = hf_model(3, tie_word_embeddings=tied)
  hf.save_pretrained(tmp_path / "src")
  module = hf_convert.from_pretrained(str(tmp_path / "src"))
  hf_convert.save_pretrained(module, str(tmp_path / "back"))
  back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "back").eval()
  tokens = np.random.default_rng(3).integers(0, 61, (3, T))
  np.testing.assert_array_equal(hf_lp(back, tokens, MASK_BxT), hf_lp(hf, tokens, MASK_BxT))  # the same tensors
  names = set(hf_convert.params_to_hf(module.config, nnx.state(module, nnx.Param)))
  assert ("lm_head.weight" in names) != tied


def test_a_training_steps_loss_and_gradient_norms_equal_pytorch(tmp_path):
  """The trainer's loss (models.token_loss on the logits after BOS) and its gradient, parameter by parameter,
  against torch's cross-entropy and autograd on the same weights and tokens."""
  hf = hf_model(4, tie_word_embeddings=False).train()
  hf.save_pretrained(tmp_path)
  module = hf_convert.from_pretrained(str(tmp_path))
  graphdef, params = nnx.split(module, nnx.Param)
  tokens = np.random.default_rng(4).integers(1, 61, (4, T))
  inputs = np.concatenate([np.zeros((4, 1), np.int64), tokens[:, :-1]], axis=1)  # BOS (id 0) first

  def loss_fn(p):
    logits = nnx.merge(graphdef, p)(jnp.asarray(inputs))
    return token_loss.token_loss(logits, jnp.asarray(tokens)).mean()

  loss, grads = jax.value_and_grad(loss_fn)(params)
  logits = hf(torch.tensor(inputs)).logits
  torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 61), torch.tensor(tokens).reshape(-1))
  torch_loss.backward()
  # a mean of 48 float32 losses of size ~4: a few ulps (1e-6) apart
  assert float(loss) == pytest.approx(torch_loss.item(), rel=1e-5)
  ours = hf_convert.params_to_hf(module.config, grads)
  theirs = {name: p.grad.numpy() for name, p in hf.named_parameters()}
  assert set(ours) == set(theirs)
  for name, grad in ours.items():
    # gradients through two layers in float32, summed in other orders: 1e-4 relative on each tensor's norm
    assert np.linalg.norm(grad) == pytest.approx(np.linalg.norm(theirs[name]), rel=1e-4), name
    np.testing.assert_allclose(grad, theirs[name], rtol=0, atol=1e-4 * np.abs(theirs[name]).max() + 1e-7,
                               err_msg=name)
