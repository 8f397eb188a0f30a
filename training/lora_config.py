"""The `train.lora` block of a fine-tuning config: LoRA shadow copies (models/lora.py) instead of whole ones.

Off at rank 0 (the default): every copy fine-tunes all of the base's weights. At rank R >= 1 each copy trains only
low-rank adapters on the targeted layers (attention projections by default; `targets="attention,mlp"` adds the MLP,
or name layers as PEFT's target_modules do: "q_proj,v_proj"); the base's weights are held once for the group and
AdamW keeps moments for the adapters alone. Their outputs are scaled by alpha / R.
"""

import dataclasses

from lira.errors import InputError
from lira.options import Options, option


@dataclasses.dataclass(frozen=True)
class LoRAOptions(Options):
  """Fields, defaults, help and ranges of `train.lora` (InputError naming the field as train.lora.<field>)."""

  OWNER = "train.lora."

  rank: int = option(0, "Adapter rank; 0: LoRA off (whole copies are fine-tuned).", low=0, integer=True)
  alpha: float = option(16.0, "The adapters' outputs are scaled by alpha / rank.", low=0, low_open=True)
  targets: str = option("attention", "Layers given adapters, comma-separated: attention, mlp, or layer names "
                        "matched against the end of their path (q_proj, attn.c_proj).")


def config_defaults():
  """The `train.lora` block of a fine-tuning config (off: rank 0)."""
  from ml_collections import config_dict
  return config_dict.ConfigDict({f.name: f.default for f in dataclasses.fields(LoRAOptions)})


def enabled(lora_cfg):
  return lora_cfg is not None and int(lora_cfg.get("rank", 0) or 0) > 0


def settings(lora_cfg, fine_tunes=True):
  """models.lora.LoRASettings of a config's `train.lora` block, or None with LoRA off; InputError for a bad or
  unknown field, or LoRA asked of a family that does not fine-tune a base (`fine_tunes`)."""
  if lora_cfg is None:
    return None
  names = [f.name for f in dataclasses.fields(LoRAOptions)]
  if unknown := sorted(set(lora_cfg) - set(names)):
    raise InputError(f"train.lora has no field {unknown[0]!r}; its fields: {', '.join(names)}")
  values = LoRAOptions.defaults() | {name: lora_cfg[name] for name in names if name in lora_cfg}
  options = LoRAOptions(**values)
  if options.rank == 0:
    return None
  if not fine_tunes:
    raise InputError(f"train.lora.rank={options.rank}: LoRA adapts a pretrained base, and this model family trains "
                     "its models from scratch; leave train.lora.rank at 0")
  from models import lora
  targets = tuple(t.strip() for t in str(options.targets).split(",") if t.strip())
  return lora.LoRASettings(int(options.rank), float(options.alpha), targets)
