"""Where the GPT-NeoX trainer step's time goes: the step against its parts, each timed alone, and the step's floor
from the parameters' memory traffic.

  python benchmarks/neox_step_parts.py --out $OUT/neox_step_parts.json    # Pythia-160m's shape, G = 8, on a GPU
  python benchmarks/neox_step_parts.py --smoke --out /tmp/neox_parts.json  # tiny shapes: a CPU check of the script

A group of G models at Pythia-160m's shape (V = 50,304, 768 wide, 12 layers, 12 heads; random weights), fine-tuning
batch 8, T = 128, at each --dtypes compute dtype (train.compute_dtype), each program jitted and vmapped over the G
models:
- step: the trainer's step (training.trainer.make_step): forward, backward and AdamW, as train_shadows runs it;
- gradient: the loss and its gradient with respect to every parameter (forward and backward, no update);
- forward: the loss alone;
- update: AdamW on a given gradient, as the vmapped step runs it (training.adamw.masked_update, every model with
  data; the parameters and moments donated);
- head: the output head and the loss, forward and backward, on [B, T, 768] features of the compute dtype (the
  [B, T, V] float32 logits the model computes).
AdamW reads a parameter, its gradient and two moments and writes three of them, 28 bytes per float32 parameter per
step whatever the compute dtype; with P parameters that is a floor of 28 P / (memory bandwidth) per model-step, which
the table sets beside the update's time (the bandwidth it reached) and the step's. The gradient's FLOPs are XLA's cost
analysis of the compiled program. Timing: --warmup untimed calls after the compile, then the median of --reps calls,
each waited for; inputs are on the device before the clock starts. Rows stop being started after --budget_s seconds.
Writes one JSON (rewritten after every row) and prints a table.
"""

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models import get_model  # noqa: E402
from models import token_loss  # noqa: E402
from training import adamw  # noqa: E402
from training import group_plan  # noqa: E402
from training import trainer  # noqa: E402

PYTHIA_160M = dict(fields=dict(vocab_size=50_304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072), batch=8, T=128, G=8)
SMOKE = dict(fields=dict(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64), batch=4, T=16, G=2)
LR = 1e-4
ADAMW_BYTES = 28  # per float32 parameter and step: p, g, m, v read; p, m, v written


def timed(fn, warmup, reps):
  """Median seconds of fn() after `warmup` calls (the first compiles)."""
  times = []
  for i in range(warmup + reps):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    if i >= warmup:
      times.append(time.perf_counter() - start)
  return float(np.median(times))


