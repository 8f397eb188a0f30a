"""One model of a shadow run folder as an NNX module, with the run's tokenizer (for prefix or pair features)."""

import os
import types

import jax
import ml_collections
from flax import nnx

import models
from lira.errors import InputError, MissingFileError
import run_folder
from training import checkpoints
from training import data as data_lib
from training import group_files
from training import model_setup
from training import trainer


def load_shadow_model(run_dir, model_id):
  """(module, tokenizer, bos_id) of shadow model `model_id` (LSTM, GPT-NeoX, GPT-2, ...) of a run folder: the
  architecture from RUN_DIR/config.json, the parameters from its group's checkpoint (the group's copies stacked:
  orbax, or the .npy folder of a jax.distributed run; training/checkpoints.py), the tokenizer from
  RUN_DIR/tokenizer.json. The run's models read BOS first."""
  cfg = ml_collections.ConfigDict(run_folder.load_config(run_dir, "not a shadow run folder"))
  M = cfg.shadow.num_models
  if not 0 <= model_id < M:
    raise InputError(f"model_id {model_id} outside the run's {M} models")
  tokenizer_path = os.path.join(run_dir, run_folder.names.TOKENIZER)
  if not os.path.exists(tokenizer_path):
    raise MissingFileError(f"{tokenizer_path} does not exist")
  tokenizer = data_lib.load_tokenizer(tokenizer_path)
  bos_id = data_lib.bos_id(tokenizer)
  group, model_ids = next((g, ids) for g, ids in group_files.groups_of(cfg) if model_id in ids)
  checkpoint = run_folder.group_paths(run_dir, group)[0]
  if not os.path.exists(checkpoint):
    raise MissingFileError(f"{checkpoint} does not exist: group {group} (model {model_id}) is not trained yet")
  if models.family(cfg.model.name).fine_tunes and cfg.model.base == "pretrain":
    base = os.path.join(run_dir, run_folder.names.BASE_MODEL_DIR, run_folder.names.MODEL_CONFIG)
    if not os.path.exists(base):  # build_model would pretrain one; a loader never trains
      raise MissingFileError(f"{base} does not exist: the run's base model was never saved")
  data = types.SimpleNamespace(vocab_size=data_lib.vocab_size(tokenizer), bos_id=bos_id)
  model = model_setup.build_model(cfg, data, run_dir, progress=False)
  state = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), len(model_ids))))
  restored = checkpoints.restore(checkpoint, nnx.to_pure_dict(trainer.abstract_stack(model, len(model_ids))))
  nnx.replace_by_pure_dict(state, restored)
  one = jax.tree.map(lambda x: x[model_ids.index(model_id)], state)
  return model.module(one), tokenizer, bos_id  # a LoRA copy: its adapters on the run's base

