"""PixelCNN++ shadow models on images; per-pixel losses in raster order (Rossi et al. 2025, appendix .3, Table I).

--config=experiments/configs/pixelcnn.py:cpu     sklearn digits (8 x 8, 17 levels), worst-case canaries, 2 CPU cores
--config=experiments/configs/pixelcnn.py:paper   Table I: CIFAR-10, 64 models, 50 epochs, average-case canaries (GPU)
--config=experiments/configs/pixelcnn.py:tiny    seconds of training, for tests
--config=experiments/configs/pixelcnn.py:reproduce_average  REPRODUCTION.md's image runs: 64 models on digits, the
--config=experiments/configs/pixelcnn.py:reproduce_worst    largest setting a 2-core CPU trains in about 90 minutes
model.image_shape and model.num_levels must match the data (checked before training); config.json carries them,
so later tools lay a canary's T = H * W losses out on the image grid.
train.compute_dtype: "float32" (every variant) or "bfloat16", mixed precision with float32 weights, optimiser state
and likelihood (models/precision.py); the per-pixel losses are extracted in float32 either way. Its speed on a GPU is
measured for the LSTM and GPT-NeoX (docs/shadow_models.md), not yet for PixelCNN++.

cpu, chosen by measurement on the 2-core development machine while other jobs kept its load average at ~5:
- one model per group (group_size=1): a step of the 32-filter network on a batch of 32 took 2.7 ms per image for one
  model alone against 4.1 ms per image for two vmapped models (vmapped convolutions become grouped ones, slow on CPU);
- 32 filters, 1 resnet block per stage, 5 mixture components, no dropout, lr 2e-3: two models trained 10 epochs on
  500 digits with 64 worst-case canaries gave 89% of the canaries a lower mean loss on the model that had them IN
  (IN 3.01 against OUT 3.14 nats per pixel); no dropout, so that random images are learned in few epochs;
- 500 of the ~1,440 training digits and 256 canaries: an epoch is short and each model's 128 IN canaries are a
  fifth of its data; 16 models (every leave-one-out fit gets 7 and 8 rows per class; 64 would take ~30 min), 10 epochs.
The whole command then took 7 min 2 s and 8 min 21 s in two runs (17-31 s per model); its table (identical in both):
univariate AUC 0.86-0.88 and TPR@1% FPR 14-21%, OAS 0.74-0.75 and 8%, independent 0.60-0.67 and 1-6%: the
worst-case canaries are clearly memorised.
"""

import ml_collections
from ml_collections import config_dict

from training import dp
from training import population

from lira.errors import InputError


def get_config(arg="cpu"):
  c = ml_collections.ConfigDict()
  c.data = dict(source="digits", data_dir="", heldout_fraction=0.2, max_train_images=500)
  c.canaries = dict(kind="worst", num_canaries=256)
  c.shadow = dict(num_models=16, group_size=1, seed=0)
  c.shadow.model_seed = config_dict.placeholder(int)  # membership and training (default: shadow.seed)
  c.model = dict(name="pixelcnn_pp", image_shape=(8, 8, 1), num_levels=17, nr_resnet=1, nr_filters=32,
                 nr_logistic_mix=5, dropout_p=0.0)
  c.train = dict(epochs=10, batch_size=32, learning_rate=2e-3, weight_decay=0.0, eval_batch_size=256,
                 compute_dtype="float32")
  c.train.dp = dp.config_defaults()  # DP-SGD, off: set train.dp.epsilon or train.dp.noise_multiplier
  c.population = population.config_defaults()  # RMIA's population: 1,000 images no model trains on (0: none)
  if arg == "paper":
    c.data.update(source="cifar10", data_dir="~/tensorflow_datasets", max_train_images=0)
    c.canaries.update(kind="average", num_canaries=10_000)
    # One model per group: by XLA's memory analysis one model at batch 192 needs ~102 GB (BENCHMARKS.md, "PixelCNN++
    # training step"), more than an 80 GB accelerator holds; measure on the device before raising it.
    c.shadow.update(num_models=64, group_size=1)
    c.model.update(image_shape=(32, 32, 3), num_levels=256, nr_resnet=5, nr_filters=192, nr_logistic_mix=10,
                   dropout_p=0.5)
    c.train.update(epochs=50, batch_size=192, learning_rate=1e-3, weight_decay=0.0)
    c.population.update(size=0)  # the 10,000 canaries take the whole held-out (test) split: no population is left
  elif arg in ("reproduce_average", "reproduce_worst"):
    # All of digits: 40% held out (719 images, 700 of them the average-case canaries; worst-case: 700 random
    # images), 1,078 to train on, plus each model's 350 IN canaries. The cpu config's network; Table I's 50 epochs and
    # learning rate 1e-3 (batch 32, not 192: 45 steps an epoch). Measured: 20 epochs took 42 s per model while an LSTM
    # run shared the 2 cores (which slowed that run 1.45x), so 50 epochs take ~70 s alone, ~75 minutes for 64 models.
    c.data.update(heldout_fraction=0.4, max_train_images=0)
    c.canaries.update(kind=arg.split("_")[1], num_canaries=700)
    c.shadow.update(num_models=64, group_size=1)
    c.train.update(epochs=50, learning_rate=1e-3)
    if arg == "reproduce_average":  # 19 held-out images are left beside the 700 canaries: too few for a population
      c.population.update(size=0)
  elif arg == "tiny":
    c.data.update(max_train_images=48)
    c.canaries.update(num_canaries=16)
    c.shadow.update(num_models=8, group_size=4)  # 4: a group shards over 4 simulated devices in the tests
    c.model.update(nr_filters=8, nr_logistic_mix=2, dropout_p=0.5)
    c.train.update(epochs=8, batch_size=16, learning_rate=1e-2)
    c.population.update(size=16)
  elif arg != "cpu":
    raise InputError(f"unknown PixelCNN++ config {arg!r}: use cpu (default), paper, tiny, "
                     "reproduce_average or reproduce_worst")
  return c
