"""LoRA shadow copies (models/lora.py) against PyTorch + PEFT: training tokens/s on the same shape, and the memory a
group adds per copy.

  python benchmarks/lora_throughput.py                                  # CPU: tiny, tiny_llama; GPU: gpt2, llama1b
  python benchmarks/lora_throughput.py --sizes tiny --groups 1,2,4,8,16 --unflattened 1,2,4 --reps 10
  python benchmarks/lora_throughput.py --sizes gpt2 --groups 1,2 --unflattened 1 --reps 3 \
      --out benchmarks/results/lora_throughput_cpu_gpt2.json           # GPT-2 small on a CPU: ~10 minutes
  python benchmarks/lora_throughput.py --sizes gpt2 --groups plan       # a GPU: powers of two up to --plan's G
  python benchmarks/lora_throughput.py --memory                         # compiled memory of gpt2 and llama1b
  python benchmarks/lora_throughput.py --sizes tiny --groups 1,2 --reps 2 --out /tmp/l.json   # smoke test

Throughput. Both sides hold the same random base: transformers builds the model from a random config, writes it with
save_pretrained, and models.hf_convert.from_pretrained reads the folder back; both train on the same random tokens
read after BOS, all T positions scored. Contenders:
  * ours, G = each of --groups: the trainer's step (training.trainer.make_step; G = 1 is its unvmapped path) on G
    LoRA copies (models.lora.functional: the adapters stacked, the base passed once as `frozen`); tokens/s count
    every copy's tokens, G x B x T;
  * peft: one transformers model wrapped by peft.get_peft_model (the same rank, alpha and layers, no dropout),
    forward, cross-entropy, backward and torch.optim.AdamW over the adapters only (the trainer's lr, betas, eps and
    weight decay); on a CPU with 2 threads (`peft`) and 1 (`peft1`: on a shared 2-core machine a 2-thread torch
    waits on its busy sibling), on a GPU on cuda with TF32 matmuls allowed (as XLA's default precision does);
  * with --unflattened G,...: ours at those G once more, with LoRALinear's low-rank product on the [B, T, I]
    activations as they come instead of on their rows flattened to [B x T, I] (models/lora.py; BENCHMARKS.md says
    why it flattens them).
The ratio of a G is ours at G over peft: G copies trained at once against one PEFT model (per model, the issue's
measure); the best G is the one of the highest ratio. Timing as benchmarks/train_throughput.py: one warm-up call of
each, then --reps rounds in which every contender makes an untimed call and a timed one (neox_forward.interleaved);
median seconds per step. Before timing, the first step's loss of copy 0 is checked against PEFT's (fresh adapters
have B = 0, so both are the base's loss on the same tokens).

Memory (--memory). The trainer's step compiled, never run, on abstract arguments (training.group_plan.compile_step,
what `train_shadows --plan` compiles), for G = 1, 2, 4: LoRA copies of an abstract base (nnx.eval_shape; nothing is
allocated) and whole copies (the freshly initialised family: the same program as copies of a checkpoint). XLA's
memory estimate of each (group_plan.program_bytes), its share per copy, and what each added copy adds,
(bytes(G2) - bytes(G1)) / (G2 - G1), beside the adapters' state (adapters + two AdamW moments) and the base's.

Sizes: tiny (GPT-2, vocab 512, 128 wide, 2 layers, 4 heads; batch 16, T 32: the CPU's), tiny_llama (Llama at the
same widths, 2 key-value heads, MLP 512), gpt2 (GPT-2 small, 124M; batch 16, T 128), llama1b (TinyLlama-1.1B's
shape: 22 layers of 2,048, 32 query and 4 key-value heads, vocab 32,000; batch 16, T 128); memory at batch 2, T 128
(T 32 for the tiny ones). The Llama sizes are skipped, with a message, where models.hf_convert has no llama
conversion.
"""

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # PyTorch and JAX share a GPU
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.neox_forward import interleaved  # noqa: E402  (untimed call before each timed one)
from benchmarks.train_throughput import matmul_gflops  # noqa: E402
import models  # noqa: E402
from models import hf_convert, lora  # noqa: E402
from training import adamw, group_plan, trainer  # noqa: E402

