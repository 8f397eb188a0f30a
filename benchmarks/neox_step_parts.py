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

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import step_parts  # noqa: E402

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
  leaves, treedef = jax.tree.flatten(params)  # on the device: G x 162M host normals are slow
  keys = jax.random.split(jax.random.PRNGKey(2), len(leaves))
  grads = jax.tree.unflatten(treedef, [1e-3 * jax.random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])
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
  args = step_parts.parser(__doc__, 8, "bfloat16,float32", "neox_step_parts.json").parse_args()
  s = dict(SMOKE if args.smoke else PYTHIA_160M)
  s["G"] = args.G or s["G"]
  model = get_model("gpt_neox", **s["fields"])
  n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(jax.eval_shape(model.init, jax.random.PRNGKey(0)))))
  tokens = s["batch"] * s["T"]
  record = step_parts.Record(args.out, args.budget_s, shape=s, params_per_model=n_params,
                             adamw_bytes_per_model=ADAMW_BYTES * n_params)
  print(f"{record.result['device']}; jax {jax.__version__}; G = {s['G']}, batch {s['batch']}, T = {s['T']}; "
        f"{n_params / 1e6:.1f}M parameters a model, AdamW moves {ADAMW_BYTES * n_params / 1e9:.2f} GB a model-step",
        flush=True)
  for dtype in args.dtypes.split(","):
    if record.over_budget(dtype):
      continue
    try:
      parts = programs(model, s, dtype, np.random.default_rng(0))
    except Exception as e:  # noqa: BLE001 - an out-of-memory compile is a result
      record.add(dict(dtype=dtype, part="programs", note=step_parts.failure(e)))
      print(f"{dtype:9} programs  {record.result['rows'][-1]['note']}", flush=True)
      continue
    for name, (fn, compiled) in parts.items():
      if record.over_budget(f"{dtype} {name}"):
        continue
      try:
        seconds = step_parts.timed(fn, args.warmup, args.reps)
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
        row = dict(dtype=dtype, part=name, note=step_parts.failure(e))
      record.add(row)
      extra = "".join(f"  {row[k]:{spec}} {unit}" for k, spec, unit in (
          ("tokens_per_s", ",.0f", "tokens/s"), ("tflop_per_s", ".3g", "TFLOP/s"), ("adamw_GB_per_s", ".3g", "GB/s"))
          if k in row)
      print(f"{dtype:9} {name:9} " + (f"{row['ms']:9.2f} ms  {row['ms_per_model']:8.2f} ms per model{extra}"
                                      if "ms" in row else row["note"]), flush=True)
    del parts
  record.close()


if __name__ == "__main__":
  main()
