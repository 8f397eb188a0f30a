"""Hugging Face GPT-NeoX (Pythia), GPT-2 and Llama-architecture (Llama, Qwen2) folders <-> NNX params through an
explicit name map per architecture, every shape asserted; config.json's model_type picks the architecture.

One-way: this module imports models.gpt_neox, models.gpt2 and models.llama, never the reverse (they hold the models
only).

Only safetensors are read (numpy API, no torch): pickled `pytorch_model.bin` files can run code when loaded.
"""

import dataclasses
import json
import os
import re
from typing import Callable

import jax.numpy as jnp
import numpy as np
from flax import nnx
from safetensors import numpy as safetensors_numpy

import run_folder
from models import hub
from models.gpt2 import GPT2Config, GPT2LMHeadModel
from models.gpt_neox import GPTNeoXConfig, GPTNeoXForCausalLM
from models.llama import HF_CLASSES as LLAMA_HF_CLASSES, LlamaConfig, LlamaForCausalLM
from lira.errors import InputError, MissingPackageError, MissingFileError

# HF tensor name, NNX param path, HF shape in config letters (D hidden, F MLP width, V vocab), transpose.
# A torch Linear weight is [out, in] and an NNX kernel [in, out], hence the transposes. {i} is the layer.
NAME_MAP = (
    ("gpt_neox.embed_in.weight", "embed_in.embedding", ("V", "D"), False),
    ("gpt_neox.layers.{i}.input_layernorm.weight", "layers.{i}.input_layernorm.norm.scale", ("D",), False),
    ("gpt_neox.layers.{i}.input_layernorm.bias", "layers.{i}.input_layernorm.norm.bias", ("D",), False),
    ("gpt_neox.layers.{i}.post_attention_layernorm.weight", "layers.{i}.post_attention_layernorm.norm.scale",
     ("D",), False),
    ("gpt_neox.layers.{i}.post_attention_layernorm.bias", "layers.{i}.post_attention_layernorm.norm.bias",
     ("D",), False),
    ("gpt_neox.layers.{i}.attention.query_key_value.weight", "layers.{i}.attention.query_key_value.kernel",
     ("3D", "D"), True),
    ("gpt_neox.layers.{i}.attention.query_key_value.bias", "layers.{i}.attention.query_key_value.bias",
     ("3D",), False),
    ("gpt_neox.layers.{i}.attention.dense.weight", "layers.{i}.attention.dense.kernel", ("D", "D"), True),
    ("gpt_neox.layers.{i}.attention.dense.bias", "layers.{i}.attention.dense.bias", ("D",), False),
    ("gpt_neox.layers.{i}.mlp.dense_h_to_4h.weight", "layers.{i}.mlp.dense_h_to_4h.kernel", ("F", "D"), True),
    ("gpt_neox.layers.{i}.mlp.dense_h_to_4h.bias", "layers.{i}.mlp.dense_h_to_4h.bias", ("F",), False),
    ("gpt_neox.layers.{i}.mlp.dense_4h_to_h.weight", "layers.{i}.mlp.dense_4h_to_h.kernel", ("D", "F"), True),
    ("gpt_neox.layers.{i}.mlp.dense_4h_to_h.bias", "layers.{i}.mlp.dense_4h_to_h.bias", ("D",), False),
    ("gpt_neox.final_layer_norm.weight", "final_layer_norm.norm.scale", ("D",), False),
    ("gpt_neox.final_layer_norm.bias", "final_layer_norm.norm.bias", ("D",), False),
    ("embed_out.weight", "embed_out.kernel", ("V", "D"), True),  # absent when tie_word_embeddings
)
# transformers v5 calls the head lm_head in memory; hub checkpoints (and its save_pretrained) say embed_out.
_ALIASES = {"lm_head.weight": "embed_out.weight"}
# Non-persistent buffers that older Pythia checkpoints stored: recomputed here, so skipped.
_BUFFERS = re.compile(r"gpt_neox\.(layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)"
                      r"|rotary_emb\.inv_freq)")

