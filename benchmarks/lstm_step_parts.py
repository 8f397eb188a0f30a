"""Where the LSTM trainer step's time goes on an accelerator: the step against its two parts, each timed alone.

  python benchmarks/lstm_step_parts.py --out $OUT/lstm_step_parts.json     # the paper's shape, G = 16, on a GPU
  python benchmarks/lstm_step_parts.py --smoke --out /tmp/parts.json        # tiny shapes: a CPU check of the script

A group of G models of the paper's LSTM (V = 50,304, embedding and hidden 192, 2 layers; batch 64, T = 128), at
float32 and bfloat16 (train.compute_dtype), each program jitted and vmapped over the G models:
- step: the trainer's step (training.trainer.make_step): forward, backward and AdamW, as train_shadows runs it;
- recurrence: the embedding and the LSTM layers, forward and backward (the gradient of the summed last-layer outputs
  with respect to every parameter), without the head;
- head: the head and the loss (models.token_loss.linear_token_loss), forward and backward, on [B T, H] features of
  the compute dtype, at the chunk rows a CPU takes (chunk_rows(V, "cpu"): 1,024 at V = 50,304), at the rows the model
  takes on this device (an accelerator's: all B T rows at the paper's shape), at 4,096 and at all B T rows in one
  chunk.
The recurrence and the head at the model's chunk rows against the step say what else the step spends (AdamW, the
glue); the head's rows say whether larger chunks than a 2-core CPU's caches favour pay on the device. Timing: --warmup
untimed calls after the compile, then the median of --reps calls, each waited for; inputs are on the device before
the clock starts. Rows stop being started after --budget_s seconds. Writes one JSON (rewritten after every row) and
prints a table.
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
from training import group_plan  # noqa: E402
from training import trainer  # noqa: E402

PAPER = dict(vocab_size=50_304, embed_dim=192, hidden_dim=192, num_layers=2, batch=64, T=128, G=16)
SMOKE = dict(vocab_size=300, embed_dim=16, hidden_dim=32, num_layers=2, batch=8, T=12, G=2)


def programs(model, s, dtype, rng):
  """{name: (jitted function, device arguments)} of the step and its parts for one compute dtype."""
  G, B, T, V, H = s["G"], s["batch"], s["T"], s["vocab_size"], s["hidden_dim"]
  m = group_plan.in_dtype(model, dtype)
  params = trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), G))
  tokens = jnp.asarray(rng.integers(1, V, (G, B, T)), jnp.int32)
  weight = jnp.ones((G, B), jnp.float32)
  make_step = trainer.make_step(m, 1e-3, 0.0, 0, single=G == 1)
  state = [trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(1), G)), None]
  state[1] = trainer.opt_init(state[0], 1e-3, 0.0)

  def step():  # the step donates its parameters and optimiser state: each call takes the last call's
    state[0], state[1], loss = make_step(state[0], state[1], tokens, weight)
    return loss

  out = {"step": (step, ())}

  def recurrence(p, tokens_BxT):
    h_TxBxH, _ = nnx.merge(m.graphdef, p).features(token_loss.with_bos(tokens_BxT, 0))
    return jnp.sum(h_TxBxH.astype(jnp.float32))

  out["recurrence"] = (jax.jit(jax.vmap(jax.grad(recurrence))), (params, tokens))
  h = jnp.asarray(rng.normal(size=(G, B * T, H)), jnp.dtype(dtype))
  kernel = params["head"]["kernel"]
  bias = params["head"]["bias"]
  targets = tokens.reshape(G, B * T)
  own, cpu = (min(token_loss.chunk_rows(V, backend), B * T) for backend in (None, "cpu"))
  for rows in sorted({cpu, own, 4096, B * T}):
    if rows > B * T:
      continue

    def head(x, k, b, t, rows=rows):
      return jnp.mean(token_loss.linear_token_loss(x, k, b, t, rows))

    label = f"head, {rows} rows" + (" (the model's)" if rows == own else " (a CPU's)" if rows == cpu else "")
    out[label] = (jax.jit(jax.vmap(jax.grad(head, argnums=(0, 1, 2)))), (h, kernel, bias, targets))
  return out


def main():
  args = step_parts.parser(__doc__, 16, "float32,bfloat16", "lstm_step_parts.json").parse_args()
  s = dict(SMOKE if args.smoke else PAPER)
  s["G"] = args.G or s["G"]
  model = get_model("lstm", **{k: s[k] for k in ("vocab_size", "embed_dim", "hidden_dim", "num_layers")})
  record = step_parts.Record(args.out, args.budget_s, shape=s)
  print(f"{record.result['device']}; jax {jax.__version__}; G = {s['G']}, batch {s['batch']}, T = {s['T']}, "
        f"V = {s['vocab_size']}", flush=True)
  for dtype in args.dtypes.split(","):
    for name, (fn, fn_args) in programs(model, s, dtype, np.random.default_rng(0)).items():
      if record.over_budget(f"{dtype} {name}"):
        continue
      try:
        seconds = step_parts.timed(lambda: fn(*fn_args), args.warmup, args.reps)
        row = dict(dtype=dtype, part=name, ms=seconds * 1e3, ms_per_model=seconds * 1e3 / s["G"])
      except Exception as e:  # noqa: BLE001 - an out-of-memory row is a result
        row = dict(dtype=dtype, part=name, note=step_parts.failure(e))
      record.add(row)
      print(f"{dtype:9} {name:30} " + (f"{row['ms']:9.2f} ms  {row['ms_per_model']:8.2f} ms per model"
                                        if "ms" in row else row["note"]), flush=True)
  record.close()


if __name__ == "__main__":
  main()
