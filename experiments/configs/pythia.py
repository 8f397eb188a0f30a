"""Fine-tuned GPT-NeoX (Pythia) shadow models (Rossi et al. 2025, Sec. 4.1, Table I).

--config=experiments/configs/pythia.py:pythia        the paper: Pythia-1b (deduped) from the hub, PersonaChat, GPU/TPU
--config=experiments/configs/pythia.py:pythia_tiny   CPU default (minutes): a small GPT-NeoX that the run pretrains
                                                     on the corpus first, saved as a Hugging Face folder
--config=experiments/configs/pythia.py:tiny          seconds, for tests
--config=experiments/configs/pythia.py:reproduce_worst    REPRODUCTION.md's GPT-NeoX runs: the largest fine-tuning
--config=experiments/configs/pythia.py:reproduce_average  setting a 2-core CPU finishes in about 90 minutes (64 copies, T = 128)
model.base is a Hugging Face folder, a hub id, or "pretrain" (pretrain model.arch on the train-split sequences
that fine-tuning does not use, into RUN_DIR/base_model).
train.compute_dtype: "float32" (every variant) or "bfloat16", mixed precision with float32 weights, optimiser state
and losses (models/precision.py), for fine-tuning and for pretraining the base; the per-token losses are extracted in
float32 either way. bfloat16 on a GPU: 1.3x float32 (docs/shadow_models.md). model.dtype, the field it
replaces, is still read as its alias and must then equal it.
"""

import ml_collections
from ml_collections import config_dict

from training import dp
from training import lora_config
from training import population

from lira.errors import InputError


def get_config(arg="pythia_tiny"):
  c = ml_collections.ConfigDict()
  # CPU default: the corpus is split into a pretraining part and 1,000 fine-tuning sequences (+ IN canaries).
  c.data = dict(corpus="chitchat", hub_id="bavard/personachat_truecased", heldout_fraction=0.1, seq_len=32,
                max_train_sequences=1000)
  c.tokenizer = dict(name="bpe", vocab_size=512)
  c.canaries = dict(kind="worst", num_canaries=1000)
  c.shadow = dict(num_models=32, group_size=2, seed=0)
  c.shadow.model_seed = config_dict.placeholder(int)  # membership and training (default: shadow.seed)
  c.model = dict(name="gpt_neox", base="pretrain",
                 arch=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                           rotary_pct=0.25, max_position_embeddings=256))
  c.pretrain = dict(epochs=1, batch_size=32, learning_rate=3e-3, weight_decay=0.01, max_sequences=12_000)
  c.train = dict(epochs=3, batch_size=16, learning_rate=1e-3, weight_decay=1e-4, eval_batch_size=256,
                 compute_dtype="float32")
  c.train.dp = dp.config_defaults()  # DP-SGD, off: set train.dp.epsilon or train.dp.noise_multiplier
  c.train.lora = lora_config.config_defaults()  # LoRA copies sharing the base, off: set train.lora.rank
  c.population = population.config_defaults()  # RMIA's population: 1,000 sequences no model trains on (0: none)
  if arg == "pythia":  # Table I: 7 epochs, lr 1e-4, weight decay 1e-4, batch 16, T = 128, AdamW, 64 models
    c.data.update(corpus="personachat", seq_len=128, max_train_sequences=0)
    c.tokenizer.update(name="EleutherAI/pythia-1b-deduped")
    c.canaries.update(num_canaries=10_000)
    c.shadow.update(num_models=64, group_size=2)  # ~44 GB on one GPU in float32; see the README for FSDP
    c.model.update(base="EleutherAI/pythia-1b-deduped")
    c.train.update(epochs=7, batch_size=16, learning_rate=1e-4, weight_decay=1e-4, eval_batch_size=16)
  elif arg in ("reproduce_worst", "reproduce_average"):
    # The paper's 64 copies, T = 128 and 7 epochs; pythia_tiny's base model and fine-tuning optimiser (a base trained
    # from scratch on 12,000 sequences (1.5M tokens) of the corpus, not Pythia-1b). 750 fine-tuning sequences and
    # 2,500 canaries (1,250 IN per copy) for 7 epochs: 875 steps of 16 x 128 tokens per copy. Measured: one group of
    # two copies took 245 s while an LSTM run shared the 2 cores (which slowed that run 1.45x), so ~85 s per copy
    # alone: about 90 minutes for 64 copies plus ~100 s of pretraining. Groups of 2 as pythia_tiny (faster than
    # one copy per group at T = 32 on this CPU).
    c.data.update(seq_len=128, max_train_sequences=750, heldout_fraction=0.1)
    c.canaries.update(kind=arg.split("_")[1], num_canaries=2500)
    c.shadow.update(num_models=64, group_size=2)
    c.pretrain.update(max_sequences=12_000)
    c.train.update(epochs=7)
  elif arg == "tiny":
    c.data.update(seq_len=12, max_train_sequences=64)
    c.tokenizer.update(vocab_size=300)
    c.canaries.update(num_canaries=16)
    c.shadow.update(num_models=6, group_size=3)
    c.model.arch.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    c.pretrain.update(epochs=1, batch_size=16, max_sequences=128)
    c.train.update(epochs=2, batch_size=16, learning_rate=3e-3)
    c.population.update(size=16)
  elif arg != "pythia_tiny":
    raise InputError(f"unknown Pythia config {arg!r}: use pythia_tiny (default), pythia, tiny, "
                     "reproduce_worst or reproduce_average")
  return c
