"""A model as pure functions (FunctionalModel), the one interface the shadow-model trainer uses, and the
per-position losses and statistics of the two data kinds (token sequences, images) a family plugs into it."""

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import nnx

from models import precision
from models import token_loss


def lm_loss(module, tokens_BxT, bos_id, key):
  """-ln p(x_t | BOS, x_<t) [B, T] of a causal LM (all T positions scored); no dropout, so `key` is unused."""
  del key
  return token_loss.token_loss(module(token_loss.with_bos(tokens_BxT, bos_id), attention_mask=None), tokens_BxT)


def lm_statistics(module, tokens_BxT, bos_id):
  """(loss, mu, sigma, top1) [B, T] of a causal LM: the loss, the moments of ln p over the vocabulary, and whether
  the top-1 token is the true one."""
  return token_loss.sequence_statistics(lambda x, m: module(x, attention_mask=m), tokens_BxT, bos_id=bos_id)


def image_loss(module, images_BxHxWxC, bos_id, key):
  """Per-pixel NLL [B, H * W] of an image model; dropout when a key is given (training), none without (evaluation)."""
  del bos_id
  return module.per_position_loss(images_BxHxWxC, train=key is not None, key=key)


def image_statistics(module, images_BxHxWxC, bos_id):
  return (image_loss(module, images_BxHxWxC, bos_id, None),)


LM_STATS = ("mu", "sigma", "top1")  # what an LM's statistics() returns beside the loss


@dataclasses.dataclass(frozen=True)
class FunctionalModel:
  """A model as pure functions: `init(key) -> params` and `loss(params, examples, bos_id, key) -> loss_BxT`.

  The trainer stacks params of many copies on a leading model axis and vmaps these functions, so any NNX module
  whose state is its parameters plugs in (LSTM, GPT-NeoX, PixelCNN++). The family brings its per-position loss
  (`loss_fn`: -ln p of token t given BOS and tokens < t for LMs, the NLL of pixel t in raster order for images)
  and its stored statistics (`statistics_fn`: the loss first, then one array per name in `stat_names`).
  `config.dtype` is the compute dtype (models/precision.py); `with_compute_dtype` gives the same model in another.
  """

  name: str
  config: Any
  graphdef: Any
  init: Callable[[Any], Any]
  # Fine-tuning: every copy starts from these params (init ignores its key). Not part of equality or hashing, so
  # jit and lru caches key on the (graphdef, init) pair; `init` is a new closure for each base checkpoint.
  pretrained: Any = dataclasses.field(default=None, compare=False, repr=False)
  loss_fn: Callable = lm_loss
  statistics_fn: Callable = lm_statistics
  stat_names: tuple = LM_STATS
  dropout: bool = False  # the loss takes a random key in training (the trainer draws one per model and step)
  # LoRA (models/lora.py): the params are a copy's adapters and `frozen` the base's parameters, one for every copy,
  # which jitted code takes as an argument (`frozen=`) mapped over no model axis. `lora` is the LoRASettings.
  frozen: Any = dataclasses.field(default=None, compare=False, repr=False)
  lora: Any = None

  @property
  def fine_tuned(self):
    """Whether every copy starts from a base checkpoint (whole copies or adapters on a shared base)."""
    return self.pretrained is not None or self.frozen is not None

  def with_compute_dtype(self, dtype):
    """This model computing in `dtype` ("float32" or "bfloat16"): the same parameters, initialisation and base
    checkpoint, float32 as they are; only the graph's compute dtype differs. The module is rebuilt from its class as
    `cls(config, rngs=...)` with config.dtype replaced (abstractly: nothing is initialised)."""
    precision.check(dtype)
    if self.config.dtype == dtype:
      return self
    config = dataclasses.replace(self.config, dtype=dtype)
    abstract = self.module(jax.eval_shape(self.init, jax.random.PRNGKey(0)), jax.eval_shape(lambda: self.frozen))
    cls = type(abstract)

    def rebuilt():
      module = cls(config, rngs=nnx.Rngs(0))
      return module if self.lora is None else self.lora.wrap(module, nnx.Rngs(0))

    graphdef = nnx.graphdef(nnx.eval_shape(rebuilt))
    return dataclasses.replace(self, config=config, graphdef=graphdef)

  def module(self, params, frozen=None):
    """The NNX module of one copy: its params, with the base's (`frozen`, default self.frozen) for LoRA copies."""
    frozen = self.frozen if frozen is None else frozen
    return nnx.merge(self.graphdef, params) if frozen is None else nnx.merge(self.graphdef, params, frozen)

  def apply(self, params, tokens_BxT, mask_BxT=None, frozen=None):
    """logits_BxTxV of a language model."""
    return self.module(params, frozen)(tokens_BxT, attention_mask=mask_BxT)

  def loss(self, params, examples, bos_id=None, key=None, frozen=None):
    """Per-position loss [B, T]; `key` (training only) draws dropout masks where the family has dropout."""
    return self.loss_fn(self.module(params, frozen), examples, bos_id, key)

  def statistics(self, params, examples, bos_id=None, frozen=None):
    """(loss, *stats) [B, T] without dropout; stats named by `stat_names`."""
    return self.statistics_fn(self.module(params, frozen), examples, bos_id)


def functional(name, config, make_module, rbg_init=False, **family):
  """Wrap `make_module(rngs) -> nnx.Module` (same structure for every seed) as a FunctionalModel.

  With `rbg_init` the parameters are drawn from an "rbg" key made from init's key: one network of ~170 tensors
  then compiles its initialiser several times faster than with threefry draws.
  """
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: make_module(nnx.Rngs(0))))

  def init(key):
    if rbg_init:
      key = jax.random.wrap_key_data(jax.random.bits(key, (4,), jnp.uint32), impl="rbg")
    return nnx.split(make_module(nnx.Rngs(params=key)))[1]

  return FunctionalModel(name, config, graphdef, init, **family)


def pretrained(name, config, module):
  """A FunctionalModel whose every copy starts from the parameters of `module` (fine-tuning a base checkpoint)."""
  graphdef, params = nnx.split(module)
  return FunctionalModel(name, config, graphdef, lambda key: params, pretrained=params)
