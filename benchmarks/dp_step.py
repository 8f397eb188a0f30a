"""The cost of a DP-SGD step against the plain step, per model family, on the same batches.

  python benchmarks/dp_step.py                 # dp_step.json: CPU-default LSTM and pythia_tiny GPT-NeoX shapes
  python benchmarks/dp_step.py --steps 3 --out /tmp/d.json   # smoke test
  python benchmarks/dp_step.py --groups 1 2 4 --cases plain poisson24 --out benchmarks/results/dp_step_groups.json

One model (the `single` step train_shadows uses with group size 1), batch 16 of T = 32 tokens, timed over --steps
jitted steps after a compile. Rows: the plain AdamW step; DP-SGD with Poisson sampling at the usual padded width
(24: the trainer runs a step at width 24 when its batch fits, about 98% of Binomial batches of mean 16,
training.dp.step_width) and at the full truncation width (40 = 16 + 6 sqrt(16)); DP-SGD on shuffled batches of 16.
Each DP step computes, clips and sums one gradient per example (jax_privacy.clipped_grad), then adds noise.
--groups G1 G2 ...: the same for a group of G models vmapped in one step (train_shadows' shadow.group_size; G = 1 is
the `single` step), reported per model (step time / G) and against the plain step at the same G.
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import models  # noqa: E402
from experiments.configs import pythia  # noqa: E402
from training import dp as dp_lib  # noqa: E402
from training import trainer  # noqa: E402


def family_models():
  arch = dict(pythia.get_config("pythia_tiny").model.arch)
  return {"lstm": (models.get_model("lstm", vocab_size=512, embed_dim=64, hidden_dim=128, num_layers=2), 3e-3, 0.0),
          "gpt_neox": (models.family("gpt_neox").build(vocab_size=512, **arch), 1e-3, 1e-4)}


def time_step(model, lr, wd, dp, width, steps, seed=0, group=1):
  """Seconds per step of a group of `group` models on `width` slots (16 filled) with DP config dp (None: plain)."""
  ids = list(range(group))
  params = trainer.init_stack(model, jnp.stack([trainer.model_key(seed, m) for m in ids]))
  opt = trainer.opt_init(params, lr, wd)
  step = trainer.make_step(model, lr, wd, 0, single=group == 1, dp=dp)
  rng = np.random.default_rng(seed)
  batch = jnp.asarray(rng.integers(1, 512, (group, width, 32)), jnp.int32)
  weight = jnp.asarray(np.broadcast_to(np.arange(width) < 16, (group, width)), jnp.float32)
  keys = [trainer.dropout_key_data(seed, ids, 0, 0) if model.dropout else None]
  if dp is not None:
    keys.append(dp_lib.noise_key_data(seed, ids, 0, 0))
  while keys and keys[-1] is None:
    keys.pop()
  params, opt, loss = step(params, opt, batch, weight, *keys)  # compile
  jax.block_until_ready(loss)
  start = time.perf_counter()
  for _ in range(steps):
    params, opt, loss = step(params, opt, batch, weight, *keys)
  jax.block_until_ready(loss)
  return (time.perf_counter() - start) / steps


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=30)
  parser.add_argument("--groups", type=int, nargs="+", default=[1])
  parser.add_argument("--cases", nargs="+", default=["plain", "poisson24", "poisson40", "shuffle16"])
  parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dp_step.json"))
  args = parser.parse_args(argv)
  poisson = dp_lib.DPConfig(noise_multiplier=1.0, clip_norm=1.0, batch_size=16)
  shuffle = dp_lib.DPConfig(noise_multiplier=1.0, clip_norm=1.0, batch_size=16, sampling="shuffle")
  cases = {"plain": ("plain", None, 16), "poisson24": ("dp poisson, width 24", poisson, 24),
           "poisson40": ("dp poisson, width 40", poisson, 40), "shuffle16": ("dp shuffle, width 16", shuffle, 16)}
  rows = []
  for name, (model, lr, wd) in family_models().items():
    for group in args.groups:
      plain = None
      for label, dp, width in (cases[c] for c in ["plain"] + [c for c in args.cases if c != "plain"]):
        s = time_step(model, lr, wd, dp, width, args.steps, group=group)
        plain = plain or s
        rows.append({"family": name, "group": group, "step": label, "ms": 1e3 * s, "ms_per_model": 1e3 * s / group,
                     "over_plain": s / plain})
        print(f"{name:8} G={group} {label:22} {1e3 * s:8.1f} ms ({1e3 * s / group:7.1f} per model) "
              f"{s / plain:5.1f}x plain", flush=True)
  machine = {"date": time.strftime("%Y-%m-%d"), "cpu_count": os.cpu_count(), "platform": platform.platform(),
             "jax": jax.__version__, "devices": [str(d) for d in jax.devices()],
             "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None}
  Path(args.out).parent.mkdir(parents=True, exist_ok=True)
  Path(args.out).write_text(json.dumps({"config": vars(args), "machine": machine, "rows": rows}, indent=1) + "\n")
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
