"""Where the LSTM trainer step's time goes: a jax.profiler trace of the G = 1 step, summed by HLO op.

  python benchmarks/profile_lstm_step.py --size default --trace /tmp/lstm_trace

Traces --steps calls of the step benchmarks/train_throughput.py times (training.trainer.make_step, single path)
after a warm-up, then reads the perfetto .trace.json.gz and prints, per step: the top-level device ops (an op is
top-level when no while or cond on the same executor thread encloses it; summed over threads, so concurrent ops
both count), and for every while loop its iterations and the time per iteration split into matmuls (YNNPACK
fusions and dots), the other ops inside (how many per iteration) and the gaps between them (the loop's own cost).
"""

import argparse
import collections
import glob
import gzip
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import train_throughput  # noqa: E402
from models import get_model  # noqa: E402

MATMUL = ("ynn", "dot")


def device_events(trace_dir):
  """Complete events of XLA's executor threads, sorted by thread and start, from the trace under trace_dir."""
  path = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)[0]
  with gzip.open(path) as f:
    events = json.load(f)["traceEvents"]
  threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
  ops = [e for e in events if e.get("ph") == "X" and threads.get((e["pid"], e["tid"]), "").startswith("tf_XLA")
         and not e["name"].startswith(("Thunk", "Threadpool", "end:", "Slinky"))]
  return sorted(ops, key=lambda e: (e["pid"], e["tid"], e["ts"]))


def breakdown(ops, steps):
  """Print top-level op time per step by name, and each while loop's per-iteration split."""
  top, inside = [], collections.defaultdict(list)
  loop = None
  for e in ops:
    if loop is not None and e["tid"] == loop["tid"] and e["ts"] < loop["ts"] + loop["dur"]:
      inside[id(loop)].append(e)
    else:
      top.append(e)
      loop = e if e["name"].startswith(("while", "cond")) else None
  by_name = collections.Counter()
  for e in top:
    by_name[e["name"]] += e["dur"]
  print(f"top-level device ops, ms per step (all: {sum(by_name.values()) / steps / 1e3:.2f}):")
  for name, us in by_name.most_common(20):
    print(f"  {us / steps / 1e3:7.3f}  {name}")
  loops = collections.defaultdict(collections.Counter)
  for e in top:
    if e["name"].startswith("while"):
      body, c = inside[id(e)], loops[e["name"]]
      c["us"] += e["dur"]
      c["iterations"] += max(collections.Counter(x["name"] for x in body).values(), default=0)
      c["matmul"] += sum(x["dur"] for x in body if x["name"].startswith(MATMUL))
      c["other"] += sum(x["dur"] for x in body if not x["name"].startswith(MATMUL))
      c["other_ops"] += sum(1 for x in body if not x["name"].startswith(MATMUL))
  print("while loops, per iteration (us):")
  for name, c in loops.items():
    n = max(c["iterations"], 1)
    print(f"  {name:10} {c['us'] / steps / 1e3:6.3f} ms/step, {c['iterations'] / steps:4.0f} iterations: "
          f"{c['us'] / n:7.1f} = matmul {c['matmul'] / n:6.1f} + other {c['other'] / n:6.1f} "
          f"({c['other_ops'] / n:.0f} ops) + gaps {(c['us'] - c['matmul'] - c['other']) / n:5.1f}")


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--size", default="default", help="a train_throughput size: default, mid, paper")
  ap.add_argument("--steps", type=int, default=20, help="traced steps")
  ap.add_argument("--trace", default="/tmp/lstm_step_trace", help="trace folder (replaced)")
  args = ap.parse_args()
  s = train_throughput.sizes()[args.size]
  model = get_model("lstm", vocab_size=s["vocab"], embed_dim=s["embed"], hidden_dim=s["hidden"],
                    num_layers=s["layers"])
  tokens_GxBxT = np.random.default_rng(0).integers(1, s["vocab"], size=(1, s["batch"], s["seq_len"]))
  step = train_throughput.seqlira_step(model, s["lr"], tokens_GxBxT)
  for _ in range(args.steps):
    step()
  times = []
  for _ in range(args.steps):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
  print(f"{args.size}: untraced step median {np.median(times) * 1e3:.2f} ms (min {np.min(times) * 1e3:.2f}), "
        f"1-minute load average {os.getloadavg()[0]:.2f}")
  os.system(f"rm -rf '{args.trace}'")
  jax.profiler.start_trace(args.trace, create_perfetto_trace=True)
  for _ in range(args.steps):
    step()
  jax.profiler.stop_trace()
  breakdown(device_events(args.trace), args.steps)


if __name__ == "__main__":
  main()
