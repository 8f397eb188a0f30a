"""Shadow training on one accelerator: the trainer's step against PyTorch, float32 and bfloat16, fixed G and the group
size rules (auto, fastest).

  python benchmarks/train_device.py                                  # on a GPU machine, within one 10-minute call
  python benchmarks/train_device.py --smoke --out /tmp/train_device.json   # CPU smoke test: tiny shapes, minutes

Three shapes (the CPU smoke test shrinks each):
- lstm_paper: the paper's LSTM (lstm.py:paper with Pythia's vocabulary of 50,304; 192 / 192, 2 layers), batch 64,
  T = 128;
- lstm_cpu: the CPU default LSTM (lstm.py:cpu: vocabulary 512, 64 / 128, 2 layers), batch 16, T = 32;
- neox_160m: GPT-NeoX at Pythia-160m's shape (random weights), fine-tuning batch 8, T = 128.
Rows of each shape, on random tokens read after BOS with every position scored:
- torch: one model in PyTorch on the same device (nn.LSTM, cuDNN on a GPU; transformers' GPTNeoXForCausalLM built
  from a config), AdamW, at float32 and under bf16 autocast;
- seqlira: the trainer's step (training.trainer.make_step, compiled through training.group_plan.compile_step) for
  each G of the shape's grid, at float32 and, where the configs have `train.compute_dtype`, bfloat16; XLA's memory
  estimate and FLOPs beside the measured time;
- seqlira G = auto and G = fastest: group_plan.make_plan on this device (--M = 64 models, the paper's; fastest
  times the step of the groups it compares), the chosen G timed the same way; beside it the plan's own step time
  (group_plan.measure_step, what `train_shadows --plan` prints) and the G = 1 row's time scaled by XLA's FLOPs, each
  against the measured time. The fixed-G rows of the same shape are the hand-measured grid to hold the choice to.
First, before any row allocates device memory in this process, `train_shadows` of the paper LSTM config's first
group (16 models, one epoch, no evaluation) on the Chit-Chat corpus cut into words by a local word-level tokenizer of
the paper's vocabulary size (no hub on the device): the command's wall time and its group's time as it prints it.

Timing: --warmup untimed steps after the compile, then --reps timed steps, each waited for; the median (seqlira's
batches come from the host each step, as the trainer's do; PyTorch's are on the device before its clock starts).
tokens/s count every model's tokens (G x B x T). TF32 is allowed for PyTorch's float32 matmuls, as XLA's default
precision does on GPUs. A row that runs out of memory is recorded as such. Rows stop being started once --budget_s
seconds have passed (each skipped row is listed), so the script ends within one call. The JSON (device, versions,
every row) is rewritten after every row; the table is printed at the end.
"""

import argparse
import datetime
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # PyTorch and JAX share the GPU
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from experiments.configs import lstm as lstm_configs  # noqa: E402
from models import get_model  # noqa: E402
from training import group_plan  # noqa: E402
from training import trainer  # noqa: E402

BOS = 0

SHAPES = {
    "lstm_paper": dict(family="lstm", fields=dict(vocab_size=50_304, embed_dim=192, hidden_dim=192, num_layers=2),
                       batch=64, T=128, lr=1e-3, grid=(1, 4, 8, 16)),
    "lstm_cpu": dict(family="lstm", fields=dict(vocab_size=512, embed_dim=64, hidden_dim=128, num_layers=2),
                     batch=16, T=32, lr=3e-3, grid=(1, 16, 64)),
    "neox_160m": dict(family="gpt_neox", fields=dict(vocab_size=50_304, hidden_size=768, num_hidden_layers=12,
                                                     num_attention_heads=12, intermediate_size=3072),
                      batch=8, T=128, lr=1e-4, grid=(1, 2, 4)),
}
SMOKE = {
    "lstm_paper": dict(SHAPES["lstm_paper"], fields=dict(vocab_size=300, embed_dim=16, hidden_dim=32, num_layers=2),
                       batch=8, T=12, grid=(1, 2)),
    "lstm_cpu": dict(SHAPES["lstm_cpu"], fields=dict(vocab_size=128, embed_dim=8, hidden_dim=16, num_layers=2),
                     batch=4, T=8, grid=(1, 2)),
    "neox_160m": dict(SHAPES["neox_160m"], fields=dict(vocab_size=256, hidden_size=32, num_hidden_layers=2,
                                                       num_attention_heads=4, intermediate_size=64),
                      batch=4, T=16, grid=(1, 2)),
}


def has_compute_dtype():
  """Whether the configs carry train.compute_dtype (bfloat16 rows need it)."""
  return "compute_dtype" in lstm_configs.get_config("paper").train


def free():
  gc.collect()
  try:
    import torch
    if torch.cuda.is_available():
      torch.cuda.empty_cache()
  except ImportError:
    pass


