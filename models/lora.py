"""Low-rank adapters (LoRA, Hu et al. 2021) on a model's linear layers, and the shadow copies that share one base.

Letters: B batch, T time, N = B x T rows, I a layer's input width, O its output width, R the adapter rank.

`apply(module, settings, rngs)` replaces each targeted nnx.Linear by a LoRALinear holding it: its output is
`base(x) + ((x @ A) @ B) * alpha / R`, A [I, R] drawn uniform in +-1/sqrt(I) (torch's kaiming_uniform with a = sqrt(5),
as PEFT draws it), B [R, O] zero, so a fresh adapter leaves the base's outputs unchanged exactly. The adapters are
nnx.LoRAParam variables; everything else stays nnx.Param.

Targets (`LoRASettings.targets`): "attention" (every linear layer inside a module named attention, attn or self_attn:
GPT-NeoX's query_key_value and dense, GPT-2's c_attn and c_proj, Llama's q/k/v/o_proj), "mlp" (every linear layer
inside a module named mlp), or a layer name matched against the end of its dotted path, as PEFT's target_modules are
("q_proj", "attn.c_proj"). The output head is never targeted by "attention" or "mlp".

`functional(name, config, module, settings)` is the FunctionalModel of the shadow copies: its parameters are the
adapters alone (what the trainer stacks, trains with AdamW and checkpoints) and `frozen`, the base's parameters, is
held once and passed to every copy unbatched. `merged(module)` folds the adapters into the kernels: the plain model of
the family, which a Hugging Face folder stores.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from lira.errors import InputError
from models import functional_model

ATTENTION_PARENTS = ("attention", "attn", "self_attn")
GROUPS = ("attention", "mlp")


@dataclasses.dataclass(frozen=True)
class LoRASettings:
  """Rank, alpha (outputs scaled by alpha / rank) and target layers (GROUPS or layer names) of the adapters."""
  rank: int
  alpha: float = 16.0
  targets: tuple = ("attention",)

  def __post_init__(self):
    if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
      raise InputError(f"train.lora.rank must be a positive integer, got {self.rank!r}")
    if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and self.alpha > 0):
      raise InputError(f"train.lora.alpha must be a positive number, got {self.alpha!r}")
    if not self.targets or not all(isinstance(t, str) and t for t in self.targets):
      raise InputError(f"train.lora.targets must name layers (attention, mlp or layer names), got {self.targets!r}")

  @property
  def scale(self):
    return self.alpha / self.rank

  def wrap(self, module, rngs):
    """`module` with these adapters (apply)."""
    return apply(module, self, rngs)


class LoRALinear(nnx.Module):
  """`base(x) + ((x @ lora_a) @ lora_b) * scale`, in the base layer's compute dtype."""

  def __init__(self, base: nnx.Linear, rank, scale, rngs):
    self.base = base
    fan_in, fan_out = base.in_features, base.out_features
    bound = 1.0 / math.sqrt(fan_in)
    self.lora_a = nnx.LoRAParam(jax.random.uniform(rngs.params(), (fan_in, rank), jnp.float32, -bound, bound))
    self.lora_b = nnx.LoRAParam(jnp.zeros((rank, fan_out), jnp.float32))
    self.scale = float(scale)

  def __call__(self, x_BxTxI):
    y_BxTxO = self.base(x_BxTxI)
    dtype = y_BxTxO.dtype
    a_IxR, b_RxO = self.lora_a.get_value().astype(dtype), self.lora_b.get_value().astype(dtype)
    # Rows flattened: on [B, T, I] activations the gradient of B contracts two axes, and XLA's CPU compiler then
    # copies the cotangent transposed, recomputing the residual stream's cotangent of every layer above in that copy
    # (GPT-2 small's LoRA step 1.2-1.3x slower on a CPU; BENCHMARKS.md, LoRA shadow copies).
    x_NxI = x_BxTxI.astype(dtype).reshape(-1, x_BxTxI.shape[-1])
    lora_NxO = ((x_NxI @ a_IxR) @ b_RxO) * jnp.asarray(self.scale, dtype)
    return y_BxTxO + lora_NxO.reshape(y_BxTxO.shape)


def linear_layers(module):
  """{dotted path: nnx.Linear} of every linear layer of a module."""
  return {".".join(map(str, path)): m for path, m in nnx.iter_modules(module) if type(m) is nnx.Linear}


def _parent_name(path):
  parts = path.split(".")
  return parts[-2] if len(parts) > 1 else ""


def targeted(paths, targets):
  """The paths of `paths` (dotted linear-layer paths) that `targets` select; InputError for a target that selects
  none, naming the layers there are."""
  chosen = set()
  for target in targets:
    if target == "attention":
      hits = {p for p in paths if _parent_name(p) in ATTENTION_PARENTS}
    elif target == "mlp":
      hits = {p for p in paths if _parent_name(p) == "mlp"}
    else:
      hits = {p for p in paths if p == target or p.endswith("." + target)}
    if not hits:
      names = sorted({".".join(p.split(".")[-2:]) for p in paths})
      raise InputError(f"train.lora.targets: {target!r} selects no linear layer of this model; its layers: "
                       f"{', '.join(names)} (or attention, mlp)")
    chosen |= hits
  return sorted(chosen)


def _set(module, path, value):
  *parents, last = path.split(".")
  for p in parents:
    module = module[int(p)] if p.isdigit() else getattr(module, p)
  if last.isdigit():
    module[int(last)] = value
  else:
    setattr(module, last, value)


def apply(module, settings: LoRASettings, rngs):
  """`module` with its targeted linear layers wrapped in LoRALinear (in place; returned)."""
  layers = linear_layers(module)
  for path in targeted(list(layers), settings.targets):
    _set(module, path, LoRALinear(layers[path], settings.rank, settings.scale, rngs))
  return module


def merged(module):
  """The plain module of `module`: every LoRALinear replaced by its base layer whose kernel is
  W + scale * A @ B (float32). The adapters' module is left as it was."""
  # new module objects (merge shares the Variables: each merged kernel is a new Param, no Variable is written)
  module = nnx.merge(*nnx.split(module))
  wrapped = [(".".join(map(str, p)), m) for p, m in nnx.iter_modules(module) if isinstance(m, LoRALinear)]
  for path, lora in wrapped:
    base = lora.base
    delta_IxO = lora.lora_a.get_value().astype(jnp.float32) @ lora.lora_b.get_value().astype(jnp.float32)
    base.kernel = nnx.Param(jnp.asarray(base.kernel.get_value(), jnp.float32) + delta_IxO * lora.scale)
    _set(module, path, base)
  return module


def split(module):
  """(graphdef, adapters, base) of a module with adapters: the LoRAParam state and the rest."""
  return nnx.split(module, nnx.LoRAParam, ...)


def functional(name, config, module, settings: LoRASettings):
  """The FunctionalModel of LoRA shadow copies of `module` (a base checkpoint): `init(key)` draws one copy's
  adapters (A from the key, B zero; the base is not read); `frozen` holds the base's parameters, shared by every
  copy."""
  base_graphdef, base_params = nnx.split(module)
  abstract_base = jax.eval_shape(lambda: base_params)

  def init(key):
    return split(apply(nnx.merge(base_graphdef, abstract_base), settings, nnx.Rngs(params=key)))[1]

  graphdef, _, frozen = split(apply(nnx.merge(base_graphdef, base_params), settings, nnx.Rngs(0)))
  return functional_model.FunctionalModel(name, config, graphdef, init, frozen=frozen, lora=settings)
