"""PixelCNN++ training step of G models: the trainer's vmapped group step vs one model at a time, against PyTorch.

  python benchmarks/pixelcnn_speed.py                                   # all sizes, G = 1, 2, 4
  python benchmarks/pixelcnn_speed.py --sizes digits_small --groups 1,2 --reps 3 --out /tmp/p.json   # smoke test
  python benchmarks/pixelcnn_speed.py --pieces --sizes cifar_small      # forward / loss / grad / step, JAX vs torch
  python benchmarks/pixelcnn_speed.py --memory                          # paper config: params, AdamW, activations

One training step = the per-pixel loss (models/pixelcnn_pp.py, dropout on), its gradient and an AdamW update, run by
the trainer's own code: `training.trainer.make_step` (weighted mean over the batch, no update on an all-padding batch,
params and optimiser state donated), `trainer.init_stack`, `trainer.opt_init` and the trainer's dropout keys
(`trainer.dropout_key_data`). Per group of G models it times
  vmap    make_step(single=False): one jit(vmap(step)) over the stacked model axis (grouped convolutions),
  single  G calls of make_step(single=True) on separate parameters (what a run with group_size 1 does),
  torch   the PyTorch twin (benchmarks/pixelcnn_torch.py), G models one after another, torch.optim.AdamW,
          torch.set_num_threads(2) ("torch"), and the same with 1 thread ("torch1"), a second peer because under
          a load above the core count torch's 2 OpenMP threads wait on each other and lose several-fold;
all on the same random images. Timing is interleaved: every repetition times each method once in turn (a block of
calls long enough to last ~0.3 s), after a compile / warm-up call that is not timed; the median over repetitions is
reported, with the load average, since the machine is shared.
Letters: G models, B batch, H height, W width, C channels, T = H * W.
"""

import argparse
import dataclasses
import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_folder
from models import get_model  # noqa: E402
from models.pixelcnn_pp import PixelCNNConfig  # noqa: E402
from training import trainer  # noqa: E402

LR, WD = 1e-3, 0.0  # the paper's Table I (AdamW, weight decay 0)

SIZES = {  # name -> (PixelCNNConfig fields, batch)
    "digits_small": (dict(image_shape=(8, 8, 1), num_levels=17, nr_filters=16, nr_resnet=1, nr_logistic_mix=5), 32),
    "digits_large": (dict(image_shape=(8, 8, 1), num_levels=17, nr_filters=32, nr_resnet=2, nr_logistic_mix=5), 64),
    "cifar_small": (dict(image_shape=(32, 32, 3), num_levels=256, nr_filters=32, nr_resnet=1, nr_logistic_mix=10), 16),
}
PAPER = dict(image_shape=(32, 32, 3), num_levels=256, nr_filters=192, nr_resnet=5, nr_logistic_mix=10)


def machine():
  """CPU model name (lscpu), core count, date."""
  try:
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    name = next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
  except (OSError, subprocess.CalledProcessError, StopIteration):
    name = platform.processor() or platform.machine()
  return dict(cpu=name, cpus=os.cpu_count(), date=datetime.date.today().isoformat(), jax=jax.__version__,
              platform=jax.devices()[0].platform)


def pixelcnn(config):
  """The model as the trainer sees it (models.get_model's FunctionalModel: family loss, dropout)."""
  return get_model("pixelcnn_pp", **dataclasses.asdict(config))


def init_stack(config, G, seed=0):
  """G models' params stacked on axis 0 and their AdamW state, by the trainer's functions."""
  model = pixelcnn(config)
  params = trainer.init_stack(model, jnp.stack([trainer.model_key(seed, m) for m in range(G)]))
  return params, trainer.opt_init(params, LR, WD)


def random_images(config, G, B, seed=0):
  H, W, C = config.image_shape
  return np.random.default_rng(seed).integers(0, config.num_levels, size=(G, B, H, W, C), dtype=np.int32)


class JaxMethod:
  """A G-model step of one kind ("vmap" or "single"), holding its own (donated) state between calls."""

  def __init__(self, config, mode, images_GxBxHxWxC):
    G, B = images_GxBxHxWxC.shape[:2]
    self.fn = trainer.make_step(pixelcnn(config), LR, WD, None, single=mode == "single")
    self.mode, self.calls = mode, 0
    params, opt = init_stack(config, G)
    self.images = jnp.asarray(images_GxBxHxWxC)
    self.weight = jnp.ones((G, B), jnp.float32)
    if mode == "single":
      self.state = [[jax.tree.map(lambda x: x[m:m + 1], params), jax.tree.map(lambda x: x[m:m + 1], opt)]
                    for m in range(G)]
    else:
      self.state = [[params, opt]]

  def __call__(self):
    self.calls += 1
    G = self.images.shape[0]
    keys_Gx2 = trainer.dropout_key_data(0, range(G), 0, self.calls)  # new masks every call, as in training
    losses = []
    if self.mode == "single":
      for m, s in enumerate(self.state):
        s[0], s[1], loss = self.fn(s[0], s[1], self.images[m:m + 1], self.weight[m:m + 1], keys_Gx2[m:m + 1])
        losses.append(loss)
    else:
      s = self.state[0]
      s[0], s[1], loss = self.fn(s[0], s[1], self.images, self.weight, keys_Gx2)
      losses.append(loss)
    return jax.block_until_ready(losses)


