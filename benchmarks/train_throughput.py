"""Shadow-model trainer throughput against a PyTorch script training the same model on the same CPU.

  python benchmarks/train_throughput.py                                   # all LSTM sizes and both NeoX sizes
  python benchmarks/train_throughput.py --sizes default,mid --groups 2 --reps 10
  python benchmarks/train_throughput.py --sizes default --neox none --reps 2 --out /tmp/t.json   # smoke test

LSTM rows: the trainer's jitted AdamW step (training.trainer.make_step) for one model (G = 1, the `single` path)
and for a vmapped group of G models, against a PyTorch language model of the same shape (nn.Embedding, a 2-layer
nn.LSTM, nn.Linear head, cross-entropy, torch.optim.AdamW with the same lr, betas and eps), with 2 threads
(`torch`) and with 1 (`torch1`: on a shared 2-core machine a 2-thread torch waits on its busy sibling), on the
same random tokens read after BOS, all T positions scored. GPT-NeoX rows: the fine-tuning step of
benchmarks/neox_forward.py (transformers' GPTNeoXForCausalLM holding the same random weights) with the same
three-way comparison.

Timing: one warm-up (compile) call of each contender, then --reps rounds in which every contender makes an
untimed call and then a timed one (a call right after another framework's pays for its caches;
benchmarks/neox_forward.py), so load from other processes hits all alike. Median seconds per step; tokens/s
count every model's tokens (G x B x T for a group). The machine's jitted float32 matmul rate is measured in the
same run, and the 1-minute load average is recorded per size.
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
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import neox_forward  # noqa: E402
from benchmarks.neox_forward import interleaved  # noqa: E402  (untimed call before each timed one)
from experiments.configs import lstm as lstm_configs  # noqa: E402
from models import get_model  # noqa: E402
from training import trainer  # noqa: E402

BOS = 0


def sizes():
  """name -> LSTM (vocab, embed, hidden, layers, seq_len, batch, lr): the CPU default, a middle size, the paper's."""
  c = lstm_configs.get_config("cpu")
  default = dict(vocab=c.tokenizer.vocab_size, embed=c.model.embed_dim, hidden=c.model.hidden_dim,
                 layers=c.model.num_layers, seq_len=c.data.seq_len, batch=c.train.batch_size,
                 lr=c.train.learning_rate)
  p = lstm_configs.get_config("paper")
  paper = dict(vocab=50_304, embed=p.model.embed_dim, hidden=p.model.hidden_dim, layers=p.model.num_layers,
               seq_len=p.data.seq_len, batch=p.train.batch_size, lr=p.train.learning_rate)  # Pythia's vocabulary
  mid = dict(default, vocab=2048, embed=128, hidden=128, seq_len=64, batch=32)
  return dict(default=default, mid=mid, paper=paper)


def flops_per_token(s):
  """Matmul FLOPs of a training step per token: forward 2 (sum_l 4H(D_in + H) + H V), backward twice that."""
  dims = [s["embed"]] + [s["hidden"]] * s["layers"]
  forward = 2 * (sum(4 * h * (d + h) for d, h in zip(dims[:-1], dims[1:])) + s["hidden"] * s["vocab"])
  return 3 * forward


def matmul_gflops(sizes=(1024, 2048), repeats=20):
  """Best dense float32 jitted matmul rate over a few square sizes (the practical ceiling of this device)."""
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


def seqlira_step(model, lr, tokens_GxBxT, seed=0):
  """A closure running the trainer's step on a stack of G models (single path at G = 1); returns loss_G."""
  G, B = tokens_GxBxT.shape[:2]
  step = trainer.make_step(model, lr, 0.0, BOS, single=G == 1)
  state = dict(params=trainer.init_stack(model, jnp.stack([trainer.model_key(seed, m) for m in range(G)])))
  state["opt"] = trainer.opt_init(state["params"], lr, 0.0)
  tokens, weight_GxB = jnp.asarray(tokens_GxBxT, jnp.int32), jnp.ones((G, B), jnp.float32)

  def run():
    state["params"], state["opt"], loss_G = step(state["params"], state["opt"], tokens, weight_GxB)
    return np.asarray(jax.block_until_ready(loss_G))
  return run


