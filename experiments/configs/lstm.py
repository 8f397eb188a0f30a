"""LSTM shadow models (Rossi et al. 2025, Sec. 4.1, Table I).

--config=experiments/configs/lstm.py          CPU default: minutes on 2 cores (real corpus, local BPE)
--config=experiments/configs/lstm.py:paper    the paper's setting (PersonaChat, Pythia tokenizer, GPU/TPU)
--config=experiments/configs/lstm.py:tiny     seconds, for tests
--config=experiments/configs/lstm.py:reproduce_worst    REPRODUCTION.md's LSTM runs: the largest setting a 2-core
--config=experiments/configs/lstm.py:reproduce_average  CPU trains in about 90 minutes (64 models, T = 128, 10 epochs)
--config=experiments/configs/lstm.py:memorise_worst     reproduce_worst's tokens per model on fewer canaries seen more
                                                        often (2,000 canaries, 16 epochs): stronger memorisation
--config=experiments/configs/lstm.py:vocab_worst        memorise_worst with a 2,048-token BPE
Any field can be overridden, e.g. --config.canaries.kind=average --config.shadow.num_models=32.
train.compute_dtype: "float32" (every variant) or "bfloat16", mixed precision with float32 weights, optimiser state
and losses (models/precision.py); the per-token losses are extracted in float32 either way. bfloat16 is the GPU's
recommendation (docs/shadow_models.md: 1.3x float32 on an H200), float32 the CPU's.
"""

import ml_collections
from ml_collections import config_dict

from training import dp
from training import population

from lira.errors import InputError


def get_config(arg="cpu"):
  if arg in ("pythia", "pythia_tiny"):  # the GPT-NeoX shadow configs live in pythia.py; accept their names here too
    from experiments.configs import pythia
    return pythia.get_config(arg)
  c = ml_collections.ConfigDict()
  # CPU default: the paper's architecture, smaller (vocab 512, hidden 128, T=32) and 32 models so the whole
  # command takes minutes on 2 cores; smaller batches with a higher learning rate give the few thousand
  # optimiser steps that the paper's full PersonaChat epochs give it.
  c.data = dict(corpus="chitchat", hub_id="bavard/personachat_truecased", heldout_fraction=0.1, seq_len=32,
                max_train_sequences=1000)
  c.tokenizer = dict(name="bpe", vocab_size=512)  # "bpe" = byte-level BPE trained on the train split
  c.canaries = dict(kind="worst", num_canaries=1000)
  c.shadow = dict(num_models=32, group_size=1, seed=0)  # one model per group: fastest on 2 CPU cores (BENCHMARKS.md)
  c.shadow.model_seed = config_dict.placeholder(int)  # membership and training (default: shadow.seed)
  c.model = dict(name="lstm", embed_dim=64, hidden_dim=128, num_layers=2)
  c.train = dict(epochs=6, batch_size=16, learning_rate=3e-3, weight_decay=0.0, compute_dtype="float32")
  c.train.dp = dp.config_defaults()  # DP-SGD, off: set train.dp.epsilon or train.dp.noise_multiplier
  c.population = population.config_defaults()  # RMIA's population: 1,000 sequences no model trains on (0: none)
  if arg == "paper":
    c.data.update(corpus="personachat", seq_len=128, max_train_sequences=0)
    c.tokenizer.update(name="EleutherAI/pythia-1b-deduped")
    c.canaries.update(num_canaries=10_000)
    c.shadow.update(num_models=64, group_size=16)
    c.model.update(embed_dim=192, hidden_dim=192)
    c.train.update(epochs=10, batch_size=64, learning_rate=1e-3, weight_decay=0.0)
  elif arg in ("reproduce_worst", "reproduce_average", "memorise_worst", "vocab_worst"):
    # The paper's 64 models, T = 128 and 10 epochs; the CPU default's model and optimiser (small batches, higher rate);
    # 1,500 training sequences and 5,000 canaries (2,500 IN per model): ~5M training tokens per model, about a minute
    # on 2 cores (2,500 canaries measured 42 s per model). A held-out split of 15% holds 5,000 distinct average-case
    # sequences of 128 tokens (10% held 4,913). One model per group, as the CPU default.
    c.data.update(seq_len=128, max_train_sequences=1500, heldout_fraction=0.15)
    c.canaries.update(kind=arg.split("_")[1], num_canaries=5000)
    c.shadow.update(num_models=64, group_size=1)
    c.train.update(epochs=10)
    if arg in ("memorise_worst", "vocab_worst"):
      # The same (1,500 + 2,500) x 10 = (1,500 + 1,000) x 16 = 40,000 training sequences per model: each canary seen
      # 16 times instead of 10, canaries 40% of the training set instead of 62%. No population (RMIA is not studied).
      c.canaries.update(num_canaries=2000)
      c.train.update(epochs=16)
      c.population.update(size=0)
    if arg == "vocab_worst":
      c.tokenizer.update(vocab_size=2048)
  elif arg == "tiny":
    c.data.update(seq_len=12, max_train_sequences=64)
    c.tokenizer.update(vocab_size=300)
    c.canaries.update(num_canaries=16)
    c.shadow.update(num_models=6, group_size=3)
    c.model.update(embed_dim=16, hidden_dim=32)
    c.train.update(epochs=2, batch_size=16)
    c.population.update(size=16)
  elif arg != "cpu":
    raise InputError(f"unknown LSTM config {arg!r}: use cpu (default), paper, tiny, reproduce_worst, "
                     "reproduce_average, memorise_worst, vocab_worst (or pythia, pythia_tiny)")
  return c
