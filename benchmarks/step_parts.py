"""What the step-parts benchmarks share (lstm_step_parts.py, neox_step_parts.py): their flags, the timing of one
part, the note of a part that failed, and the JSON rewritten after every row under a time budget."""

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from training import group_plan  # noqa: E402


def parser(doc, default_G, dtypes, out_name):
  """The flags of a step-parts benchmark: --smoke, --G, --dtypes, --warmup, --reps, --budget_s, --out."""
  ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--smoke", action="store_true", help="tiny shapes (a CPU check of the script)")
  ap.add_argument("--G", type=int, default=None, help=f"models per group (default {default_G}; smoke 2)")
  ap.add_argument("--dtypes", default=dtypes)
  ap.add_argument("--warmup", type=int, default=2)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--budget_s", type=float, default=300, help="start no row after this many seconds")
  ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / out_name))
  return ap


def timed(fn, warmup, reps):
  """Median seconds of fn() after `warmup` calls (the first compiles)."""
  times = []
  for i in range(warmup + reps):
    start = time.perf_counter()
    jax.block_until_ready(fn())
    if i >= warmup:
      times.append(time.perf_counter() - start)
  return float(np.median(times))


def failure(e):
  """The note of a part that raised: "out of memory" (a result on a device), or the error's first line."""
  if group_plan.out_of_memory(e):
    return "out of memory"
  return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


class Record:
  """The run's JSON (device, jax, `fields`, rows, parts skipped for the time budget), written atomically to `out`
  after every row."""

  def __init__(self, out, budget_s, **fields):
    device = jax.devices()[0]
    self.out, self.budget_s, self.start = out, budget_s, time.perf_counter()
    self.result = dict(date=datetime.date.today().isoformat(), device=f"{device.platform}:{device.device_kind}",
                       jax=jax.__version__, **fields, command=" ".join(sys.argv), rows=[], skipped=[])

  def over_budget(self, what):
    """Whether the budget is spent (then `what` is recorded as skipped)."""
    if time.perf_counter() - self.start > self.budget_s:
      self.result["skipped"].append(what)
      return True
    return False

  def add(self, row):
    self.result["rows"].append(row)
    self.save()

  def save(self):
    os.makedirs(os.path.dirname(os.path.abspath(self.out)), exist_ok=True)
    with open(self.out + ".tmp", "w") as f:
      json.dump(self.result, f, indent=1)
    os.replace(self.out + ".tmp", self.out)

  def close(self):
    self.result["seconds"] = time.perf_counter() - self.start
    self.save()
    if self.result["skipped"]:
      print(f"skipped (time budget): {', '.join(self.result['skipped'])}")
    print(f"wrote {self.out}")