class TorchMethod:
  """G PyTorch twins trained one after another, each with its own torch.optim.AdamW."""

  def __init__(self, config, images_GxBxHxWxC, threads=2):
    import torch
    import pixelcnn_torch
    self.threads = threads
    torch.manual_seed(0)
    self.torch = torch
    self.models = [pixelcnn_torch.PixelCNNPP(config.image_shape, config.num_levels, config.nr_resnet,
                                             config.nr_filters, config.nr_logistic_mix, config.dropout_p).train()
                   for _ in range(images_GxBxHxWxC.shape[0])]
    self.opts = [torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD) for m in self.models]
    self.images = torch.from_numpy(np.asarray(images_GxBxHxWxC, np.int64))
    self.weight = torch.ones(images_GxBxHxWxC.shape[:2])

  def __call__(self):
    self.torch.set_num_threads(self.threads)
    losses = []
    for m, (model, opt) in enumerate(zip(self.models, self.opts)):
      opt.zero_grad(set_to_none=True)
      per_example_B = model.per_position_loss(self.images[m]).mean(dim=1)
      loss = (per_example_B * self.weight[m]).sum() / self.weight[m].sum().clamp(min=1.0)
      loss.backward()
      opt.step()
      losses.append(loss.item())
    return losses


def interleaved(methods, reps, block_s=0.3):
  """{name: median seconds per call}, each method timed once per repetition in turn, after an untimed warm-up."""
  inner = {}
  for name, fn in methods.items():
    t = time.perf_counter()
    fn()  # compile / warm-up
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    fn()
    inner[name] = (max(1, int(round(block_s / max(time.perf_counter() - t, 1e-6)))), compile_s)
  times = {name: [] for name in methods}
  for r in range(reps):
    order = list(methods) if r % 2 == 0 else list(methods)[::-1]
    for name in order:
      n = inner[name][0]
      t = time.perf_counter()
      for _ in range(n):
        methods[name]()
      times[name].append((time.perf_counter() - t) / n)
  return {name: dict(step_s=float(np.median(ts)), min_s=float(np.min(ts)), calls_per_rep=inner[name][0],
                     warmup_s=inner[name][1]) for name, ts in times.items()}


def run_speed(size, groups, reps):
  fields, B = SIZES[size]
  config = PixelCNNConfig(**fields)
  rows = []
  for G in groups:
    images = random_images(config, G, B)
    methods = {mode: JaxMethod(config, mode, images) for mode in ("vmap", "single")}
    methods["torch"] = TorchMethod(config, images)
    methods["torch1"] = TorchMethod(config, images, threads=1)
    load_before = os.getloadavg()[0]
    res = interleaved(methods, reps)
    row = dict(G=G, batch=B, loadavg_1min=[load_before, os.getloadavg()[0]])
    for name, r in res.items():
      row[name] = dict(r, images_per_s=G * B / r["step_s"])
    for name in ("vmap", "single"):
      row[name]["vs_torch"] = row[name]["images_per_s"] / row["torch"]["images_per_s"]
      row[name]["vs_torch1"] = row[name]["images_per_s"] / row["torch1"]["images_per_s"]
    rows.append(row)
    print(f"{size:13} G={G} B={B} load {load_before:.1f}-{os.getloadavg()[0]:.1f}  " + "  ".join(
        f"{n} {row[n]['images_per_s']:7.1f} img/s" + (f" ({row[n]['vs_torch']:.2f}x, {row[n]['vs_torch1']:.2f}x)" if "vs_torch" in row[n] else "")
        for n in ("vmap", "single", "torch", "torch1")), flush=True)
  return dict(config={**dataclasses.asdict(config), "batch": B}, rows=rows)