# ---- seqlira ---------------------------------------------------------------------------------------------------

def time_compiled(step, model, G, s, tokens_rng, warmup, reps):
  """Median seconds of the compiled trainer step on a fresh stack of G models and random tokens."""
  params = trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), G))
  opt_state = trainer.opt_init(params, s["lr"], 0.0)
  weight = np.ones((G, s["batch"]), np.float32)
  vocab = s["fields"]["vocab_size"]
  times = []
  for i in range(warmup + reps):
    tokens = tokens_rng.integers(1, vocab, (G, s["batch"], s["T"])).astype(np.int32)
    start = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, tokens, weight)
    jax.block_until_ready(loss)
    if i >= warmup:
      times.append(time.perf_counter() - start)
  return float(np.median(times))


def plan_shapes(s, dtype):
  return group_plan.Shapes((s["T"],), "int32", s["batch"], 256, s["lr"], 0.0, bos_id=BOS, compute_dtype=dtype)


def seqlira_row(name, s, model, G, dtype, args, compiled=None):
  shapes = plan_shapes(s, dtype)
  compiled = compiled or group_plan.compile_step(model, G, shapes)
  seconds = time_compiled(compiled, model, G, s, np.random.default_rng(0), args.warmup, args.reps)
  flops = group_plan.program_flops(compiled)
  tokens = G * s["batch"] * s["T"]
  return dict(shape=name, framework="seqlira", dtype=dtype, G=G, step_s=seconds, tokens_per_s=tokens / seconds,
              tflops_per_s=flops / seconds / 1e12, flops=flops, memory_bytes=group_plan.program_bytes(compiled))


def plan_row(name, s, model, dtype, args, g1_row, rule):
  shapes = plan_shapes(s, dtype)
  examples = np.random.default_rng(1).integers(1, s["fields"]["vocab_size"], (4096, s["T"])).astype(np.int32)
  start = time.perf_counter()
  plan = group_plan.make_plan(model, args.M, shapes, 256, examples_ExT=examples if rule == "fastest" else None)
  plan_s = time.perf_counter() - start
  G = plan.chosen
  estimate = plan.candidate(G).step_seconds or group_plan.measure_step(model, G, shapes, examples,
                                                                       compiled=plan.compiled.get(G))
  row = seqlira_row(name, s, model, G, dtype, args, compiled=plan.compiled.get(G))
  row.update(G_label=rule, plan_seconds=plan_s, plan=plan.record(), plan_step_s=estimate,
             plan_step_rel_error=estimate / row["step_s"] - 1)
  if g1_row is not None and g1_row.get("flops"):
    scaled = g1_row["step_s"] * row["flops"] / g1_row["flops"]
    row.update(flops_scaled_step_s=scaled, flops_scaled_rel_error=scaled / row["step_s"] - 1)
  return row


# ---- PyTorch ---------------------------------------------------------------------------------------------------

