"""The tiny PixelCNN++ shadow run with each group's model axis sharded over 4 simulated CPU devices (XLA's device
count is fixed at start-up, so in a subprocess) against the unsharded run (tests/training/test_pixelcnn_pipeline.py's
fixture, built again in this module)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_pixelcnn_pipeline import finished_run, restore_group, tiny_cfg, tiny_steps  # noqa: F401  (a fixture)
from test_trainer import LOSS_TOL, assert_trained_alike

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the folders of the modules the script imports: test_pixelcnn_pipeline, test_trainer (tests/training), resume_check
PATHS = [ROOT, os.path.join(ROOT, "tests", "training"), os.path.join(ROOT, "tests")]


_SHARDED_SCRIPT = textwrap.dedent("""
  import sys
  sys.path[:0] = {paths!r}
  import jax, numpy as np
  assert jax.device_count() == 4, jax.devices()
  from test_pixelcnn_pipeline import tiny_cfg
  from training import pipeline
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("models",))
  assert pipeline.run(tiny_cfg(), {run_dir!r}, mesh=mesh, progress=False)
  print("SHARDED_OK", jax.device_count())
""")


@pytest.mark.slow
def test_sharded_run_over_four_simulated_devices_equals_unsharded(tmp_path, finished_run):
  """The tiny run with each group's model axis sharded over 4 simulated CPU devices equals the unsharded run."""
  flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
  env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
  run_dir = str(tmp_path / "sharded")
  script = _SHARDED_SCRIPT.format(paths=PATHS, run_dir=run_dir)
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "SHARDED_OK 4" in proc.stdout
  for g in range(2):
    # Sharding the model axis splits no sum, but each device compiles the step for 1 model instead of 4, which may
    # order reductions differently: compared as assert_trained_alike argues.
    assert_trained_alike(restore_group(run_dir, g), restore_group(finished_run, g),
                         learning_rate=tiny_cfg().train.learning_rate, steps=tiny_steps())
  np.testing.assert_allclose(np.load(os.path.join(run_dir, "losses.npy")),
                             np.load(os.path.join(finished_run, "losses.npy")), **LOSS_TOL)
