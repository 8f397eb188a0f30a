"""The model every shadow copy of a run starts as (training/pipeline.py trains the copies): a fresh LSTM or PixelCNN++,
a Hugging Face checkpoint to fine-tune (GPT-NeoX, GPT-2, Llama; with LoRA, adapters on that one base), or a small
GPT-NeoX pretrained here on the split the shadows never see (`model.base=pretrain`)."""

import os
import time

import jax
import numpy as np
from flax import nnx

import models
import run_folder
from training import lora_config as lora_lib
from training import run_config
from training import trainer
from lira.errors import InputError


def build_model(cfg, data, run_dir, progress=True):
  """The model every shadow copy starts as: a fresh one (LSTM, PixelCNN++), or a base checkpoint to fine-tune
  (GPT-NeoX: the family fine-tunes)."""
  kwargs = dict(cfg.model)
  name = kwargs.pop("name")
  fam = models.family(name)
  if fam.data_kind == "images":
    return fam.build(**kwargs)
  if not fam.fine_tunes:
    return fam.build(vocab_size=data.vocab_size, **kwargs)
  from models import hf_convert
  base = cfg.model.base
  if base == "pretrain":
    base = os.path.join(run_dir, run_folder.names.BASE_MODEL_DIR)
    if not os.path.exists(os.path.join(base, run_folder.names.MODEL_CONFIG)):  # written last: the folder is complete
      pretrain_base(cfg, data, base, os.path.join(run_dir, run_folder.names.TOKENIZER), progress)
  module = hf_convert.from_pretrained(base)  # float32: training rebuilds it in train.compute_dtype
  if module.config.vocab_size < data.vocab_size:
    raise InputError(f"model.base {cfg.model.base!r} embeds {module.config.vocab_size} token ids but the tokenizer "
                     f"{cfg.tokenizer.name!r} has {data.vocab_size}; use the base model's own tokenizer")
  graphdef, params = nnx.split(module)  # the base lives on the host: each group's copies are put shard by shard
  host = nnx.merge(graphdef, jax.device_get(params))
  lora = lora_lib.settings(cfg.train.get("lora"))
  if lora is not None:  # the copies are adapters on this one base
    from models import lora as lora_model
    return lora_model.functional(name, module.config, host, lora)
  return models.pretrained(name, module.config, host)


def pretrain_base(cfg, data, folder, tokenizer_file, progress=True):
  """Pretrain a small GPT-NeoX on the train-split sequences the shadows do not fine-tune on; save it as a
  Hugging Face folder (with the run's tokenizer.json).

  The offline stand-in for a Pythia checkpoint: it never sees the held-out split the average-case canaries come
  from, nor the fine-tuning sequences.
  """
  from models import hf_convert
  p = cfg.pretrain
  sequences_SxT = data.pretrain_SxT[:p.max_sequences] if p.max_sequences else data.pretrain_SxT
  if len(sequences_SxT) < p.batch_size:
    raise InputError(f"model.base='pretrain' needs at least pretrain.batch_size={p.batch_size} training sequences "
                     f"beyond data.max_train_sequences={cfg.data.max_train_sequences}; the split has "
                     f"{len(sequences_SxT)}. Lower data.max_train_sequences or use a checkpoint as model.base")
  model = base_architecture(cfg, data)
  tcfg = trainer.TrainConfig(p.epochs, p.batch_size, p.learning_rate, p.weight_decay, cfg.shadow.seed,
                             compute_dtype=run_config.compute_dtype(cfg))
  t0 = time.perf_counter()
  state, loss = trainer.train_group(model, sequences_SxT, [np.arange(len(sequences_SxT))], [0], tcfg,
                                    bos_id=data.bos_id, progress=progress)
  module = nnx.merge(model.graphdef, jax.tree.map(lambda x: x[0], state))
  hf_convert.save_pretrained(module, folder, tokenizer_file=tokenizer_file)
  if progress:
    print(f"base model: pretrained on {len(sequences_SxT)} sequences, last-epoch loss {float(loss[0]):.3f} "
          f"({time.perf_counter() - t0:.1f} s); saved as a Hugging Face folder in {folder}")


def base_architecture(cfg, data):
  """A fresh GPT-NeoX of the architecture `model.base=pretrain` pretrains (model.arch, the run's vocabulary)."""
  return models.family(cfg.model.name).build(vocab_size=data.vocab_size, bos_token_id=data.bos_id,
                                             eos_token_id=data.bos_id, **dict(cfg.model.arch))
