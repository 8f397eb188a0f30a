"""GPT-NeoX on this device: our Flax model against transformers' PyTorch GPTNeoXForCausalLM, same weights.

  python benchmarks/neox_forward.py                                   # tiny and Pythia-160m sizes, 5 rounds
  python benchmarks/neox_forward.py --sizes tiny --reps 2 --out /tmp/n.json   # smoke test

Two jobs, each timed for both frameworks on the same random weights and tokens:
  * extraction: forward pass + per-token (loss, mu, sigma, top1) (models.token_loss.token_statistics; in torch
    the same log_softmax / gather / p * logp sums / argmax under inference_mode);
  * fine-tuning: one AdamW step (training.trainer.make_step with G = 1 stacked copy; in torch forward,
    cross-entropy, backward, optimizer.step) on BOS-shifted inputs scoring all T positions.
After one warm-up (compile) call of each, Flax and torch alternate for --reps rounds (an untimed call, then a
timed one, each), so that load from other processes on a shared machine hits both alike; median and min seconds
per batch are reported.
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
import transformers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from models import get_model, hf_convert  # noqa: E402
from models.token_loss import token_statistics  # noqa: E402
from training import trainer  # noqa: E402

# name -> GPTNeoXConfig fields, (batch, T) for extraction, (batch, T) for fine-tuning. rotary_pct 0.25 is the default.
SIZES = {
    "tiny": (dict(vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=512), (32, 32), (32, 32)),
    "160m": (dict(vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072), (8, 128), (4, 128)),
}
LR = 1e-4
BOS = 0


def torch_model(config, tensors):
  """transformers' GPTNeoXForCausalLM (default attention backend) holding the same tensors."""
  model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**config.to_hf_dict()))
  state = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
  state["lm_head.weight"] = state.pop("embed_out.weight")
  model.load_state_dict(state, strict=True)
  return model


def torch_statistics(logits_BxTxV, targets_BxT):
  logp_BxTxV = torch.log_softmax(logits_BxTxV.float(), dim=-1)
  loss_BxT = -logp_BxTxV.gather(-1, targets_BxT[..., None])[..., 0]
  p_BxTxV = logp_BxTxV.exp()
  mu_BxT = (p_BxTxV * logp_BxTxV).sum(-1)
  var_BxT = (p_BxTxV * (logp_BxTxV - mu_BxT[..., None]).square()).sum(-1)
  top1_BxT = logits_BxTxV.argmax(-1) == targets_BxT
  return loss_BxT, mu_BxT, var_BxT.clamp_min(0).sqrt(), top1_BxT


def interleaved(fns, reps):
  """{name: [seconds per call]}: one warm-up call of each, then `reps` rounds calling each in turn.

  In each round every framework makes one untimed call before its timed one: a call that directly follows the
  other framework's pays for its thread pool and caches (measured: Flax's 160m step 6.0 s right after a torch
  step, 4.7 s after its own), which would charge one framework for the other's leftovers.
  """
  for fn in fns.values():
    fn()
  times = {name: [] for name in fns}
  for _ in range(reps):
    for name, fn in fns.items():
      fn()
      t = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - t)
  return times


def summary(times, tokens):
  med, best = float(np.median(times)), float(np.min(times))
  return dict(median_s=med, min_s=best, tokens_per_s=tokens / med, times_s=times)


def bench_extract(model, params, hf, batch, T, reps):
  rng = np.random.default_rng(0)
  tokens_BxT = rng.integers(0, model.config.vocab_size, (batch, T + 1))
  inputs_BxT, targets_BxT = tokens_BxT[:, :-1], tokens_BxT[:, 1:]
  fwd = jax.jit(lambda p, x, y: token_statistics(model.apply(p, x), y))
  x, y = jnp.asarray(inputs_BxT, jnp.int32), jnp.asarray(targets_BxT, jnp.int32)
  tx, ty = torch.from_numpy(inputs_BxT), torch.from_numpy(targets_BxT)
  hf.eval()

  def flax():
    return jax.block_until_ready(fwd(params, x, y))

  def pytorch():
    with torch.inference_mode():
      return torch_statistics(hf(tx).logits, ty)

  diffs = [float(np.abs(np.asarray(a, np.float64) - b.numpy()).max()) for a, b in zip(flax(), pytorch())]
  times = interleaved(dict(flax=flax, torch=pytorch), reps)
  return dict(batch=batch, T=T, max_abs_diff=dict(zip(("loss", "mu", "sigma", "top1"), diffs)),
              **{k: summary(v, batch * T) for k, v in times.items()})


