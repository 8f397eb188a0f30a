"""Fine-tuned Llama-architecture shadow models (Llama, SmolLM, Qwen2): copies of one base checkpoint fine-tuned on the
canaries, as for GPT-NeoX and GPT-2.

--config=experiments/configs/llama.py:llama_tiny   CPU default (minutes): a small Llama (hidden 128, 2 layers, 4
                                                   query heads over 2 key-value heads) that the run pretrains on the
                                                   corpus first, saved as a Hugging Face folder (transformers loads it)
--config=experiments/configs/llama.py:tiny         seconds, for tests
--config=experiments/configs/llama.py:smollm2      SmolLM2-1.7B from the hub (`HuggingFaceTB/SmolLM2-1.7B`, its
                                                   tokenizer, whose "<|endoftext|>" is the BOS), PersonaChat, T = 128,
                                                   64 copies: GPU/TPU
model.base is a Hugging Face Llama or Qwen2 folder, a hub id, or "pretrain" (pretrain model.arch, LlamaConfig fields,
on the train-split sequences that fine-tuning does not use, into RUN_DIR/base_model). train.compute_dtype as
pythia.py's.
"""

import ml_collections
from ml_collections import config_dict

from training import dp
from training import lora_config
from training import population

from lira.errors import InputError


def get_config(arg="llama_tiny"):
  c = ml_collections.ConfigDict()
  c.data = dict(corpus="chitchat", hub_id="bavard/personachat_truecased", heldout_fraction=0.1, seq_len=32,
                max_train_sequences=1000)
  c.tokenizer = dict(name="bpe", vocab_size=512)
  c.canaries = dict(kind="worst", num_canaries=1000)
  c.shadow = dict(num_models=32, group_size=2, seed=0)
  c.shadow.model_seed = config_dict.placeholder(int)  # membership and training (default: shadow.seed)
  c.model = dict(name="llama", base="pretrain",
                 arch=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=344, max_position_embeddings=256, tie_word_embeddings=True))
  c.pretrain = dict(epochs=1, batch_size=32, learning_rate=3e-3, weight_decay=0.01, max_sequences=12_000)
  c.train = dict(epochs=3, batch_size=16, learning_rate=1e-3, weight_decay=1e-4, eval_batch_size=256,
                 compute_dtype="float32")
  c.train.dp = dp.config_defaults()  # DP-SGD, off: set train.dp.epsilon or train.dp.noise_multiplier
  c.train.lora = lora_config.config_defaults()  # LoRA copies sharing the base, off: set train.lora.rank
  c.population = population.config_defaults()  # RMIA's population: 1,000 sequences no model trains on (0: none)
  if arg == "smollm2":  # SmolLM2-1.7B (Llama architecture, tied head) from the hub, pythia.py:pythia's shape
    c.data.update(corpus="personachat", seq_len=128, max_train_sequences=0)
    c.tokenizer.update(name="HuggingFaceTB/SmolLM2-1.7B")
    c.canaries.update(num_canaries=10_000)
    c.shadow.update(num_models=64, group_size=2)  # ~27 GB of weights, gradients and AdamW moments per copy
    c.model.update(base="HuggingFaceTB/SmolLM2-1.7B")
    c.train.update(epochs=7, batch_size=16, learning_rate=1e-4, weight_decay=1e-4, eval_batch_size=16)
  elif arg == "tiny":
    c.data.update(seq_len=12, max_train_sequences=64)
    c.tokenizer.update(vocab_size=300)
    c.canaries.update(num_canaries=16)
    c.shadow.update(num_models=6, group_size=3)
    c.model.arch.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    c.pretrain.update(epochs=1, batch_size=16, max_sequences=128)
    c.train.update(epochs=20, batch_size=16, learning_rate=5e-3)  # as gpt2.py:tiny
    c.population.update(size=16)
  elif arg != "llama_tiny":
    raise InputError(f"unknown Llama config {arg!r}: use llama_tiny (default), smollm2 or tiny")
  return c