# GPT-2: Hugging Face's Conv1D weights are [in, out], the NNX kernels' layout, so only the untied head is transposed.
# P is n_positions. The original hub checkpoints name the body without the "transformer." prefix (_GPT2_ALIASES).
GPT2_NAME_MAP = (
    ("transformer.wte.weight", "wte.embedding", ("V", "D"), False),
    ("transformer.wpe.weight", "wpe.embedding", ("P", "D"), False),
    ("transformer.h.{i}.ln_1.weight", "h.{i}.ln_1.norm.scale", ("D",), False),
    ("transformer.h.{i}.ln_1.bias", "h.{i}.ln_1.norm.bias", ("D",), False),
    ("transformer.h.{i}.attn.c_attn.weight", "h.{i}.attn.c_attn.kernel", ("D", "3D"), False),
    ("transformer.h.{i}.attn.c_attn.bias", "h.{i}.attn.c_attn.bias", ("3D",), False),
    ("transformer.h.{i}.attn.c_proj.weight", "h.{i}.attn.c_proj.kernel", ("D", "D"), False),
    ("transformer.h.{i}.attn.c_proj.bias", "h.{i}.attn.c_proj.bias", ("D",), False),
    ("transformer.h.{i}.ln_2.weight", "h.{i}.ln_2.norm.scale", ("D",), False),
    ("transformer.h.{i}.ln_2.bias", "h.{i}.ln_2.norm.bias", ("D",), False),
    ("transformer.h.{i}.mlp.c_fc.weight", "h.{i}.mlp.c_fc.kernel", ("D", "F"), False),
    ("transformer.h.{i}.mlp.c_fc.bias", "h.{i}.mlp.c_fc.bias", ("F",), False),
    ("transformer.h.{i}.mlp.c_proj.weight", "h.{i}.mlp.c_proj.kernel", ("F", "D"), False),
    ("transformer.h.{i}.mlp.c_proj.bias", "h.{i}.mlp.c_proj.bias", ("D",), False),
    ("transformer.ln_f.weight", "ln_f.norm.scale", ("D",), False),
    ("transformer.ln_f.bias", "ln_f.norm.bias", ("D",), False),
    ("lm_head.weight", "lm_head.kernel", ("V", "D"), True),  # absent when tie_word_embeddings
)
_GPT2_BUFFERS = re.compile(r"(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)")


# Llama and Qwen2 (one module, models/llama.py): Q = heads * head_dim, K = key-value heads * head_dim. Biases are in
# the model only where the config puts them (name_table keeps the rows whose NNX path exists).
LLAMA_NAME_MAP = (
    ("model.embed_tokens.weight", "embed_tokens.embedding", ("V", "D"), False),
    ("model.layers.{i}.input_layernorm.weight", "layers.{i}.input_layernorm.weight", ("D",), False),
    ("model.layers.{i}.self_attn.q_proj.weight", "layers.{i}.self_attn.q_proj.kernel", ("Q", "D"), True),
    ("model.layers.{i}.self_attn.q_proj.bias", "layers.{i}.self_attn.q_proj.bias", ("Q",), False),
    ("model.layers.{i}.self_attn.k_proj.weight", "layers.{i}.self_attn.k_proj.kernel", ("K", "D"), True),
    ("model.layers.{i}.self_attn.k_proj.bias", "layers.{i}.self_attn.k_proj.bias", ("K",), False),
    ("model.layers.{i}.self_attn.v_proj.weight", "layers.{i}.self_attn.v_proj.kernel", ("K", "D"), True),
    ("model.layers.{i}.self_attn.v_proj.bias", "layers.{i}.self_attn.v_proj.bias", ("K",), False),
    ("model.layers.{i}.self_attn.o_proj.weight", "layers.{i}.self_attn.o_proj.kernel", ("D", "Q"), True),
    ("model.layers.{i}.self_attn.o_proj.bias", "layers.{i}.self_attn.o_proj.bias", ("D",), False),
    ("model.layers.{i}.post_attention_layernorm.weight", "layers.{i}.post_attention_layernorm.weight", ("D",),
     False),
    ("model.layers.{i}.mlp.gate_proj.weight", "layers.{i}.mlp.gate_proj.kernel", ("F", "D"), True),
    ("model.layers.{i}.mlp.gate_proj.bias", "layers.{i}.mlp.gate_proj.bias", ("F",), False),
    ("model.layers.{i}.mlp.up_proj.weight", "layers.{i}.mlp.up_proj.kernel", ("F", "D"), True),
    ("model.layers.{i}.mlp.up_proj.bias", "layers.{i}.mlp.up_proj.bias", ("F",), False),
    ("model.layers.{i}.mlp.down_proj.weight", "layers.{i}.mlp.down_proj.kernel", ("D", "F"), True),
    ("model.layers.{i}.mlp.down_proj.bias", "layers.{i}.mlp.down_proj.bias", ("D",), False),
    ("model.norm.weight", "norm.weight", ("D",), False),
    ("lm_head.weight", "lm_head.kernel", ("V", "D"), True),  # absent when tie_word_embeddings
)
# RoPE frequencies that older checkpoints stored: recomputed here, so skipped.
_LLAMA_BUFFERS = re.compile(r"model\.(layers\.\d+\.self_attn\.)?rotary_emb\.(inv_freq|original_inv_freq)")


