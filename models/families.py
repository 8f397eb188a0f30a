"""The model families, each looked up once by the name a config gives it (model.name): `family(name) -> Family`.

A Family answers for itself what code would otherwise read from its name: the data it models (`data_kind`: "tokens",
token sequences read after a BOS, or "images", [H, W, C] pixel levels scored pixel by pixel in raster order), the
statistics a shadow run stores beside losses.npy (`stat_names`: mu and sigma of ln p over the vocabulary and top1,
whether the top-1 token is the true one, for language models; none for images), whether a shadow run fine-tunes
copies of a base checkpoint (`fine_tunes`: model.base, a folder, a hub id or "pretrain") instead of training freshly
initialised ones, and how to build its FunctionalModel from the config's model fields (`build(**kwargs)`, what
get_model calls). Every family's config has a `dtype` field, its compute dtype (models/precision.py), and its module
is built as `cls(config, rngs=...)`, so FunctionalModel.with_compute_dtype rebuilds it in another.
"""

import dataclasses
import functools
from typing import Callable

from lira.errors import InputError
from models.functional_model import LM_STATS, FunctionalModel, functional, image_loss, image_statistics

DATA_KINDS = ("tokens", "images")


@dataclasses.dataclass(frozen=True)
class Family:
  name: str  # model.name in a config
  data_kind: str  # one of DATA_KINDS
  stat_names: tuple  # what the family's statistics() return beside the loss, stored as RUN_DIR/<stat>.npy
  fine_tunes: bool  # a shadow run's copies start from the base checkpoint model.base
  build: Callable[..., FunctionalModel] = dataclasses.field(repr=False, compare=False)  # **model fields -> model

  def __post_init__(self):
    if self.data_kind not in DATA_KINDS:
      raise ValueError(f"family {self.name!r}: data_kind must be one of {DATA_KINDS}, got {self.data_kind!r}")


def _lstm(**kwargs):
  """LSTMConfig fields; the family's loss computes the head and the loss in chunks of positions (lstm.lm_loss)."""
  from models import lstm
  config = lstm.LSTMConfig(**kwargs)
  return functional("lstm", config, lambda rngs: lstm.LSTMLanguageModel(config, rngs=rngs), loss_fn=lstm.lm_loss)


def _gpt_neox(**kwargs):
  """GPTNeoXConfig fields: a freshly initialised GPT-NeoX (a base checkpoint to fine-tune: models.pretrained)."""
  from models import gpt_neox
  config = gpt_neox.GPTNeoXConfig(**kwargs)
  return functional("gpt_neox", config, lambda rngs: gpt_neox.GPTNeoXForCausalLM(config, rngs=rngs))


def _gpt2(**kwargs):
  """GPT2Config fields: a freshly initialised GPT-2 (a base checkpoint to fine-tune: models.pretrained)."""
  from models import gpt2
  config = gpt2.GPT2Config(**kwargs)
  return functional("gpt2", config, lambda rngs: gpt2.GPT2LMHeadModel(config, rngs=rngs))


def _llama(**kwargs):
  """LlamaConfig fields (model_type llama or qwen2): a freshly initialised Llama-architecture model (a base
  checkpoint to fine-tune: models.pretrained)."""
  from models import llama
  config = llama.LlamaConfig(**kwargs)
  return functional("llama", config, lambda rngs: llama.LlamaForCausalLM(config, rngs=rngs))


@functools.lru_cache(maxsize=8)
def _pixelcnn_model(config):
  """One FunctionalModel per config, so runs and tests in one process share its compiled steps (~30 s each)."""
  from models import pixelcnn_pp
  return functional("pixelcnn_pp", config, lambda rngs: pixelcnn_pp.PixelCNNPP(config, rngs=rngs), rbg_init=True,
                    loss_fn=image_loss, statistics_fn=image_statistics, stat_names=(), dropout=config.dropout_p > 0)


def _pixelcnn(**kwargs):
  """PixelCNNConfig fields."""
  from models import pixelcnn_pp
  return _pixelcnn_model(pixelcnn_pp.PixelCNNConfig(**kwargs))


FAMILIES = {f.name: f for f in (
    Family("lstm", data_kind="tokens", stat_names=LM_STATS, fine_tunes=False, build=_lstm),
    Family("gpt_neox", data_kind="tokens", stat_names=LM_STATS, fine_tunes=True, build=_gpt_neox),
    Family("gpt2", data_kind="tokens", stat_names=LM_STATS, fine_tunes=True, build=_gpt2),
    Family("llama", data_kind="tokens", stat_names=LM_STATS, fine_tunes=True, build=_llama),
    Family("pixelcnn_pp", data_kind="images", stat_names=(), fine_tunes=False, build=_pixelcnn),
)}


def family(name):
  """The Family called `name` (a config's model.name); InputError naming the available ones otherwise."""
  if isinstance(name, str) and name in FAMILIES:
    return FAMILIES[name]
  raise InputError(f"unknown model {name!r}; available: {', '.join(FAMILIES)}")


def get_model(name, **kwargs):
  """Model by name: "lstm" (LSTMConfig fields), "gpt_neox" (GPTNeoXConfig fields), "gpt2" (GPT2Config fields),
  "llama" (LlamaConfig fields; Llama and Qwen2) or "pixelcnn_pp" (PixelCNNConfig)."""
  return family(name).build(**kwargs)
