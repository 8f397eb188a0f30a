"""Trainer steps built from different copies of models/lstm.py, timed interleaved in one process (A/B under load).

  python benchmarks/lstm_variants.py --size default --reps 40 main=/tmp/lstm_main.py new=models/lstm.py
  python benchmarks/lstm_variants.py --size default new=models/lstm.py wide=models/lstm.py:SOME_FLAG=1

On a shared 2-core machine two benchmark runs minutes apart differ by 2x (the load moves); stepping the variants
in turn inside one process puts them under the same load, which resolves 5-10% differences that separate runs of
benchmarks/train_throughput.py cannot. Each NAME=PATH[:ATTR=VALUE,...] loads PATH as its own module (module
attributes set as given), wraps its LSTMLanguageModel and lm_loss as a FunctionalModel, and times the trainer's G = 1
step (training.trainer.make_step, single path) on the same random tokens: an untimed then a timed call of each, per
round. Prints the first losses (equal across variants that compute the same thing), median and min wall seconds,
median process CPU seconds, tokens/s, and the 1-minute load average.
"""

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import models  # noqa: E402
from benchmarks import train_throughput  # noqa: E402


def load_variant(spec):
  """(name, FunctionalModel factory) from NAME=PATH[:ATTR=VALUE,...]."""
  name, spec = spec.split("=", 1)
  path, _, settings = spec.partition(":")
  module_spec = importlib.util.spec_from_file_location(f"lstm_variant_{name}", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  for setting in filter(None, settings.split(",")):
    key, value = setting.split("=")
    setattr(module, key, int(value) if value.lstrip("-").isdigit() else value)

  def model(s):
    config = module.LSTMConfig(vocab_size=s["vocab"], embed_dim=s["embed"], hidden_dim=s["hidden"],
                               num_layers=s["layers"])
    return models.functional("lstm", config, lambda rngs: module.LSTMLanguageModel(config, rngs=rngs),
                             loss_fn=module.lm_loss)
  return name, model


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("variants", nargs="+", help="NAME=PATH[:ATTR=VALUE,...]")
  ap.add_argument("--size", default="default", help="a train_throughput size: default, mid, paper")
  ap.add_argument("--reps", type=int, default=40)
  args = ap.parse_args()
  s = train_throughput.sizes()[args.size]
  tokens_GxBxT = np.random.default_rng(0).integers(1, s["vocab"], size=(1, s["batch"], s["seq_len"]))
  steps = {}
  for spec in args.variants:
    name, model = load_variant(spec)
    steps[name] = train_throughput.seqlira_step(model(s), s["lr"], tokens_GxBxT)
  print("first losses:", {name: float(step()[0]) for name, step in steps.items()})
  wall = {name: [] for name in steps}
  cpu = {name: [] for name in steps}
  for _ in range(args.reps):
    for name, step in steps.items():
      step()  # untimed: the timed call follows the variant's own call, not another's
      t, c = time.perf_counter(), time.process_time()
      step()
      wall[name].append(time.perf_counter() - t)
      cpu[name].append(time.process_time() - c)
  print(f"{args.size}, {args.reps} rounds, 1-minute load average {os.getloadavg()[0]:.2f} at the end")
  for name in steps:
    median = float(np.median(wall[name]))
    print(f"  {name:14} median {median * 1e3:7.2f} ms  min {np.min(wall[name]) * 1e3:7.2f} ms  "
          f"cpu {np.median(cpu[name]) * 1e3:7.2f} ms  {tokens_GxBxT.size / median:9,.0f} tokens/s")


if __name__ == "__main__":
  main()