def bench_finetune(model, params, hf, batch, T, reps):
  tokens_BxT = np.random.default_rng(1).integers(1, model.config.vocab_size, (batch, T))
  step = trainer.make_step(model, LR, 0.0, BOS, single=True)
  state = dict(params=jax.tree.map(lambda a: jnp.asarray(a)[None], params))  # G = 1 stacked copy
  state["opt"] = jax.jit(jax.vmap(trainer.make_optimizer(LR, 0.0).init))(state["params"])
  tokens_GxBxT, weight_GxB = jnp.asarray(tokens_BxT[None], jnp.int32), jnp.ones((1, batch), jnp.float32)
  targets_BxT = torch.from_numpy(tokens_BxT)
  inputs_BxT = torch.cat([torch.full((batch, 1), BOS), targets_BxT[:, :-1]], dim=1)
  hf.train()  # dropout is 0 in the config, so train mode changes nothing numerically
  optimizer = torch.optim.AdamW(hf.parameters(), lr=LR, weight_decay=0.0)  # optax.adamw's betas and eps

  def flax():
    state["params"], state["opt"], loss_G = step(state["params"], state["opt"], tokens_GxBxT, weight_GxB)
    return float(jax.block_until_ready(loss_G)[0])

  def pytorch():
    logits_BxTxV = hf(inputs_BxT).logits
    loss = torch.nn.functional.cross_entropy(logits_BxTxV.flatten(0, 1), targets_BxT.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()

  first_loss_diff = abs(flax() - pytorch())  # both start from the same weights: the first losses agree
  times = interleaved(dict(flax=flax, torch=pytorch), reps)
  return dict(batch=batch, T=T, first_step_loss_abs_diff=first_loss_diff,
              **{k: summary(v, batch * T) for k, v in times.items()})


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default="tiny,160m", help=f"comma-separated: {', '.join(SIZES)}")
  ap.add_argument("--reps", type=int, default=5, help="timed rounds (each one Flax call and one torch call)")
  ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "neox_forward_cpu.json"))
  args = ap.parse_args()

  device = jax.devices()[0]
  results = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
                 device=f"{device.platform}:{device.device_kind}", cpus=os.cpu_count(), jax=jax.__version__,
                 torch=torch.__version__, transformers=transformers.__version__,
                 torch_threads=torch.get_num_threads(), reps=args.reps, sizes={})
  print(f"{device.platform}, {os.cpu_count()} CPUs; jax {jax.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), transformers {transformers.__version__}")
  print(f"{'size':5} {'job':9} {'B x T':>8} {'flax s':>13} {'torch s':>13} {'flax tok/s':>10} {'torch tok/s':>11} "
        f"{'flax/torch':>10}  check")
  for name in args.sizes.split(","):
    fields, extract_shape, finetune_shape = SIZES[name]
    model = get_model("gpt_neox", **fields)
    params = model.init(jax.random.key(0))
    hf = torch_model(model.config, hf_convert.params_to_hf(model.config, params))
    rows = dict(attn_implementation=hf.config._attn_implementation, config=fields, loadavg_start=os.getloadavg())
    jobs = (("extract", bench_extract, extract_shape), ("finetune", bench_finetune, finetune_shape))
    for job, fn, (batch, T) in jobs:
      r = rows[job] = fn(model, params, hf, batch, T, args.reps)
      f, t = r["flax"], r["torch"]
      r["flax_over_torch"] = f["tokens_per_s"] / t["tokens_per_s"]
      check = (f"max|dloss| {r['max_abs_diff']['loss']:.1e}" if job == "extract"
               else f"|dloss step 1| {r['first_step_loss_abs_diff']:.1e}")
      print(f"{name:5} {job:9} {f'{batch} x {T}':>8} {f['median_s']:>6.3f} ({f['min_s']:.3f}) "
            f"{t['median_s']:>6.3f} ({t['min_s']:.3f}) {f['tokens_per_s']:>10.0f} {t['tokens_per_s']:>11.0f} "
            f"{r['flax_over_torch']:>9.2f}x  {check}", flush=True)
    results["sizes"][name] = dict(rows, loadavg_end=os.getloadavg())  # other processes' CPU use
  print("seconds per batch: median (min); torch attention:",
        ", ".join(f"{n} {r['attn_implementation']}" for n, r in results["sizes"].items()))
  tmp = args.out + ".tmp"
  with open(tmp, "w") as f:
    json.dump(results, f, indent=2)
  os.replace(tmp, args.out)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
