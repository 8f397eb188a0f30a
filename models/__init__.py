"""Flax NNX models behind one small functional interface that the shadow-model trainer uses."""

import dataclasses
from typing import Any, Callable

from flax import nnx

from lira.errors import InputError


@dataclasses.dataclass(frozen=True)
class FunctionalModel:
  """A model as pure functions: `init(key) -> params` and `apply(params, tokens_BxT, mask_BxT) -> logits_BxTxV`.

  The trainer stacks params of many copies on a leading model axis and vmaps these functions, so any
  NNX module whose state is its parameters plugs in (LSTM, GPT-NeoX, PixelCNN++).
  """

  name: str
  config: Any
  graphdef: Any
  init: Callable[[Any], Any]
  # Fine-tuning: every copy starts from these params (init ignores its key). Not part of equality or hashing, so
  # jit and lru caches key on the (graphdef, init) pair; `init` is a new closure for each base checkpoint.
  pretrained: Any = dataclasses.field(default=None, compare=False, repr=False)

  def apply(self, params, tokens_BxT, mask_BxT=None):
    return nnx.merge(self.graphdef, params)(tokens_BxT, attention_mask=mask_BxT)


def functional(name, config, make_module):
  """Wrap `make_module(rngs) -> nnx.Module` (same structure for every seed) as a FunctionalModel."""
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: make_module(nnx.Rngs(0))))

  def init(key):
    return nnx.split(make_module(nnx.Rngs(params=key)))[1]

  return FunctionalModel(name, config, graphdef, init)


def pretrained(name, config, module):
  """A FunctionalModel whose every copy starts from the parameters of `module` (fine-tuning a base checkpoint)."""
  graphdef, params = nnx.split(module)
  return FunctionalModel(name, config, graphdef, lambda key: params, pretrained=params)


def get_model(name, **kwargs):
  """Model by name: "lstm" (kwargs: LSTMConfig fields) or "gpt_neox" (kwargs: GPTNeoXConfig fields)."""
  if name == "lstm":
    from models import lstm
    config = lstm.LSTMConfig(**kwargs)
    return functional(name, config, lambda rngs: lstm.LSTMLanguageModel(config, rngs=rngs))
  if name == "gpt_neox":
    from models import gpt_neox
    config = gpt_neox.GPTNeoXConfig(**kwargs)
    return functional(name, config, lambda rngs: gpt_neox.GPTNeoXForCausalLM(config, rngs=rngs))
  raise InputError(f"unknown model {name!r}; available: lstm, gpt_neox")