class TorchLSTM(torch.nn.Module):
  """The PyTorch peer: embedding, nn.LSTM, linear head (the same shapes as models.lstm.LSTMLanguageModel)."""

  def __init__(self, s):
    super().__init__()
    self.embed = torch.nn.Embedding(s["vocab"], s["embed"])
    self.lstm = torch.nn.LSTM(s["embed"], s["hidden"], num_layers=s["layers"], batch_first=True)
    self.head = torch.nn.Linear(s["hidden"], s["vocab"])

  def forward(self, inputs_BxT):
    return self.head(self.lstm(self.embed(inputs_BxT))[0])


def torch_step(module, lr, tokens_BxT, threads, logits=lambda module, x: module(x)):
  """A closure running forward, cross-entropy over all T positions after BOS, backward and AdamW in torch."""
  targets_BxT = torch.from_numpy(np.asarray(tokens_BxT, np.int64))
  inputs_BxT = torch.cat([torch.full((len(targets_BxT), 1), BOS), targets_BxT[:, :-1]], dim=1)
  optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=0.0)  # optax.adamw's betas and eps
  module.train()

  def run():
    torch.set_num_threads(threads)
    logits_BxTxV = logits(module, inputs_BxT)
    loss = torch.nn.functional.cross_entropy(logits_BxTxV.flatten(0, 1), targets_BxT.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
  return run


def row(name, job, times, tokens, flops=None, peak=None):
  """Median step time and tokens/s of every contender, and seqlira's ratios to both torch columns."""
  out = dict(size=name, job=job, tokens=tokens, loadavg=os.getloadavg()[0])
  for k, v in times.items():
    out[k] = dict(median_s=float(np.median(v)), min_s=float(np.min(v)), tokens_per_s=tokens / float(np.median(v)),
                  times_s=v)
  if flops:
    out["seqlira_gflops"] = tokens * flops / out["seqlira"]["median_s"] / 1e9
    out["seqlira_pct_matmul"] = 100 * out["seqlira_gflops"] / peak
  out["vs_torch"] = out["seqlira"]["tokens_per_s"] / out["torch"]["tokens_per_s"]
  out["vs_torch1"] = out["seqlira"]["tokens_per_s"] / out["torch1"]["tokens_per_s"]
  tok = lambda k: out[k]["tokens_per_s"]  # noqa: E731
  extra = f"{out['seqlira_pct_matmul']:>5.0f}%" if flops else f"{'':>6}"
  print(f"{name:8} {job:9} {tok('seqlira'):>10.0f} {tok('torch'):>10.0f} {tok('torch1'):>10.0f} "
        f"{out['vs_torch']:>6.2f}x {out['vs_torch1']:>6.2f}x {extra} {out['loadavg']:>5.1f}", flush=True)
  return out


def bench_lstm(name, s, groups, reps, peak):
  model = get_model("lstm", vocab_size=s["vocab"], embed_dim=s["embed"], hidden_dim=s["hidden"],
                    num_layers=s["layers"])
  rng = np.random.default_rng(0)
  rows = []
  for G in groups:
    tokens_GxBxT = rng.integers(1, s["vocab"], size=(G, s["batch"], s["seq_len"]))
    torch.manual_seed(0)
    torch_models = [TorchLSTM(s) for _ in range(G)]  # G models one after another: the PyTorch user's way
    steps = {k: [torch_step(m, s["lr"], t, n) for m, t in zip(torch_models, tokens_GxBxT)]
             for k, n in (("torch", 2), ("torch1", 1))}
    fns = dict(seqlira=seqlira_step(model, s["lr"], tokens_GxBxT),
               torch=lambda: [f() for f in steps["torch"]], torch1=lambda: [f() for f in steps["torch1"]])
    times = interleaved(fns, reps)
    torch.set_num_threads(2)
    rows.append(dict(row(name, f"G={G}", times, tokens_GxBxT.size, flops_per_token(s), peak), G=G, config=s))
  return rows


NEOX_SIZES = ("tiny", "160m")


def bench_neox(name, reps):
  """The fine-tuning step of benchmarks/neox_forward.py (G = 1, same weights) with torch at 2 and 1 threads."""
  from models import hf_convert
  fields, _, (batch, T) = neox_forward.SIZES[name]
  model = get_model("gpt_neox", **fields)
  params = model.init(jax.random.key(0))
  hf = neox_forward.torch_model(model.config, hf_convert.params_to_hf(model.config, params))
  tokens_BxT = np.random.default_rng(1).integers(1, model.config.vocab_size, (batch, T))
  step = trainer.make_step(model, neox_forward.LR, 0.0, BOS, single=True)
  state = dict(params=jax.tree.map(lambda a: jnp.asarray(a)[None], params))
  state["opt"] = trainer.opt_init(state["params"], neox_forward.LR, 0.0)
  tokens_GxBxT, weight_GxB = jnp.asarray(tokens_BxT[None], jnp.int32), jnp.ones((1, batch), jnp.float32)

  def seqlira():
    state["params"], state["opt"], loss_G = step(state["params"], state["opt"], tokens_GxBxT, weight_GxB)
    return float(jax.block_until_ready(loss_G)[0])

  hf_step = torch_step(hf, neox_forward.LR, tokens_BxT, 2, lambda m, x: m(x).logits)  # one model, one optimizer

  def torch_n(threads):
    def run():
      torch.set_num_threads(threads)
      return hf_step()
    return run

  first = abs(seqlira() - torch_n(2)())  # same weights: the first losses agree
  times = interleaved(dict(seqlira=seqlira, torch=torch_n(2), torch1=torch_n(1)), reps)
  torch.set_num_threads(2)
  return dict(row(f"neox-{name}", "finetune", times, batch * T), first_step_loss_abs_diff=first, config=fields,
              batch=batch, T=T)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default="default,mid,paper", help="LSTM sizes, comma-separated: default, mid, paper")
  ap.add_argument("--groups", default="1,2", help="comma-separated group sizes G (G = 1 is the trainer's single path)")
  ap.add_argument("--paper_groups", default="1", help="group sizes at the paper size (G = 2 needs ~20 GiB)")
  ap.add_argument("--neox", default="tiny,160m", help="GPT-NeoX fine-tuning sizes (tiny, 160m) or none")
  ap.add_argument("--reps", type=int, default=10, help="timed rounds (median); 2 at the paper and 160m sizes")
  ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train_throughput_cpu.json"))
  args = ap.parse_args()

  device = jax.devices()[0]
  peak = matmul_gflops()
  print(f"{device.platform}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}); jax "
        f"{jax.__version__}, torch {torch.__version__}; jitted float32 matmul {peak:.1f} GFLOP/s")
  results = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
                 device=f"{device.platform}:{device.device_kind}", cpus=os.cpu_count(), jax=jax.__version__,
                 torch=torch.__version__, matmul_gflops=peak, rows=[])
  print(f"{'size':8} {'job':9} {'seqlira':>10} {'torch':>10} {'torch1':>10} {'/torch':>7} {'/torch1':>7} "
        f"{'%mm':>6} {'load':>5}   (tokens/s)")
  for name in [n for n in args.sizes.split(",") if n]:
    big = name == "paper"
    groups = [int(g) for g in (args.paper_groups if big else args.groups).split(",")]
    results["rows"] += bench_lstm(name, sizes()[name], groups, min(args.reps, 2) if big else args.reps, peak)
  for name in [n for n in args.neox.split(",") if n and n != "none"]:
    results["rows"].append(bench_neox(name, min(args.reps, 3) if name == "160m" else args.reps))
  tmp = args.out + ".tmp"
  with open(tmp, "w") as f:
    json.dump(results, f, indent=2)
  os.replace(tmp, args.out)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