def _llama_dims(c):
  return {"D": c.hidden_size, "Q": c.num_attention_heads * c.head_dim, "K": c.num_key_value_heads * c.head_dim,
          "F": c.intermediate_size, "V": c.vocab_size}


def _gpt2_alias(name):
  return name if name.startswith(("transformer.", "lm_head.")) else "transformer." + name


@dataclasses.dataclass(frozen=True)
class Architecture:
  """What converting one Hugging Face architecture takes: its config and module classes, its name map, the sizes of
  the map's letters under a config, the head's name (dropped when tied), alias and buffer rules."""

  model_type: str
  hf_class: str  # the transformers class that loads the folder
  config_cls: type
  module_cls: type
  name_map: tuple
  dims: Callable
  head: str
  alias: Callable
  buffers: re.Pattern


ARCHITECTURES = {a.model_type: a for a in (
    Architecture("gpt_neox", "GPTNeoXForCausalLM", GPTNeoXConfig, GPTNeoXForCausalLM, NAME_MAP,
                 lambda c: {"D": c.hidden_size, "3D": 3 * c.hidden_size, "F": c.intermediate_size,
                            "V": c.vocab_size},
                 "embed_out.weight", lambda n: _ALIASES.get(n, n), _BUFFERS),
    Architecture("gpt2", "GPT2LMHeadModel", GPT2Config, GPT2LMHeadModel, GPT2_NAME_MAP,
                 lambda c: {"D": c.n_embd, "3D": 3 * c.n_embd, "F": c.intermediate_size, "V": c.vocab_size,
                            "P": c.n_positions},
                 "lm_head.weight", _gpt2_alias, _GPT2_BUFFERS),
    *(Architecture(model_type, hf_class, LlamaConfig, LlamaForCausalLM, LLAMA_NAME_MAP, _llama_dims, "lm_head.weight",
                   lambda n: n, _LLAMA_BUFFERS)
      for model_type, hf_class in LLAMA_HF_CLASSES.items()),
)}


def architecture(config):
  """The Architecture of a config object (GPTNeoXConfig, GPT2Config, LlamaConfig); a config class that serves
  several model types (LlamaConfig: llama, qwen2) says which by its `model_type`."""
  for arch in ARCHITECTURES.values():
    if isinstance(config, arch.config_cls) and getattr(config, "model_type", arch.model_type) == arch.model_type:
      return arch
  raise InputError(f"no Hugging Face conversion for {type(config).__name__}")


def _pickle_refusal(hf_class="GPTNeoXForCausalLM"):
  return ("pickled PyTorch checkpoints are refused (unpickling can run arbitrary code); convert it once where you "
          f"trust it: `transformers.{hf_class}.from_pretrained(src).save_pretrained(dst, safe_serialization=True)`, "
          "then load dst")


_PICKLE_REFUSAL = _pickle_refusal()


def _abstract_params(config):
  cls = architecture(config).module_cls
  return nnx.split(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0))))[1]


def _path_str(path):
  return ".".join(str(p) for p in path)


def name_table(config):
  """{HF name: (NNX path, HF shape, transpose)} for this config; fails unless it covers every NNX param exactly."""
  arch = architecture(config)
  dims = arch.dims(config)
  model_paths = {_path_str(p) for p, _ in nnx.to_flat_state(_abstract_params(config))}
  table = {}
  for hf, nnx_path, shape, transpose in arch.name_map:
    layers = range(config.num_hidden_layers) if "{i}" in hf else [None]
    for i in layers:
      path = nnx_path.format(i=i)
      if path in model_paths:  # biases without attention_bias, the head when tied: not in the model
        table[hf.format(i=i)] = (path, tuple(dims[d] for d in shape), transpose)
  if uncovered := model_paths - {path for path, _, _ in table.values()}:
    raise AssertionError(f"NAME_MAP lacks NNX params {sorted(uncovered)}")
  return table