def torch_row(name, s, dtype, args):
  import torch
  device = "cuda" if torch.cuda.is_available() else "cpu"
  torch.backends.cuda.matmul.allow_tf32 = True
  torch.backends.cudnn.allow_tf32 = True
  torch.manual_seed(0)
  f = s["fields"]
  if s["family"] == "lstm":  # the CPU benchmark's PyTorch peer (embedding, nn.LSTM, linear head)
    from benchmarks.train_throughput import TorchLSTM
    module = TorchLSTM(dict(vocab=f["vocab_size"], embed=f["embed_dim"], hidden=f["hidden_dim"],
                            layers=f["num_layers"]))
    logits = lambda m, x: m(x)  # noqa: E731
  else:
    import transformers
    config = get_model("gpt_neox", **f).config
    module = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**config.to_hf_dict()))
    logits = lambda m, x: m(x).logits  # noqa: E731
  module = module.to(device).train()
  optimizer = torch.optim.AdamW(module.parameters(), lr=s["lr"], weight_decay=0.0)
  rng = np.random.default_rng(0)
  autocast = (torch.autocast(device, dtype=torch.bfloat16) if dtype == "bfloat16" else torch.autocast(device,
                                                                                                       enabled=False))
  times = []
  for i in range(args.warmup + args.reps):
    targets = torch.from_numpy(rng.integers(1, f["vocab_size"], (s["batch"], s["T"]))).to(device)
    inputs = torch.cat([torch.full((s["batch"], 1), BOS, device=device), targets[:, :-1]], dim=1)
    if device == "cuda":
      torch.cuda.synchronize()
    start = time.perf_counter()
    with autocast:
      out = logits(module, inputs)
    loss = torch.nn.functional.cross_entropy(out.float().flatten(0, 1), targets.flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loss.item()
    if i >= args.warmup:
      times.append(time.perf_counter() - start)
  seconds = float(np.median(times))
  del module, optimizer
  free()
  return dict(shape=name, framework="torch", dtype=dtype, G=1, step_s=seconds,
              tokens_per_s=s["batch"] * s["T"] / seconds, device=device)


# ---- train_shadows ---------------------------------------------------------------------------------------------

def word_tokenizer(path, vocab_size):
  """A word-level tokenizer.json of exactly vocab_size ids: BOS, <unk>, the corpus's words, then filler words."""
  import tokenizers
  from tokenizers import models as tok_models
  from tokenizers import pre_tokenizers

  from training import data as data_lib
  words = {}
  for conversation in data_lib.load_chitchat():
    for utterance in conversation:
      for w in re.findall(r"\w+|[^\w\s]", utterance):
        words.setdefault(w, None)
        if len(words) >= vocab_size - 2:
          break
  vocab = {data_lib.BOS: 0, "<unk>": 1}
  for w in list(words)[:vocab_size - 2]:
    vocab.setdefault(w, len(vocab))
  filler = 0
  while len(vocab) < vocab_size:
    vocab.setdefault(f"<w{filler}>", len(vocab))
    filler += 1
  tokenizer = tokenizers.Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  tokenizer.save(str(path))


def train_shadows_row(args, budget_left):
  """train_shadows of lstm.py:paper's first group (or lstm.py:tiny's with --smoke) on word-level Chit-Chat."""
  config, G, vocab = ("lstm.py:tiny", 2, 300) if args.smoke else ("lstm.py:paper", 16, 50_304)
  with tempfile.TemporaryDirectory() as tmp:
    word_tokenizer(Path(tmp) / "words.json", vocab)
    cmd = [sys.executable, "-m", "experiments.train_shadows", f"--config=experiments/configs/{config}",
           "--config.data.corpus=chitchat", f"--config.tokenizer.name={tmp}/words.json",
           f"--config.shadow.num_models={G}", f"--config.shadow.group_size={G}", "--config.train.epochs=1",
           f"--run_dir={tmp}/run", "--noevaluate", "--noprogress"]
    start = time.perf_counter()
    try:
      proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(budget_left, 30))
    except subprocess.TimeoutExpired:
      return dict(shape="lstm_paper", framework="train_shadows", G=G, note="stopped by the time budget",
                  command=" ".join(cmd[1:]))
    wall = time.perf_counter() - start
  group = re.search(r"group 0 \(1 of 1\): models 0-\d+ finished in ([0-9.]+) s", proc.stdout)
  data = re.search(r"data: (\d+) training sequences of (\d+) tokens, (\d+) ", proc.stdout)
  row = dict(shape="lstm_paper", framework="train_shadows", dtype="float32", G=G, wall_s=wall,
             returncode=proc.returncode, group_s=float(group.group(1)) if group else None, command=" ".join(cmd[1:]))
  if data:
    row.update(train_sequences=int(data.group(1)), T=int(data.group(2)), canaries=int(data.group(3)))
  if proc.returncode:
    row["stderr_tail"] = proc.stderr[-2000:]
  return row


# ---- the run ---------------------------------------------------------------------------------------------------

