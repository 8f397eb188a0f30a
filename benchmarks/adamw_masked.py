"""What the vmapped step's per-model choice (a batch of only padding steps nothing) costs AdamW, before and after
training/adamw.py, on jax's default device.

  python benchmarks/adamw_masked.py                        # update of 2 x 20M parameters, then trainer steps
  python benchmarks/adamw_masked.py --params 1000000 --shapes lstm_cpu --reps 3   # a quick check

Update rows: AdamW on G stacks of --params float32 parameters (one leaf of P and one of P / 4 x 4), jitted, vmapped
over the G models, parameters and state donated:
- optax: optax.adamw's update and apply_updates, nobody sits out (the floor);
- optax, then choose: the same, then jnp.where(has_data, new, old) on the new parameters and state, per model;
- masked_update: training.adamw.masked_update (the state chosen first, the parameters stepped from it).
Step rows: training.trainer.make_step (vmapped, G models) of a model shape with masked_update, and with the update
replaced by "optax, then choose", alternated; every model has data. The three update rows end with equal parameters
and state (checked). Timing: the median of --reps calls after two untimed ones.
"""

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models import get_model  # noqa: E402
from training import adamw  # noqa: E402
from training import trainer  # noqa: E402

LR, WD = 1e-3, 1e-2
SHAPES = {
    "lstm_cpu": (dict(vocab_size=512, embed_dim=64, hidden_dim=128, num_layers=2), 16, 32),
    "lstm_paper": (dict(vocab_size=50_304, embed_dim=192, hidden_dim=192, num_layers=2), 64, 128),
}


def optax_then_choose(grads, opt_state, params, has_data, learning_rate, weight_decay):
  """The per-model choice after optax's update: what the vmapped step did before training/adamw.py."""
  updates, new_state = adamw.make_optimizer(learning_rate, weight_decay).update(grads, opt_state, params)
  keep_new = lambda new, old: jnp.where(has_data, new, old)  # noqa: E731
  return (jax.tree.map(keep_new, optax.apply_updates(params, updates), params),
          jax.tree.map(keep_new, new_state, opt_state))


def unmasked(grads, opt_state, params, has_data, learning_rate, weight_decay):
  del has_data
  updates, new_state = adamw.make_optimizer(learning_rate, weight_decay).update(grads, opt_state, params)
  return optax.apply_updates(params, updates), new_state


def median_time(fn, reps):
  times = []
  for i in range(reps + 2):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    if i >= 2:
      times.append(time.perf_counter() - start)
  return float(np.median(times))


def update_rows(G, P, reps):
  rng = np.random.default_rng(0)
  start_np = {"a": rng.normal(size=(G, P)).astype(np.float32), "b": rng.normal(size=(G, P // 4, 4)).astype(np.float32)}
  grads = {k: jnp.asarray(rng.normal(size=v.shape), jnp.float32) for k, v in start_np.items()}
  has = jnp.ones((G,), bool)
  rows, finals = [], []
  variants = (("optax", unmasked), ("optax, then choose", optax_then_choose), ("masked_update", adamw.masked_update))
  for name, fn in variants:
    # parameters and state donated in the order they come back (as make_step's): XLA pairs donated inputs with
    # outputs of their shape in order, and a parameter written over its own moment's buffer costs copies
    step = jax.jit(jax.vmap(lambda p, s, g, h, fn=fn: fn(g, s, p, h, LR, WD)), donate_argnums=(0, 1))
    params = {k: jnp.array(v) for k, v in start_np.items()}  # copies: the step donates them
    state = [params, jax.vmap(adamw.make_optimizer(LR, WD).init)(params)]

    def call(step=step, state=state):
      state[0], state[1] = step(state[0], state[1], grads, has)
      return state[0]

    seconds = median_time(call, reps)  # every variant takes reps + 2 steps from the same start
    finals.append(jax.tree.map(np.asarray, state))
    rows.append(dict(part="update", variant=name, G=G, params_per_model=int(P + P // 4 * 4), ms=seconds * 1e3))
  same = all(all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(f), jax.tree.leaves(finals[0])))
             for f in finals[1:])
  return rows, same


def step_rows(shape, G, reps):
  fields, batch, T = SHAPES[shape]
  model = get_model("lstm", **fields)
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, fields["vocab_size"], (G, batch, T)), jnp.int32)
  weight = jnp.ones((G, batch), jnp.float32)
  rows = []
  for name, fn in (("masked_update", adamw.masked_update), ("optax, then choose", optax_then_choose)) * 2:
    adamw_update = adamw.masked_update
    adamw.masked_update = fn  # make_step calls training.adamw.masked_update when it traces
    trainer.make_step.cache_clear()
    try:
      step = trainer.make_step(model, LR, WD, 0)
      params = trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), G))
      state = [params, trainer.opt_init(params, LR, WD)]

      def call(step=step, state=state):
        state[0], state[1], loss = step(state[0], state[1], tokens, weight)
        return loss

      seconds = median_time(call, reps)
    finally:
      adamw.masked_update = adamw_update
      trainer.make_step.cache_clear()
    rows.append(dict(part=f"step, {shape}", variant=name, G=G, ms=seconds * 1e3,
                     tokens_per_s=G * batch * T / seconds))
  return rows


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--G", type=int, default=2, help="models of the update rows")
  ap.add_argument("--params", type=int, default=20_000_000, help="parameters per model of the update rows (one leaf)")
  ap.add_argument("--shapes", default="lstm_cpu", help="comma-separated step shapes (lstm_cpu, lstm_paper; '' none)")
  ap.add_argument("--step_G", type=int, default=16, help="models of the step rows")
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--out", default=None, help="JSON file (default: print only)")
  a = ap.parse_args()
  device = jax.devices()[0]
  print(f"{device.platform}:{device.device_kind}, jax {jax.__version__}, optax {optax.__version__}")
  rows, same = update_rows(a.G, a.params, a.reps)
  for shape in filter(None, a.shapes.split(",")):
    rows += step_rows(shape, a.step_G, a.reps)
  for r in rows:
    extra = f"  {r['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in r else ""
    print(f"{r['part']:16} {r['variant']:20} G = {r['G']:3d} {r['ms']:10.2f} ms{extra}")
  print(f"update rows end equal: {same}")
  if a.out:
    Path(a.out).write_text(json.dumps(dict(date=datetime.date.today().isoformat(), device=str(device),
                                           command=" ".join(sys.argv), rows=rows, update_rows_equal=same),
                                      indent=1) + "\n")


if __name__ == "__main__":
  main()