def params_from_hf(config, tensors):
  """NNX params (float32 State, as FunctionalModel.init makes) from {HF name: numpy array}."""
  arch = architecture(config)
  table = name_table(config)
  named = {}
  for original in tensors:
    name = arch.alias(original)
    if name in named:
      raise InputError(f"{name} given twice (as itself and as its alias {original})")
    named[name] = tensors[original]
  tied_head = {arch.head} if config.tie_word_embeddings else set()  # a duplicate of the token embedding
  unknown = sorted(n for n in named if n not in table and n not in tied_head and not arch.buffers.fullmatch(n))
  missing = sorted(n for n in table if n not in named)
  if unknown or missing:
    raise InputError(f"checkpoint does not match the {arch.model_type} config: unknown tensors {unknown}, missing "
                     f"{missing}")
  by_path = {}
  for name, (path, shape, transpose) in table.items():
    if tuple(named[name].shape) != shape:
      raise InputError(f"{name}: shape {tuple(named[name].shape)}, config expects {shape}")
    array = np.asarray(named[name], np.float32)
    by_path[path] = array.T if transpose else array
  flat = [(p, v.replace(jnp.asarray(by_path[_path_str(p)]))) for p, v in nnx.to_flat_state(_abstract_params(config))]
  return nnx.from_flat_state(flat)


def params_to_hf(config, params):
  """{HF name: float32 numpy array} from NNX params."""
  by_path = {_path_str(p): v.get_value() for p, v in nnx.to_flat_state(params)}
  tensors = {}
  for name, (path, shape, transpose) in name_table(config).items():
    array = np.asarray(by_path[path], np.float32)
    array = np.ascontiguousarray(array.T if transpose else array)
    if array.shape != shape:
      raise InputError(f"{path}: gives {name} of shape {array.shape}, config expects {shape}")
    tensors[name] = array
  return tensors


def _read_safetensors(folder, hf_class="GPTNeoXForCausalLM"):
  """{name: numpy array} from model.safetensors or the shards a model.safetensors.index.json lists."""
  index = os.path.join(folder, run_folder.names.MODEL_WEIGHTS_INDEX)
  if os.path.exists(index):
    with open(index) as f:
      files = sorted(set(json.load(f)["weight_map"].values()))
  elif os.path.exists(os.path.join(folder, run_folder.names.MODEL_WEIGHTS)):
    files = [run_folder.names.MODEL_WEIGHTS]
  elif any(n.endswith(".bin") for n in os.listdir(folder)):
    raise InputError(f"{folder} holds only pickled weights (.bin); {_pickle_refusal(hf_class)}")
  else:
    raise MissingFileError(f"{folder} has no model.safetensors or model.safetensors.index.json")
  tensors = {}
  for file in files:
    shard = safetensors_numpy.load_file(os.path.join(folder, file))
    if twice := sorted(set(shard) & set(tensors)):
      raise InputError(f"tensors {twice} appear in more than one shard")
    tensors.update(shard)
  return tensors


def check_source(path):
  """Refuse, before anything is loaded, a model that is neither a Hugging Face folder nor a hub id: a missing path,
  a file, a folder without config.json, or a shadow run folder (whose models are picked by id)."""
  path = str(path)
  if os.path.isdir(path):
    config_file = os.path.join(path, run_folder.names.MODEL_CONFIG)
    if not os.path.isfile(config_file):
      raise MissingFileError(f"{path} is not a Hugging Face model folder: it has no config.json")
    config = run_folder.load_json(config_file)
    if isinstance(config, dict) and "shadow" in config:
      raise InputError(f"{path} is a shadow run folder of experiments.train_shadows, not a Hugging Face model "
                       "folder: pick one of its models with --model_id=M (extract_features), or use its "
                       "base_model/ folder")
    if isinstance(config, dict) and config.get("source") == "synthetic":
      raise InputError(f"{path} is a synthetic run folder (experiments.make_synthetic), which holds losses, not a "
                       "model")
    return
  if os.path.exists(path):
    raise InputError(f"{path} is a file; a model is a Hugging Face folder (config.json, model.safetensors) or a "
                     "hub id")
  if not hub.is_hub_id(path):
    raise MissingFileError(f"model folder {path} does not exist (and is not a hub id like EleutherAI/pythia-70m)")


def config_from_hf_dict(d, dtype="float32"):
  """The config object of a parsed config.json, by its model_type (gpt_neox when it names none)."""
  model_type = d.get("model_type", "gpt_neox")
  if model_type not in ARCHITECTURES:
    raise InputError(f"model_type {model_type!r} has no conversion here; available: {', '.join(ARCHITECTURES)}")
  return ARCHITECTURES[model_type].config_cls.from_hf_dict(d, dtype=dtype)