def programs(model, s, dtype, rng):
  """{name: (zero-argument function, its compiled program or None)} of the step and its parts for one compute dtype;
  functions that donate their inputs take the last call's outputs."""
  G, B, T, V = s["G"], s["batch"], s["T"], s["fields"]["vocab_size"]
  m = group_plan.in_dtype(model, dtype)
  tokens = jnp.asarray(rng.integers(1, V, (G, B, T)), jnp.int32)
  weight = jnp.ones((G, B), jnp.float32)

  make_step = trainer.make_step(m, LR, 0.0, 0, single=G == 1)
  state = [trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), G)), None]
  state[1] = trainer.opt_init(state[0], LR, 0.0)

  def step():
    state[0], state[1], loss = make_step(state[0], state[1], tokens, weight)
    return loss

  def loss_fn(p, tokens_BxT):
    return m.loss(p, tokens_BxT, 0).mean()

  params = trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(1), G))  # the step donates state's
  gradient = jax.jit(jax.vmap(jax.grad(loss_fn)))
  forward = jax.jit(jax.vmap(loss_fn))
  grads = jax.tree.map(lambda x: jnp.asarray(rng.normal(0, 1e-3, x.shape), x.dtype), params)
  update_state = state  # the step's parameters and moments (donated in turn)

  def apply(p, opt_state, g, has_data):
    return adamw.masked_update(g, opt_state, p, has_data, LR, 0.0)

  apply = jax.jit(jax.vmap(apply), donate_argnums=(0, 1))
  has_data = jnp.ones((G,), bool)

  def update():
    update_state[0], update_state[1] = apply(update_state[0], update_state[1], grads, has_data)
    return update_state[0]

  head_gdef, _ = nnx.split(nnx.merge(m.graphdef, jax.tree.map(lambda x: x[0], params)).embed_out)
  head_params = params["embed_out"]
  features = jnp.asarray(rng.normal(size=(G, B, T, s["fields"]["hidden_size"])), jnp.dtype(dtype))

  def head_loss(p, x_BxTxD, tokens_BxT):
    return token_loss.token_loss(nnx.merge(head_gdef, p)(x_BxTxD).astype(jnp.float32), tokens_BxT).mean()

  head = jax.jit(jax.vmap(jax.grad(head_loss, argnums=(0, 1))))
  return {
      "step": (step, None),
      "gradient": (lambda: gradient(params, tokens), gradient.lower(params, tokens).compile()),
      "forward": (lambda: forward(params, tokens), None),
      "update": (update, None),
      "head": (lambda: head(head_params, features, tokens), None),
  }


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--smoke", action="store_true", help="tiny shapes (a CPU check of the script)")
  ap.add_argument("--G", type=int, default=None, help="models per group (default 8; smoke 2)")
  ap.add_argument("--dtypes", default="bfloat16,float32")
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--budget_s", type=float, default=300, help="start no row after this many seconds")
  ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "neox_step_parts.json"))
  args = ap.parse_args()
  s = dict(SMOKE if args.smoke else PYTHIA_160M)
  s["G"] = args.G or s["G"]
  device = jax.devices()[0]
  model = get_model("gpt_neox", **s["fields"])
  n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(jax.eval_shape(model.init, jax.random.PRNGKey(0)))))
  tokens = s["batch"] * s["T"]
  result = dict(date=datetime.date.today().isoformat(), device=f"{device.platform}:{device.device_kind}",
                jax=jax.__version__, shape=s, params_per_model=n_params, adamw_bytes_per_model=ADAMW_BYTES * n_params,
                command=" ".join(sys.argv), rows=[], skipped=[])
  start = time.perf_counter()

  def save():
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".tmp", "w") as f:
      json.dump(result, f, indent=1)
    os.replace(args.out + ".tmp", args.out)

  print(f"{result['device']}; jax {jax.__version__}; G = {s['G']}, batch {s['batch']}, T = {s['T']}; "
        f"{n_params / 1e6:.1f}M parameters a model, AdamW moves {ADAMW_BYTES * n_params / 1e9:.2f} GB a model-step",
        flush=True)
  for dtype in args.dtypes.split(","):
    if time.perf_counter() - start > args.budget_s:
      result["skipped"].append(dtype)
      continue
    try:
      parts = programs(model, s, dtype, np.random.default_rng(0))
    except Exception as e:  # noqa: BLE001 - an out-of-memory compile is a result
      result["rows"].append(dict(dtype=dtype, part="gradient", note=f"failed: {type(e).__name__}: "
                                 f"{str(e).splitlines()[0][:200]}"))
      save()
      continue
    for name, (fn, compiled) in parts.items():
      if time.perf_counter() - start > args.budget_s:
        result["skipped"].append(f"{dtype} {name}")
        continue
      try:
        seconds = timed(fn, args.warmup, args.reps)
        row = dict(dtype=dtype, part=name, ms=seconds * 1e3, ms_per_model=seconds * 1e3 / s["G"])
        if name in ("step", "gradient", "forward"):
          row["tokens_per_s"] = s["G"] * tokens / seconds
        if name == "update":
          row["adamw_GB_per_s"] = s["G"] * ADAMW_BYTES * n_params / seconds / 1e9
        if compiled is not None:
          cost = compiled.cost_analysis()
          cost = cost[0] if isinstance(cost, (list, tuple)) else cost
          if cost and cost.get("flops"):
            row["tflop_per_s"] = cost["flops"] / seconds / 1e12
      except Exception as e:  # noqa: BLE001 - an out-of-memory row is a result
        row = dict(dtype=dtype, part=name, note=("out of memory" if group_plan.out_of_memory(e) else
                                                 f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"))
      result["rows"].append(row)
      extra = "".join(f"  {row[k]:{spec}} {unit}" for k, spec, unit in (
          ("tokens_per_s", ",.0f", "tokens/s"), ("tflop_per_s", ".3g", "TFLOP/s"), ("adamw_GB_per_s", ".3g", "GB/s"))
          if k in row)
      print(f"{dtype:9} {name:9} " + (f"{row['ms']:9.2f} ms  {row['ms_per_model']:8.2f} ms per model{extra}"
                                      if "ms" in row else row["note"]), flush=True)
      save()
    del parts
  result["seconds"] = time.perf_counter() - start
  save()
  if result["skipped"]:
    print(f"skipped (time budget): {', '.join(result['skipped'])}")
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