def run_pieces(size, reps):
  """One model: forward, loss, loss + grad and the full step, JAX against the torch twin (where the time goes)."""
  import torch
  import pixelcnn_torch
  fields, B = SIZES[size]
  config = PixelCNNConfig(**fields)
  model = pixelcnn(config)
  params = jax.jit(model.init)(jax.random.PRNGKey(0))
  images = jnp.asarray(random_images(config, 1, B)[0])
  key = trainer.dropout_key(trainer.dropout_key_data(0, [0], 0, 0)[0])

  def net(p):
    return nnx.merge(model.graphdef, p)

  def loss(p, train):
    return net(p).per_position_loss(images, train=train, key=key if train else None).mean()

  fwd = jax.jit(lambda p: net(p)(images, train=True, key=key))
  fwd_eval = jax.jit(lambda p: net(p)(images))
  loss_j = jax.jit(lambda p: loss(p, True))
  grad_j = jax.jit(jax.value_and_grad(lambda p: loss(p, True)))
  grad_eval = jax.jit(jax.value_and_grad(lambda p: loss(p, False)))
  step = JaxMethod(config, "single", np.asarray(images)[None])

  torch.set_num_threads(2)
  tm = pixelcnn_torch.PixelCNNPP(config.image_shape, config.num_levels, config.nr_resnet, config.nr_filters,
                                 config.nr_logistic_mix, config.dropout_p).train()
  topt = torch.optim.AdamW(tm.parameters(), lr=LR, weight_decay=WD)
  timg = torch.from_numpy(np.asarray(images, np.int64))

  def t_fwd():
    with torch.no_grad():
      return tm(timg)

  def t_grad():
    tm.zero_grad(set_to_none=True)
    lo = tm.per_position_loss(timg).mean()
    lo.backward()
    return lo

  def t_step():
    topt.zero_grad(set_to_none=True)
    lo = tm.per_position_loss(timg).mean()
    lo.backward()
    topt.step()
    return lo

  bur = jax.block_until_ready
  methods = {"jax forward (dropout)": lambda: bur(fwd(params)), "jax forward (eval)": lambda: bur(fwd_eval(params)),
             "jax loss": lambda: bur(loss_j(params)), "jax loss+grad": lambda: bur(grad_j(params)),
             "jax loss+grad (no dropout)": lambda: bur(grad_eval(params)), "jax step": step,
             "torch forward (no grad)": t_fwd, "torch loss+grad": t_grad, "torch step": t_step}
  res = interleaved(methods, reps)
  for name, r in res.items():
    print(f"{name:28} {1e3 * r['step_s']:8.2f} ms  {B / r['step_s']:8.1f} img/s", flush=True)
  return dict(size=size, batch=B, loadavg_1min=os.getloadavg()[0], pieces={k: v["step_s"] for k, v in res.items()})


def memory(batches=(1, 2)):
  """Paper config: parameter count (eval_shape), AdamW state, and XLA's compiled memory analysis of the step."""
  config = PixelCNNConfig(**PAPER)
  model = pixelcnn(config)
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  n_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))
  opt_shapes = jax.eval_shape(optax.adamw(LR, weight_decay=WD).init, shapes)
  opt_bytes = int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(opt_shapes)))
  step = trainer.make_step(model, LR, WD, None, single=True)
  out = dict(config=dataclasses.asdict(config), params=n_params, param_bytes=4 * n_params, adamw_bytes=opt_bytes,
             analysis={})
  for B in batches:
    H, W, C = config.image_shape
    stack = lambda t: jax.tree.map(lambda x: jax.ShapeDtypeStruct((1,) + x.shape, x.dtype), t)  # noqa: E731
    args = (stack(shapes), stack(opt_shapes), jax.ShapeDtypeStruct((1, B, H, W, C), jnp.int32),
            jax.ShapeDtypeStruct((1, B), jnp.float32), jax.ShapeDtypeStruct((1, 2), jnp.uint32))
    t = time.perf_counter()
    m = step.lower(*args).compile().memory_analysis()
    out["analysis"][B] = dict(temp_bytes=m.temp_size_in_bytes, argument_bytes=m.argument_size_in_bytes,
                              output_bytes=m.output_size_in_bytes, alias_bytes=m.alias_size_in_bytes,
                              compile_s=time.perf_counter() - t)
    print(f"batch {B}: {out['analysis'][B]}", flush=True)
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated: {', '.join(SIZES)}")
  ap.add_argument("--groups", default="1,2,4", help="comma-separated group sizes G")
  ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions (median)")
  ap.add_argument("--pieces", action="store_true", help="time forward / loss / grad / step of one model instead")
  ap.add_argument("--memory", action="store_true", help="paper config memory analysis instead")
  ap.add_argument("--memory_batches", default="1,2")
  ap.add_argument("--out", default=None, help="JSON output; default benchmarks/results/pixelcnn_speed_<what>.json")
  args = ap.parse_args()

  result = dict(machine=machine())
  print(result["machine"], flush=True)
  if args.memory:
    result["memory"] = memory(tuple(int(b) for b in args.memory_batches.split(",")))
    what = "memory"
  elif args.pieces:
    result["pieces"] = [run_pieces(s, args.reps) for s in args.sizes.split(",")]
    what = "pieces"
  else:
    groups = [int(g) for g in args.groups.split(",")]
    result["sizes"] = {s: run_speed(s, groups, args.reps) for s in args.sizes.split(",")}
    what = "cpu"
  out = Path(args.out or ROOT / "benchmarks" / "results" / f"pixelcnn_speed_{what}.json")
  run_folder.save_json(out, result)
  print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
  main()
