"""The tiny PixelCNN++ shadow run with each group's model axis sharded over 4 simulated CPU devices (XLA's device
count is fixed at start-up, so in a subprocess) against the unsharded run (tests/training/test_pixelcnn_pipeline.py's
config), both trained in subprocesses compiled at XLA's default optimisation level, as users run them: LOSS_TOL and
assert_trained_alike bound the rounding of that code (the suite's level 0, tests/conftest.py, rounds a sharded and
an unsharded step further apart)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import xla_level
from test_pixelcnn_pipeline import restore_group, tiny_cfg, tiny_steps
from test_trainer import LOSS_TOL, assert_trained_alike

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the folders of the modules the script imports: test_pixelcnn_pipeline, test_trainer (tests/training), resume_check
PATHS = [ROOT, os.path.join(ROOT, "tests", "training"), os.path.join(ROOT, "tests")]


_SCRIPT = textwrap.dedent("""
  import sys
  sys.path[:0] = {paths!r}
  import jax, numpy as np
  assert jax.device_count() == {devices}, jax.devices()
  from test_pixelcnn_pipeline import tiny_cfg
  from training import pipeline
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("models",)) if {devices} > 1 else None
  assert pipeline.run(tiny_cfg(), {run_dir!r}, mesh=mesh, progress=False)
  print("RUN_OK", jax.device_count())
""")


def _start(run_dir, devices):
  """The tiny run in a subprocess on `devices` simulated CPU devices, at XLA's default optimisation level."""
  env = xla_level.at_default_level(os.environ)
  env.update(XLA_FLAGS=f"{env['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}".strip(),
             JAX_PLATFORMS="cpu")
  script = _SCRIPT.format(paths=PATHS, run_dir=run_dir, devices=devices)
  return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


@pytest.mark.slow
def test_sharded_run_over_four_simulated_devices_equals_unsharded(tmp_path):
  """The tiny run with each group's model axis sharded over 4 simulated CPU devices equals the unsharded run."""
  run_dir, finished_run = str(tmp_path / "sharded"), str(tmp_path / "unsharded")
  procs = [_start(run_dir, 4), _start(finished_run, 1)]
  for proc, devices in zip(procs, (4, 1)):
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert f"RUN_OK {devices}" in out
  for g in range(2):
    # Sharding the model axis splits no sum, but each device compiles the step for 1 model instead of 4, which may
    # order reductions differently: compared as assert_trained_alike argues.
    assert_trained_alike(restore_group(run_dir, g), restore_group(finished_run, g),
                         learning_rate=tiny_cfg().train.learning_rate, steps=tiny_steps())
  # A parameter AdamW flipped (assert_trained_alike) has ~0 gradient of the training loss, a sum over pixels and
  # images, but not of each pixel's loss: a pixel may move at first order, by its own gradient times a step. So the
  # bulk is compared: at most 0.1% of the losses outside LOSS_TOL (seen: 1 of 8,192, at 3e-4 relative, on a 2-core
  # AMD EPYC), none beyond 1e-3 relative, where a wrong model, data order or update moves most losses by ~1e-2.
  a, b = (np.load(os.path.join(d, "losses.npy")) for d in (run_dir, finished_run))
  off = np.abs(a - b) > LOSS_TOL["atol"] + LOSS_TOL["rtol"] * np.abs(b)
  assert off.mean() <= 1e-3, f"{off.sum()} of {off.size} losses outside LOSS_TOL"
  np.testing.assert_allclose(a, b, rtol=1e-3, atol=LOSS_TOL["atol"])