BOS = 0
LR, WD = 1e-3, 1e-4


@dataclasses.dataclass(frozen=True)
class Size:
  model_type: str  # hf_convert's architecture
  hf_config: str  # transformers' config and model classes
  hf_model: str
  fields: dict  # the transformers config's fields
  peft_targets: tuple  # PEFT's target_modules for the layers our "attention" target selects
  fan_in_fan_out: bool  # GPT-2's Conv1D weights are [in, out]
  batch: int
  T: int
  memory: tuple = (2, 128)  # (batch, T) of the --memory compiles


_GPT2 = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=BOS, eos_token_id=BOS)
_GPT2_TARGETS = ("attn.c_attn", "attn.c_proj")
_LLAMA = dict(rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, attention_dropout=0.0,
              bos_token_id=BOS, eos_token_id=BOS)
_LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
SIZES = {
    "tiny": Size("gpt2", "GPT2Config", "GPT2LMHeadModel",
                 dict(vocab_size=512, n_embd=128, n_layer=2, n_head=4, n_positions=64, **_GPT2),
                 _GPT2_TARGETS, True, 16, 32, memory=(2, 32)),
    "tiny_llama": Size("llama", "LlamaConfig", "LlamaForCausalLM",
                       dict(vocab_size=512, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=512, max_position_embeddings=64, **_LLAMA),
                       _LLAMA_TARGETS, False, 16, 32, memory=(2, 32)),
    "gpt2": Size("gpt2", "GPT2Config", "GPT2LMHeadModel", dict(_GPT2), _GPT2_TARGETS, True, 16, 128),
    "llama1b": Size("llama", "LlamaConfig", "LlamaForCausalLM",
                    dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                         num_key_value_heads=4, intermediate_size=5632, max_position_embeddings=2048, **_LLAMA),
                    _LLAMA_TARGETS, False, 16, 128),
}


def available(name):
  """Whether models/hf_convert.py converts the size's architecture (llama: once the family exists)."""
  ok = SIZES[name].model_type in hf_convert.ARCHITECTURES
  if not ok:
    print(f"{name}: skipped, models.hf_convert has no {SIZES[name].model_type!r} conversion (no such family yet)")
  return ok


def hf_config(size):
  return getattr(transformers, size.hf_config)(**size.fields)


def settings(args):
  return lora.LoRASettings(args.rank, args.alpha, ("attention",))


def peft_model(size, args, folder, device):
  """(our base module, the PEFT model) holding the same random weights: transformers' draw, saved and read back."""
  torch.manual_seed(0)
  hf = getattr(transformers, size.hf_model)(hf_config(size))
  hf.save_pretrained(folder)
  base = hf_convert.from_pretrained(folder)
  import peft
  config = peft.LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=list(size.peft_targets),
                           lora_dropout=0.0, fan_in_fan_out=size.fan_in_fan_out)
  return base, peft.get_peft_model(hf, config).to(device)


def ours_step(model, G, tokens_GxBxT, frozen):
  """A closure running the trainer's step on G LoRA copies; returns loss_G."""
  step = trainer.make_step(model, LR, WD, BOS, single=G == 1)
  state = dict(params=trainer.init_stack(model, jnp.stack([trainer.model_key(0, m) for m in range(G)])))
  state["opt"] = trainer.opt_init(state["params"], LR, WD)
  tokens, weight_GxB = jnp.asarray(tokens_GxBxT[:G], jnp.int32), jnp.ones(tokens_GxBxT[:G].shape[:2], jnp.float32)

  def run():
    state["params"], state["opt"], loss_G = step(state["params"], state["opt"], tokens, weight_GxB, frozen=frozen)
    return np.asarray(jax.block_until_ready(loss_G))
  return run


