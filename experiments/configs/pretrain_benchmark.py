"""The offline pretraining-data MIA benchmark: python -m experiments.pretrain_benchmark.

--config=experiments/configs/pretrain_benchmark.py:cpu    default: the whole benchmark in about 11 minutes on 2 shared
                                                          CPU cores (5-7 idle; measurements below)
--config=experiments/configs/pretrain_benchmark.py:tiny   seconds, for tests

Why the cpu sizes: 3,984 chitchat conversations have >= 32 words; cut to 64 words (~110 tokens of this BPE) each fits
one 128-token sequence, so a member is scored on exactly what the model trained on. 500 non-members and 1,000 reference
documents are set aside; the remaining 2,484 documents (2,199 sequences of 128 tokens, ~280k tokens an epoch) are the
target corpus, and 500 of them are the evaluated members (500 + 500 texts: an AUC's standard error is about 0.02).
Model: GPT-NeoX hidden 192, 3 layers, vocabulary 1,024. Measured steps of 32 x 128 tokens on an idle 2-core machine:
176 ms (hidden 128, 2 layers), 302 ms (hidden 192, 3 layers), vocabulary 2,048 1.7x dearer; hidden 256 / 4 layers is
4x hidden 128. With hidden 128 the Loss AUC only rose 0.55 -> 0.75 over 8 epochs; hidden 192 gives 0.55 -> 0.80 and
Reference 0.65 -> 0.94. The whole benchmark (552 target steps, 112 reference steps at 4 epochs, 5 features folders of
1,000 texts, attacks) measured 10 min 50 s wall on this 2-core machine while it was shared with other jobs (1-minute
load average 2.7-7.5, median 4.1): target 370 s, reference 158 s, features 19-27 s a folder without ReCaLL, attacks
< 1 s each. With the blind baseline (five text-classifier fits per column) the attacks took 8-10 s a column, in a
whole run of 16.7 min under nice at a load average of about 5. Idle, the 664 steps alone take ~200 s, so a dedicated
2-core machine needs about 5-7 minutes.
ReCaLL gets one shot (a text of ~110 tokens before texts of up to 128 fills the 256-position context; more shots need
a longer context than the model was trained for), plus one member shot for Con-ReCall; both leave the evaluated set.
EM-MIA's pairs (N^2 = 10^6 conditional passes per checkpoint) would cost hours on a CPU, so features.pairs is off
here; turn it on with a smaller data.num_eval or on a GPU.
"""

import ml_collections

from lira.errors import InputError


def get_config(arg="cpu"):
  c = ml_collections.ConfigDict()
  c.seed = 0
  # num_eval: members and non-members each; num_reference: the reference model's documents; max_target: 0 = all rest.
  c.data = dict(min_words=32, max_words=64, num_eval=500, num_reference=1000, max_target=0, seq_len=128)
  c.tokenizer = dict(vocab_size=1024)
  c.model = dict(dtype="float32", arch=dict(hidden_size=192, num_hidden_layers=3, num_attention_heads=4,
                                            intermediate_size=768, rotary_pct=0.25, max_position_embeddings=256))
  c.pretrain = dict(checkpoint_epochs=(1, 2, 4, 8), batch_size=32, learning_rate=3e-3, weight_decay=0.01)
  c.reference = dict(epochs=4)
  c.features = dict(max_length=128, batch_size=16, prefix_shots=1, ensemble=0, pairs=False, neighbours=4)
  c.attacks = dict(names=None, k=0.2, gamma=None, folds=5, n_boot=200)  # folds: the blind baseline's
  c.shift_epoch = 1  # the checkpoint the distribution-shift split is scored on: where the real split is near chance
  if arg == "tiny":
    c.data.update(min_words=16, max_words=24, num_eval=24, num_reference=48, max_target=64, seq_len=32)
    c.tokenizer.update(vocab_size=300)
    c.model.arch.update(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128)
    c.pretrain.update(batch_size=8, learning_rate=1e-2)
    c.reference.update(epochs=2)
    c.features.update(max_length=48, prefix_shots=1, pairs=True, neighbours=2)
    c.attacks.update(n_boot=0)
  elif arg != "cpu":
    raise InputError(f"unknown pretrain_benchmark config {arg!r}: use cpu (default) or tiny")
  return c