def load_hf_folder(path, revision=None, dtype="float32"):
  """(config, params) from a Hugging Face folder, or a hub id (downloads config and safetensors only): a
  GPTNeoXConfig, GPT2Config or LlamaConfig (model_type llama or qwen2), by config.json's model_type."""
  path = str(path)
  check_source(path)
  if not os.path.exists(path):
    try:
      from huggingface_hub import snapshot_download  # only for hub ids
    except ImportError as e:
      raise MissingPackageError(f"{path} is not a local folder; downloading it as a hub id needs huggingface_hub: "
                        'pip install -e ".[hf]"') from e
    hub.prepare()  # no network: offline mode at once, not 24 s of retries
    try:
      path = snapshot_download(repo_id=path, revision=revision, allow_patterns=["*.json", "*.safetensors"])
    except OSError as e:  # offline, or no such repo: huggingface_hub's errors are OSErrors
      reason = hub.unreachable_reason() or f"the hub could not provide it: {e}"
      raise MissingFileError(f"model {path!r} is not a local folder, and {reason}; download it where there is a "
                             "network and pass its folder") from e
    if not any(n.endswith(".safetensors") for n in os.listdir(path)):
      raise InputError(f"hub repo at revision {revision} has no safetensors weights; {_PICKLE_REFUSAL}")
  with open(os.path.join(path, run_folder.names.MODEL_CONFIG)) as f:
    config = config_from_hf_dict(json.load(f), dtype=dtype)
  return config, params_from_hf(config, _read_safetensors(path, architecture(config).hf_class))


def save_hf_folder(config, params, path, tokenizer_file=None):
  """Write config.json and model.safetensors that transformers' `GPTNeoXForCausalLM` / `GPT2LMHeadModel` /
  `LlamaForCausalLM` / `Qwen2ForCausalLM` (the config's model_type) `.from_pretrained(path)` loads.

  Like transformers' save_pretrained, `path` may exist: each file is replaced atomically (temporary name, then
  rename), and a stale sharded index with its shards is removed so that it cannot shadow the new weights.
  `tokenizer_file` (a tokenizer.json) is copied beside them.
  """
  path = os.path.abspath(path)
  tensors = params_to_hf(config, params)
  run_folder.save_bytes(os.path.join(path, run_folder.names.MODEL_WEIGHTS),
                        safetensors_numpy.save(tensors, metadata={"format": "pt"}))
  index = os.path.join(path, run_folder.names.MODEL_WEIGHTS_INDEX)
  if os.path.exists(index):
    with open(index) as f:
      shards = set(json.load(f)["weight_map"].values()) - {run_folder.names.MODEL_WEIGHTS}
    os.remove(index)
    for shard in shards:
      if os.path.exists(os.path.join(path, shard)):
        os.remove(os.path.join(path, shard))
  if tokenizer_file is not None:
    run_folder.copy_file(tokenizer_file, os.path.join(path, run_folder.names.TOKENIZER))
  # config.json last: the folder is complete now
  run_folder.save_json(os.path.join(path, run_folder.names.MODEL_CONFIG), config.to_hf_dict())


def from_pretrained(path_or_hub_id, dtype=jnp.float32, revision=None):
  """The model (GPTNeoXForCausalLM, GPT2LMHeadModel, or LlamaForCausalLM for model_type llama and qwen2) with the
  weights of a Hugging Face folder (safetensors, sharded or not) or a hub id.

  `dtype` is the compute dtype (float32 or bfloat16); parameters are kept in float32.
  """
  config, params = load_hf_folder(path_or_hub_id, revision=revision, dtype=jnp.dtype(dtype).name)
  cls = architecture(config).module_cls
  graphdef = nnx.graphdef(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0))))
  return nnx.merge(graphdef, params)


def save_pretrained(model, path, tokenizer_file=None):
  """Write `model` as a Hugging Face folder (config.json, model.safetensors) that transformers loads.

  `path` may exist (as with transformers' save_pretrained); `tokenizer_file`, a tokenizer.json, is copied beside.
  A model with LoRA adapters (models/lora.py) is written merged: each adapted kernel is W + scale * A @ B.
  """
  from models import lora
  save_hf_folder(model.config, nnx.state(lora.merged(model), nnx.Param), path, tokenizer_file=tokenizer_file)
