"""Shadow-model trainer throughput: G models per vmapped group vs the same models trained one after another.

  python benchmarks/train_throughput.py                       # default and paper LSTM sizes, G = 1, 4, 16
  python benchmarks/train_throughput.py --sizes default --groups 1,2,4,8,16,32 --steps 5
  python benchmarks/train_throughput.py --sizes default --groups 1,4 --steps 2 --out /tmp/t.json   # smoke test

For each model size and G it times the trainer's jitted, vmapped AdamW step (trainer.make_step) on random
tokens and reports tokens/s and achieved GFLOP/s, against
  * the machine's dense float32 matmul GFLOP/s (jnp.dot of square matrices, the practical ceiling), and
  * training the same G models one after another: G single-model steps run back to back in the same run.
FLOPs are counted analytically (matmuls only, backward = 2x forward): per token
2 * (sum over layers of 4H(D_in + H) + H V), times 3 for forward plus backward. Sizes whose activations
would not fit in memory are skipped and reported as such.
"""

import argparse
import datetime
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

from experiments.configs import lstm as lstm_configs  # noqa: E402
from models import get_model  # noqa: E402
from training import trainer  # noqa: E402

PYTHIA_VOCAB = 50_304  # the paper's tokenizer (Pythia's embedding rows)


def sizes():
  """name -> (vocab, embed, hidden, layers, seq_len, batch, learning rate) from the run configs."""
  out = {}
  for name, arg, vocab in (("default", "cpu", None), ("paper", "paper", PYTHIA_VOCAB)):
    c = lstm_configs.get_config(arg)
    out[name] = dict(vocab=vocab or c.tokenizer.vocab_size, embed=c.model.embed_dim, hidden=c.model.hidden_dim,
                     layers=c.model.num_layers, seq_len=c.data.seq_len, batch=c.train.batch_size,
                     lr=c.train.learning_rate)
  return out


def flops_per_token(s):
  dims = [s["embed"]] + [s["hidden"]] * s["layers"]
  forward = 2 * (sum(4 * h * (d + h) for d, h in zip(dims[:-1], dims[1:])) + s["hidden"] * s["vocab"])
  return 3 * forward


def activation_bytes(s, G):
  """Rough peak: logits, their softmax and gradient in float32 for G models, plus LSTM activations."""
  tokens = G * s["batch"] * s["seq_len"]
  return tokens * (3 * s["vocab"] + 12 * s["layers"] * s["hidden"]) * 4


def matmul_gflops(sizes=(1024, 2048), repeats=20):
  """Best dense float32 matmul rate over a few square sizes (the practical ceiling of this device)."""
  best_rate = 0.0
  for n in sizes:
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    f(a, b).block_until_ready()
    for _ in range(repeats):
      t = time.perf_counter()
      f(a, b).block_until_ready()
      best_rate = max(best_rate, 2 * n**3 / (time.perf_counter() - t) / 1e9)
  return best_rate


def _timed(fn, steps):
  """Median seconds per call over `steps` calls, after one compile/warm-up call (shared machines are noisy)."""
  jax.block_until_ready(fn())
  times = []
  for _ in range(steps):
    t = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t)
  return float(np.median(times))


def measure(s, G, steps):
  model = get_model("lstm", vocab_size=s["vocab"], embed_dim=s["embed"], hidden_dim=s["hidden"],
                    num_layers=s["layers"])
  optimizer = trainer.make_optimizer(s["lr"], 0.0)
  step = trainer.make_step(model, s["lr"], 0.0, 0)
  rng = np.random.default_rng(0)
  tokens_GxBxT = jnp.asarray(rng.integers(1, s["vocab"], size=(G, s["batch"], s["seq_len"])), jnp.int32)
  weight_GxB = jnp.ones((G, s["batch"]), jnp.float32)
  keys = jnp.stack([trainer.model_key(0, m) for m in range(G)])

  state = {}
  state["params"] = trainer.init_stack(model, keys)
  state["opt"] = jax.jit(jax.vmap(optimizer.init))(state["params"])

  def grouped():
    state["params"], state["opt"], loss = step(state["params"], state["opt"], tokens_GxBxT, weight_GxB)
    return loss

  grouped_s = _timed(grouped, steps)
  del state["params"], state["opt"]

  singles = []
  for m in range(G):
    p = trainer.init_stack(model, keys[m:m + 1])
    singles.append([p, jax.jit(jax.vmap(optimizer.init))(p)])

  def one_after_another():
    losses = []
    for m, (p, o) in enumerate(singles):
      singles[m][0], singles[m][1], loss = step(p, o, tokens_GxBxT[m:m + 1], weight_GxB[m:m + 1])
      losses.append(loss)
    return losses

  sequential_s = _timed(one_after_another, steps)
  tokens = G * s["batch"] * s["seq_len"]
  return dict(G=G, step_s=grouped_s, sequential_step_s=sequential_s, tokens_per_s=tokens / grouped_s,
              sequential_tokens_per_s=tokens / sequential_s, gflops=tokens * flops_per_token(s) / grouped_s / 1e9,
              speedup_vs_sequential=sequential_s / grouped_s)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default="default,paper", help="comma-separated: default, paper")
  ap.add_argument("--groups", default="1,4,16", help="comma-separated group sizes G")
  ap.add_argument("--steps", type=int, default=10, help="timed steps per measurement (median; after one warm-up step)")
  ap.add_argument("--memory_fraction", type=float, default=0.5,
                  help="skip a (size, G) whose estimated activations exceed this fraction of host memory")
  ap.add_argument("--out", default=None, help="JSON output; default benchmarks/results/train_throughput_<device>.json")
  args = ap.parse_args()

  device = jax.devices()[0]
  memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  peak = matmul_gflops()
  print(f"{device.platform} ({device.device_kind}), {os.cpu_count()} CPUs: dense float32 matmul {peak:.1f} GFLOP/s")
  results = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
                 device=f"{device.platform}:{device.device_kind}", cpus=os.cpu_count(), jax=jax.__version__,
                 matmul_gflops=peak, sizes={})
  print(f"{'size':8} {'G':>3} {'step s':>9} {'tokens/s':>10} {'GFLOP/s':>8} {'% matmul':>8} {'seq. tokens/s':>13} "
        f"{'vs seq.':>7}")
  for name in args.sizes.split(","):
    s = sizes()[name]
    rows = []
    for G in [int(g) for g in args.groups.split(",")]:
      need = activation_bytes(s, G)
      if device.platform == "cpu" and need > args.memory_fraction * memory:
        print(f"{name:8} {G:>3} skipped: about {need / 2**30:.0f} GiB of activations")
        rows.append(dict(G=G, skipped=f"about {need / 2**30:.0f} GiB of activations"))
        continue
      r = measure(s, G, args.steps)
      rows.append(r)
      print(f"{name:8} {G:>3} {r['step_s']:>9.3f} {r['tokens_per_s']:>10.0f} {r['gflops']:>8.1f} "
            f"{100 * r['gflops'] / peak:>7.0f}% {r['sequential_tokens_per_s']:>13.0f} "
            f"{r['speedup_vs_sequential']:>6.2f}x", flush=True)
    results["sizes"][name] = dict(config=s, flops_per_token=flops_per_token(s), results=rows)
  out = args.out or str(ROOT / "benchmarks" / "results" / f"train_throughput_{device.platform}.json")
  tmp = out + ".tmp"
  with open(tmp, "w") as f:
    json.dump(results, f, indent=2)
  os.replace(tmp, out)
  print(f"wrote {out}")


if __name__ == "__main__":
  main()