def peft_step(model, tokens_BxT, device, threads=None):
  """A closure running forward, cross-entropy over all T positions after BOS, backward and AdamW on the adapters."""
  targets_BxT = torch.from_numpy(np.asarray(tokens_BxT, np.int64)).to(device)
  inputs_BxT = torch.cat([torch.full((len(targets_BxT), 1), BOS, device=device), targets_BxT[:, :-1]], dim=1)
  trainable = [p for p in model.parameters() if p.requires_grad]
  optimizer = torch.optim.AdamW(trainable, lr=LR, betas=(adamw.B1, adamw.B2), eps=adamw.EPS, weight_decay=WD)
  model.train()  # every dropout is 0

  def run():
    if threads:
      torch.set_num_threads(threads)
    logits_BxTxV = model(input_ids=inputs_BxT).logits
    loss = torch.nn.functional.cross_entropy(logits_BxTxV.flatten(0, 1).float(), targets_BxT.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()  # waits for the device
  return run


def plan_groups(model, size, most=64):
  """Powers of two up to the G `train_shadows --plan` chooses for `most` copies on this device (and that G)."""
  shapes = group_plan.Shapes((size.T,), "int32", size.batch, size.batch, LR, WD, BOS)
  chosen = group_plan.make_plan(model, most, shapes, size.batch).chosen
  print(f"  --plan's G for {most} copies: {chosen}")
  return sorted({2 ** k for k in range(chosen.bit_length()) if 2 ** k <= chosen} | {chosen})


def _unflattened_call(self, x_BxTxI):
  """LoRALinear.__call__ with the low-rank product on the [B, T, I] activations as they come, not on their rows
  flattened to [B x T, I]: the alternative --unflattened times."""
  y_BxTxO = self.base(x_BxTxI)
  dtype = y_BxTxO.dtype
  a_IxR, b_RxO = self.lora_a.get_value().astype(dtype), self.lora_b.get_value().astype(dtype)
  return y_BxTxO + ((x_BxTxI.astype(dtype) @ a_IxR) @ b_RxO) * jnp.asarray(self.scale, dtype)


@contextlib.contextmanager
def unflattened():
  """LoRALinear computing as `_unflattened_call` while a step is traced."""
  flattened = lora.LoRALinear.__call__
  lora.LoRALinear.__call__ = _unflattened_call
  try:
    yield
  finally:
    lora.LoRALinear.__call__ = flattened


def summary(t, tokens, peers=None):
  med = float(np.median(t))
  out = dict(median_s=med, min_s=float(np.min(t)), tokens_per_s=tokens / med, times_s=t)
  return out | {f"vs_{k}": out["tokens_per_s"] / v["tokens_per_s"] for k, v in (peers or {}).items()}


def bench(name, args, gpu):
  size = SIZES[name]
  device = "cuda" if gpu else "cpu"
  with tempfile.TemporaryDirectory() as folder:
    base, tuned = peft_model(size, args, folder, device)
  model = lora.functional(size.model_type, base.config, base, settings(args))
  del base
  frozen = trainer.put_frozen(model)
  groups = (plan_groups(model, size) if args.groups == "plan" else [int(g) for g in args.groups.split(",")])
  before = [int(g) for g in args.unflattened.split(",") if g]
  tokens_GxBxT = np.random.default_rng(1).integers(1, size.fields.get("vocab_size", 50257),
                                                   (max(groups + before), size.batch, size.T))
  fns = {f"G={G}": ours_step(model, G, tokens_GxBxT, frozen) for G in groups}
  losses = {k: fn()[0] for k, fn in fns.items()}  # the first step's (compiled here)
  for G in before:
    twin = dataclasses.replace(model, init=lambda key, init=model.init: init(key))  # a step compiled of its own
    with unflattened():
      fns[f"G={G} unflattened"] = ours_step(twin, G, tokens_GxBxT, frozen)
      losses[f"G={G} unflattened"] = fns[f"G={G} unflattened"]()[0]  # traced now
  theirs = {"peft": peft_step(tuned, tokens_GxBxT[0], device)} if gpu else {
      "peft": peft_step(tuned, tokens_GxBxT[0], device, 2), "peft1": peft_step(tuned, tokens_GxBxT[0], device, 1)}
  first = next(iter(theirs.values()))()
  diffs = {k: abs(float(v) - first) for k, v in losses.items()}  # copy 0 reads peft's tokens; B = 0 on both
  times = interleaved({**fns, **theirs}, args.reps)
  if not gpu:
    torch.set_num_threads(2)
  BT = size.batch * size.T
  peft_rows = {k: summary(times[k], BT) for k in theirs}
  out = dict(size=name, config=size.fields, batch=size.batch, T=size.T, rank=args.rank, alpha=args.alpha,
             loadavg=os.getloadavg()[0], first_step_loss_abs_diff=max(diffs.values()), peft=peft_rows,
             ours={G: summary(times[f"G={G}"], G * BT, peft_rows) for G in groups},
             unflattened={G: summary(times[f"G={G} unflattened"], G * BT, peft_rows) for G in before})
  out["best_G"] = max(groups, key=lambda G: out["ours"][G]["tokens_per_s"])
  print(f"{name}: B x T = {size.batch} x {size.T}, rank {args.rank}; |first-step loss - peft's| "
        f"{out['first_step_loss_abs_diff']:.1e}; load {out['loadavg']:.1f}")
  print("  " + "  ".join(f"{k} {v['tokens_per_s']:,.0f} tokens/s ({v['median_s'] * 1e3:.1f} ms)"
                         for k, v in peft_rows.items()))
  for label, rows in (("", out["ours"]), (" unflattened", out["unflattened"])):
    for G, r in rows.items():
      vs = "  ".join(f"{r[f'vs_{k}']:.2f}x {k}" for k in peft_rows)
      best = "  <- best" if G == out["best_G"] and not label else ""
      print(f"  G={G:<3}{label:12} {r['tokens_per_s']:>10,.0f} tokens/s ({r['median_s'] * 1e3:7.1f} ms)  {vs}{best}",
            flush=True)
  return out


def abstract_models(name, args):
  """(LoRA copies, whole copies) of the size's architecture, nothing allocated: an abstract base module."""
  size = SIZES[name]
  config = hf_convert.config_from_hf_dict(hf_config(size).to_dict())
  cls = hf_convert.architecture(config).module_cls
  make = lambda rngs: cls(config, rngs=rngs)  # noqa: E731
  whole = models.functional(size.model_type, config, make)
  return lora.functional(size.model_type, config, nnx.eval_shape(lambda: make(nnx.Rngs(0))), settings(args)), whole


def nbytes(tree):
  return sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def memory(name, args, groups=(1, 2, 4)):
  size = SIZES[name]
  batch, T = size.memory
  shapes = group_plan.Shapes((T,), "int32", batch, batch, LR, WD, BOS)
  lora_copies, whole = abstract_models(name, args)
  base_bytes = nbytes(jax.eval_shape(whole.init, jax.random.PRNGKey(0)))
  adapter_bytes = nbytes(jax.eval_shape(lora_copies.init, jax.random.PRNGKey(0)))
  out = dict(size=name, batch=batch, T=T, rank=args.rank, base_bytes=base_bytes, adapter_bytes=adapter_bytes,
             adapter_state_bytes=3 * adapter_bytes, whole_state_bytes=3 * base_bytes, rows={})
  print(f"{name}: batch {batch} x T {T}; base {base_bytes / 2**20:,.1f} MiB, one copy's adapters "
        f"{adapter_bytes / 2**20:.2f} MiB (with AdamW's moments {3 * adapter_bytes / 2**20:.2f} MiB)")
  for kind, model in (("lora", lora_copies), ("whole", whole)):
    rows = out["rows"][kind] = {}
    for G in groups:
      compiled = group_plan.compile_step(model, G, shapes)
      m = compiled.memory_analysis()
      rows[G] = dict(bytes=group_plan.program_bytes(compiled),
                     argument=int(m.argument_size_in_bytes), output=int(m.output_size_in_bytes),
                     alias=int(m.alias_size_in_bytes), temp=int(m.temp_size_in_bytes))
      rows[G]["per_model"] = rows[G]["bytes"] / G
      print(f"  {kind:5} G={G}: {rows[G]['bytes'] / 2**20:9,.1f} MiB, per copy {rows[G]['per_model'] / 2**20:9,.1f} "
            f"MiB (temporaries {rows[G]['temp'] / 2**20:,.1f} MiB)", flush=True)
    for g1, g2 in zip(groups[:-1], groups[1:]):
      added = {k: (rows[g2][k] - rows[g1][k]) / (g2 - g1) for k in ("bytes", "argument", "temp")}
      rows[f"added_{g1}_{g2}"] = added
      print(f"  {kind:5} added per copy, G {g1} -> {g2}: {added['bytes'] / 2**20:,.1f} MiB (arguments "
            f"{added['argument'] / 2**20:,.1f}, temporaries {added['temp'] / 2**20:,.1f})")
  return out


def write(results, path):
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(results, f, indent=2)
  os.replace(tmp, path)
  print(f"wrote {path}")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default=None, help=f"comma-separated: {', '.join(SIZES)}; default tiny,tiny_llama on a "
                  "CPU, gpt2,llama1b on a GPU (and for --memory)")
  ap.add_argument("--groups", default="1,2,4,8,16",
                  help="comma-separated G of our LoRA copies, or `plan`: powers of two up to --plan's G for 64")
  ap.add_argument("--unflattened", default="", help="comma-separated G also timed with LoRALinear's low-rank "
                  "product on the [B, T, I] activations, not on their rows flattened")
  ap.add_argument("--rank", type=int, default=8)
  ap.add_argument("--alpha", type=float, default=16.0)
  ap.add_argument("--reps", type=int, default=10, help="timed rounds (median)")
  ap.add_argument("--memory", action="store_true", help="the compiled step's memory for G = 1, 2, 4 instead")
  ap.add_argument("--out", default=None, help="default benchmarks/results/lora_{throughput,memory}_<platform>.json")
  args = ap.parse_args()

  device = jax.devices()[0]
  gpu = device.platform == "gpu"
  names = [n for n in (args.sizes or ("gpt2,llama1b" if gpu or args.memory else "tiny,tiny_llama")).split(",") if n]
  names = [n for n in names if available(n)]
  results = dict(date=datetime.date.today().isoformat(), machine=platform.processor() or platform.machine(),
                 device=f"{device.platform}:{device.device_kind}", cpus=os.cpu_count(), jax=jax.__version__,
                 torch=torch.__version__, transformers=transformers.__version__, lr=LR, weight_decay=WD)
  job = "memory" if args.memory else "throughput"
  out = args.out or str(ROOT / "benchmarks" / "results" / f"lora_{job}_{device.platform}.json")
  if args.memory:
    results["sizes"] = [memory(n, args) for n in names]
    return write(results, out)
  if gpu:
    torch.backends.cuda.matmul.allow_tf32 = True
  results["matmul_gflops"] = matmul_gflops()
  import peft
  results["peft"] = peft.__version__
  print(f"{device.platform} ({device.device_kind}), {os.cpu_count()} CPUs; jax {jax.__version__}, torch "
        f"{torch.__version__}, peft {peft.__version__}; jitted float32 matmul {results['matmul_gflops']:.0f} GFLOP/s")
  results["sizes"] = []
  for n in names:
    results["sizes"].append(bench(n, args, gpu))
    write(results, out)


if __name__ == "__main__":
  main()
