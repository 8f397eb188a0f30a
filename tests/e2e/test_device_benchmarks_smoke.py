"""The leave-one-out benchmarks of the prepared GPU call (`PART=checks bash benchmarks/device_call.sh`) at tiny size on
the CPU: each runs, writes its JSON, and its rows say what the GPU rows will be read for (one traced program for a
subset's counts, scores equal to numpy's in float64)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script, *args, out):
  proc = subprocess.run([sys.executable, f"benchmarks/{script}", *args, "--out", str(out)], cwd=ROOT,
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.load(open(out))


@pytest.mark.slow
def test_many_counts_at_tiny_size_compiles_one_program_for_the_subset_and_equals_numpy(tmp_path):
  got = _run("many_counts.py", "--M", "32", "--subset", "24", "--N", "64", "--T", "16", "--counts", "balanced",
             out=tmp_path / "many_counts.json")
  full, subset = got["rows"]
  assert (full["models"], full["in_counts"], subset["models"]) == (32, 1, 24) and subset["in_counts"] > 4
  assert subset["programs"] == full["programs"] == 1
  for row in (full, subset):
    # float64 through different orders of the same sums: rounding, ~1e-13 of scores of order 10
    assert row["max_rel_diff"] <= 1e-10
    assert row["first_s"] > 0 and row["second_s"] > 0 and row["numpy_s"] > 0


@pytest.mark.slow
def test_loo_device_at_tiny_size_scores_the_six_variants_as_numpy_does(tmp_path):
  got = _run("loo_device.py", "--Ms", "16", "--N", "64", "--T", "8", "--counts", "balanced", "--noevaluate",
             out=tmp_path / "loo_device.json")
  (row,) = got["rows"]
  assert (row["M"], row["N"], row["T"], row["balance_counts"]) == (16, 64, 8, True)
  assert row["jax_float64_pipeline_rel_diff"] <= 1e-10 and row["jax_float64_rel_diff"] <= 1e-10
  # float32 keeps about 7 digits: its scores within 1e-3 of float64's, relative to max(1, |score|)
  assert row["jax_float32_vs_float64_rel_diff"] <= 1e-3