def fmt(row):
  if row.get("note"):
    return f"{row['shape']:11} {row['framework']:13} {row.get('dtype', ''):9} {str(row.get('G', '')):>8}  {row['note']}"
  if row["framework"] == "train_shadows":
    group = f"{row['group_s']:.1f} s" if row.get("group_s") is not None else "n/a"
    return (f"{row['shape']:11} {row['framework']:13} {row['dtype']:9} {row['G']:>8}  command {row['wall_s']:.1f} s, "
            f"group 0 {group} (exit {row['returncode']})" + (
                f": {row['stderr_tail'].strip().splitlines()[-1][:160]}" if row.get("stderr_tail", "").strip() else ""))
  G = f"{row['G_label']}={row['G']}" if row.get("G_label") else str(row["G"])
  extra = ""
  if "plan_step_s" in row:
    extra = f"  plan {row['plan_step_s'] * 1e3:.1f} ms ({row['plan_step_rel_error']:+.0%})"
    if "flops_scaled_step_s" in row:
      extra += f", FLOPs from G=1 {row['flops_scaled_step_s'] * 1e3:.1f} ms ({row['flops_scaled_rel_error']:+.0%})"
  tf = f"{row['tflops_per_s']:7.2f}" if "tflops_per_s" in row else f"{'':>7}"
  return (f"{row['shape']:11} {row['framework']:13} {row['dtype']:9} {G:>8} {row['step_s'] * 1e3:9.2f} "
          f"{row['tokens_per_s']:12.0f} {tf}{extra}")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--shapes", default="lstm_paper,neox_160m,lstm_cpu", help="comma-separated shapes, in run order")
  ap.add_argument("--smoke", action="store_true", help="tiny shapes and lstm.py:tiny (a CPU check of the script)")
  ap.add_argument("--M", type=int, default=64, help="models of a run: G = auto's candidates go up to it (smoke: 4)")
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--budget_s", type=float, default=500, help="start no row after this many seconds")
  ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated seqlira compute dtypes")
  ap.add_argument("--grid", default="", help="comma-separated fixed G for every shape of the call, in place of each "
                  "shape's own grid (e.g. 4,8); 'none' for no fixed G")
  ap.add_argument("--rules", default="auto,fastest", help="comma-separated group size rules to plan and time ('' for "
                  "none)")
  ap.add_argument("--noauto", action="store_true", help="skip the group size rules' rows (as --rules '')")
  ap.add_argument("--notorch", action="store_true", help="skip the PyTorch rows")
  ap.add_argument("--notrain_shadows", action="store_true", help="skip the train_shadows row")
  ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "train_device.json"))
  args = ap.parse_args()
  shapes = SMOKE if args.smoke else SHAPES
  if args.smoke:
    args.reps, args.warmup, args.M = min(args.reps, 3), min(args.warmup, 1), min(args.M, 4)
  device = jax.devices()[0]
  dtypes = [d for d in args.dtypes.split(",") if d == "float32" or has_compute_dtype()]
  results = dict(date=datetime.date.today().isoformat(), device=f"{device.platform}:{device.device_kind}",
                 devices=jax.device_count(), machine=platform.processor() or platform.machine(), jax=jax.__version__,
                 smoke=args.smoke, rows=[], skipped=[], notes=[])
  try:
    import torch
    results["torch"] = torch.__version__
  except ImportError:
    args.notorch = True
    results["notes"].append("torch not installed: no PyTorch rows")
  if "bfloat16" in args.dtypes and not has_compute_dtype():
    results["notes"].append("the configs have no train.compute_dtype: no bfloat16 rows")
  print(f"{results['device']}; jax {jax.__version__}, torch {results.get('torch', '-')}", flush=True)
  start = time.perf_counter()

  def save():
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
      json.dump(results, f, indent=2)
    os.replace(tmp, args.out)

  def run(label, fn):
    if time.perf_counter() - start > args.budget_s:
      results["skipped"].append(label)
      print(f"skipped (time budget): {label}", flush=True)
      save()
      return None
    try:
      row = fn()
    except Exception as e:  # noqa: BLE001 - an out-of-memory row is a result; anything else too, with its message
      row = dict(zip(("shape", "framework", "dtype", "G"), label.split()), note=(
          "out of memory" if group_plan.out_of_memory(e)
          else f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"))
    free()
    results["rows"].append(row)
    print(fmt(row), flush=True)
    save()
    return row

  print(f"{'shape':11} {'framework':13} {'dtype':9} {'G':>8} {'step ms':>9} {'tokens/s':>12} {'TFLOP/s':>7}")
  for name in [n for n in args.shapes.split(",") if n]:
    s = shapes[name]
    if name == "lstm_paper" and not args.notrain_shadows:  # first: a child process gets the device memory this
      # process's allocator keeps once rows have run (XLA's allocator does not hand memory back)
      run("lstm_paper train_shadows float32 16",
          lambda: train_shadows_row(args, args.budget_s - (time.perf_counter() - start)))
    if not args.notorch:
      for dtype in ("float32", "bfloat16"):
        run(f"{name} torch {dtype} 1", lambda: torch_row(name, s, dtype, args))
    model = get_model(s["family"], **s["fields"])
    for dtype in dtypes:
      g1 = None
      grid = [] if args.grid == "none" else [int(g) for g in args.grid.split(",")] if args.grid else s["grid"]
      for G in grid:
        row = run(f"{name} seqlira {dtype} {G}", lambda: seqlira_row(name, s, model, G, dtype, args))
        g1 = row if G == 1 and row is not None and "step_s" in row else g1
      for rule in [r for r in args.rules.split(",") if r and not args.noauto]:
        run(f"{name} seqlira {dtype} {rule}", lambda: plan_row(name, s, model, dtype, args, g1, rule))
  results["seconds"] = time.perf_counter() - start
  save()
  print(f"\n{'shape':11} {'framework':13} {'dtype':9} {'G':>8} {'step ms':>9} {'tokens/s':>12} {'TFLOP/s':>7}")
  for row in results["rows"]:
    print(fmt(row))
  for note in results["notes"]:
    print(f"note: {note}")
  if results["skipped"]:
    print(f"skipped (time budget): {', '.join(results['skipped'])}")
  print(f"wrote {args.out} ({results['seconds']:.0f} s)")


if __name__ == "__main__":
  main()
