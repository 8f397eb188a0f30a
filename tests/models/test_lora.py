"""LoRA adapters (models/lora.py) against PEFT's LoRA on transformers' PyTorch models: per-token log-probabilities
and a training step's loss and adapter gradients of GPT-2, GPT-NeoX, Llama and Qwen2 with the same adapters; fresh adapters leave
the base's outputs bit-equal; the merged model is what transformers loads; the targets select the layers they
name. Folders are written by save_pretrained from random configs: nothing is downloaded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lira.errors import InputError
from models import hf_convert
from tests.models.lm_parity import hf_lp, our_lp
from models import lora
from models import token_loss
from training import lora_config

T = 10
MASK_BxT = np.ones((3, T), np.int64)
MASK_BxT[1, T - 4:] = 0
RANK, ALPHA = 4, 6.0


def test_targets_select_attention_mlp_or_named_layers_and_refuse_what_selects_nothing():
  from models import get_model
  neox = get_model("gpt_neox", vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=32)
  gpt2 = get_model("gpt2", vocab_size=40, n_embd=16, n_layer=2, n_head=2, n_positions=T)
  llama = get_model("llama", vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=T)
  paths = {name: list(lora.linear_layers(nnx.merge(fm.graphdef, fm.init(jax.random.key(0)))))
           for name, fm in (("neox", neox), ("gpt2", gpt2), ("llama", llama))}
  assert lora.targeted(paths["llama"], ("attention",)) == [f"layers.0.self_attn.{n}_proj" for n in "koqv"]
  assert lora.targeted(paths["llama"], ("mlp",)) == [f"layers.0.mlp.{n}_proj" for n in ("down", "gate", "up")]
  assert lora.targeted(paths["llama"], ("q_proj", "v_proj")) == ["layers.0.self_attn.q_proj",
                                                                 "layers.0.self_attn.v_proj"]
  assert lora.targeted(paths["neox"], ("attention",)) == [
      f"layers.{i}.attention.{n}" for i in range(2) for n in ("dense", "query_key_value")]
  assert lora.targeted(paths["gpt2"], ("attention",)) == [f"h.{i}.attn.{n}" for i in range(2)
                                                           for n in ("c_attn", "c_proj")]
  assert lora.targeted(paths["gpt2"], ("mlp",)) == [f"h.{i}.mlp.{n}" for i in range(2) for n in ("c_fc", "c_proj")]
  assert lora.targeted(paths["gpt2"], ("attn.c_proj",)) == ["h.0.attn.c_proj", "h.1.attn.c_proj"]
  assert len(lora.targeted(paths["gpt2"], ("c_proj",))) == 4  # attention's and the MLP's, as PEFT matches it
  assert "embed_out" not in lora.targeted(paths["neox"], ("attention", "mlp"))  # never the head
  with pytest.raises(InputError, match="'q_proj' selects no linear layer of this model; its layers: .*attn.c_attn"):
    lora.targeted(paths["gpt2"], ("q_proj",))


def test_config_block_is_checked_field_by_field():
  from ml_collections import ConfigDict
  block = lora_config.config_defaults()
  assert lora_config.settings(block) is None  # rank 0: off
  block.rank, block.targets = 8, "attention, mlp"
  assert lora_config.settings(block) == lora.LoRASettings(8, 16.0, ("attention", "mlp"))
  with pytest.raises(InputError, match=r"train.lora.rank must be >= 0"):
    lora_config.settings(ConfigDict(dict(rank=-1)))
  with pytest.raises(InputError, match=r"train.lora.alpha must be > 0"):
    lora_config.settings(ConfigDict(dict(rank=2, alpha=0.0)))
  with pytest.raises(InputError, match="train.lora has no field 'dropout'"):
    lora_config.settings(ConfigDict(dict(rank=2, dropout=0.1)))
  with pytest.raises(InputError, match="trains its models from scratch"):
    lora_config.settings(ConfigDict(dict(rank=2)), fine_tunes=False)


# ---------------------------------------------------------------- against PEFT on transformers' models

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

# family: (transformers model, PEFT target_modules selecting the layers "attention" selects here, Conv1D weights)
FAMILIES = {
    "gpt2": (lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=53, n_positions=T, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)), ["attn.c_attn", "attn.c_proj"], True),
    "gpt_neox": (lambda: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=53, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=T, hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=0, eos_token_id=0)),
        ["query_key_value", "attention.dense"], False),
    "llama": (lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=T, bos_token_id=0, eos_token_id=0)),
        ["q_proj", "k_proj", "v_proj", "o_proj"], False),
    "qwen2": (lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=T, bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)),
        ["q_proj", "k_proj", "v_proj", "o_proj"], False),
}
LAYERS = {"gpt2": 4, "gpt_neox": 4, "llama": 8, "qwen2": 8}  # adapted layers: 2 blocks x the attention's linears


def base_and_peft(family, seed, folder):
  """(our base module from the saved folder, the PEFT model with random non-zero adapters, our LoRA module with the
  same adapters)."""
  make, targets, conv1d = FAMILIES[family]
  torch.manual_seed(seed)
  hf = make().eval()
  with torch.no_grad():  # weights far from init (std 0.2; norms near 1) so attention is sharp
    for name, p in hf.named_parameters():
      p.copy_((1.0 if ("norm" in name or "ln_" in name) and name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
  hf.save_pretrained(folder)
  base = hf_convert.from_pretrained(str(folder))
  config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets, lora_dropout=0.0,
                           fan_in_fan_out=conv1d, init_lora_weights=True)
  tuned = peft.get_peft_model(hf, config)
  ours = lora.apply(nnx.merge(*nnx.split(base)), lora.LoRASettings(RANK, ALPHA, ("attention",)), nnx.Rngs(seed))
  rng = np.random.default_rng(seed)
  layers = {p: m for p, m in nnx.iter_modules(ours) if isinstance(m, lora.LoRALinear)}
  peft_layers = {n: m for n, m in tuned.named_modules() if hasattr(m, "lora_A") and "default" in m.lora_A}
  assert len(layers) == len(peft_layers) == LAYERS[family]
  for path, layer in layers.items():
    name = next(n for n in peft_layers if n.endswith(".".join(map(str, path))))
    a_IxR = rng.normal(0, 0.3, layer.lora_a.get_value().shape).astype(np.float32)
    b_RxO = rng.normal(0, 0.3, layer.lora_b.get_value().shape).astype(np.float32)
    layer.lora_a.set_value(jnp.asarray(a_IxR))
    layer.lora_b.set_value(jnp.asarray(b_RxO))
    with torch.no_grad():  # PEFT's lora_A is a Linear(I, R): weight [R, I]; lora_B weight [O, R]
      peft_layers[name].lora_A["default"].weight.copy_(torch.tensor(a_IxR.T))
      peft_layers[name].lora_B["default"].weight.copy_(torch.tensor(b_RxO.T))
  return base, tuned, ours


@pytest.mark.parametrize("family", list(FAMILIES))
def test_adapters_equal_peft_and_fresh_ones_leave_the_base_bit_equal(tmp_path, family):
  base, tuned, ours = base_and_peft(family, 1, tmp_path / "src")
  tokens = np.random.default_rng(1).integers(0, 53, (3, T))
  scored = MASK_BxT[:, 1:].astype(bool)
  theirs = hf_lp(tuned, tokens, MASK_BxT)
  # float32 on both sides, sums in other orders, as the families' own parity tests: 2e-5 on log-probabilities
  np.testing.assert_allclose(our_lp(ours, tokens, MASK_BxT)[scored], theirs[scored], rtol=0, atol=2e-5)
  assert np.abs(our_lp(base, tokens, MASK_BxT) - theirs)[scored].max() > 1e-2  # the adapters change the model
  fresh = lora.apply(nnx.merge(*nnx.split(base)), lora.LoRASettings(RANK, ALPHA, ("attention", "mlp")),
                     nnx.Rngs(0))  # B = 0: x @ W + (x @ A) @ 0 is x @ W to the bit
  np.testing.assert_array_equal(np.asarray(fresh(jnp.asarray(tokens))), np.asarray(base(jnp.asarray(tokens))))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_training_steps_loss_and_adapter_gradients_equal_peft(tmp_path, family):
  """Only the adapters are trained: their gradients against torch's autograd through PEFT's model (its base frozen)."""
  _, tuned, ours = base_and_peft(family, 2, tmp_path / "src")
  tuned.train()
  graphdef, adapters, frozen = lora.split(ours)
  tokens = np.random.default_rng(2).integers(1, 53, (4, T))
  inputs = np.concatenate([np.zeros((4, 1), np.int64), tokens[:, :-1]], axis=1)  # BOS (id 0) first

  def loss_fn(a):
    return token_loss.token_loss(nnx.merge(graphdef, a, frozen)(jnp.asarray(inputs)), jnp.asarray(tokens)).mean()

  loss, grads = jax.value_and_grad(loss_fn)(adapters)
  logits = tuned(input_ids=torch.tensor(inputs)).logits
  torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 53), torch.tensor(tokens).reshape(-1))
  torch_loss.backward()
  assert float(loss) == pytest.approx(torch_loss.item(), rel=1e-5)  # a mean of 40 float32 losses
  theirs = {n: p.grad.numpy() for n, p in tuned.named_parameters() if p.requires_grad}
  assert len(theirs) == 2 * LAYERS[family] and all("lora_" in n for n in theirs)  # PEFT trains the adapters alone, as we do
  for path, grad in nnx.to_flat_state(grads):
    dotted = ".".join(map(str, path[:-1]))
    kind = "lora_A" if path[-1] == "lora_a" else "lora_B"
    name = next(n for n in theirs if f"{dotted}.{kind}." in n)
    ref = theirs[name].T  # torch stores [R, I] and [O, R]
    # gradients through two layers in float32, summed in other orders: 1e-4 of each tensor's largest entry
    np.testing.assert_allclose(np.asarray(grad.get_value()), ref, rtol=0, atol=1e-4 * np.abs(ref).max() + 1e-7,
                               err_msg=name)


def test_the_merged_model_loads_in_transformers_with_the_adapters_log_probabilities(tmp_path):
  _, tuned, ours = base_and_peft("gpt2", 3, tmp_path / "src")
  hf_convert.save_pretrained(ours, str(tmp_path / "merged"))  # written merged: W + alpha / r * A @ B
  back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "merged").eval()
  tokens = np.random.default_rng(3).integers(0, 53, (3, T))
  scored = MASK_BxT[:, 1:].astype(bool)
  np.testing.assert_allclose(hf_lp(back, tokens, MASK_BxT)[scored], hf_lp(tuned, tokens, MASK_BxT)[scored],
                             rtol=0, atol=2e-5)
  assert isinstance(ours.h[0].attn.c_attn, lora.LoRALinear)  # merging left the adapters' module as it was
