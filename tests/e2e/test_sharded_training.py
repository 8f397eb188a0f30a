"""The trainer over 4 simulated CPU devices (XLA's device count is fixed at start-up, so in a subprocess): model-axis
sharding of LSTM groups and FSDP of fine-tuned GPT-NeoX copies equal unsharded training."""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests", "training")  # test_trainer and test_finetune, whose helpers the script imports


_SHARDED_SCRIPT = textwrap.dedent("""
  import jax, numpy as np
  assert jax.device_count() == 4, jax.devices()
  sys_path = __import__("sys").path; sys_path.insert(0, {tests!r}); sys_path.insert(0, {root!r})
  from test_trainer import LOSS_TOL, assert_trained_alike, tiny_model, tiny_task
  from training import trainer
  model = tiny_model()
  examples_ExT, canaries_NxT, keep_MxN, ids = tiny_task(num_models=8)
  cfg = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=1e-2, seed=3)
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("models",))
  sharded, loss_s_G = trainer.train_group(model, examples_ExT, ids, list(range(8)), cfg, bos_id=0, mesh=mesh,
                                          progress=False)
  plain, loss_p_G = trainer.train_group(model, examples_ExT, ids, list(range(8)), cfg, bos_id=0, progress=False)
  # Sharding the model axis splits no sum, but each device compiles the step for 2 models instead of 8, which may
  # order reductions differently: compared as assert_trained_alike argues, and by what must agree, the losses.
  steps = cfg.epochs * -(-(12 + int(keep_MxN.sum(1).max())) // cfg.batch_size)
  assert_trained_alike(sharded, plain, learning_rate=cfg.learning_rate, steps=steps)
  np.testing.assert_allclose(loss_s_G, loss_p_G, rtol=LOSS_TOL["rtol"])  # last epoch's mean loss of each model
  loss_s = trainer.canary_statistics(model, sharded, canaries_NxT, bos_id=0, mesh=mesh)[0]
  loss_p = trainer.canary_statistics(model, plain, canaries_NxT, bos_id=0)[0]
  np.testing.assert_allclose(loss_s, loss_p, **LOSS_TOL)
  print("SHARDED_OK", len(jax.devices()))

  # FSDP: each fine-tuned GPT-NeoX copy's params, AdamW moments and batch split over the 4 devices.
  from test_finetune import base_model, task
  neox, _ = base_model()
  examples_ExT, canaries_NxT, _, ids = task(num_models=2)
  cfg = trainer.TrainConfig(epochs=2, batch_size=4, learning_rate=3e-3, weight_decay=1e-4, seed=3)
  fsdp = jax.sharding.Mesh(np.array(jax.devices()), ("fsdp",))
  specs = jax.tree.leaves(jax.tree.map(lambda s: s.spec, trainer.shardings(fsdp, trainer.init_stack(neox, ids[:2]))))
  assert jax.sharding.PartitionSpec(None, "fsdp", None) in specs, specs  # e.g. embed_in [G, V=40, D=32]: V split
  sharded, loss_s_G = trainer.train_group(neox, examples_ExT, ids, [0, 1], cfg, bos_id=0, mesh=fsdp, progress=False)
  plain, loss_p_G = trainer.train_group(neox, examples_ExT, ids, [0, 1], cfg, bos_id=0, progress=False)
  # The batch sum is split over devices and all-reduced, so rounding differs: assert_trained_alike's argument.
  steps = cfg.epochs * -(-max(len(i) for i in ids) // cfg.batch_size)
  assert_trained_alike(sharded, plain, learning_rate=cfg.learning_rate, steps=steps)
  np.testing.assert_allclose(loss_s_G, loss_p_G, rtol=LOSS_TOL["rtol"])
  stats_s = trainer.canary_statistics(neox, sharded, canaries_NxT, bos_id=0, mesh=fsdp)
  stats_p = trainer.canary_statistics(neox, plain, canaries_NxT, bos_id=0)
  for a, b in zip(stats_s[:3], stats_p[:3]):  # loss, mu, sigma (top1, their logits' argmax, is bool)
    np.testing.assert_allclose(a, b, **LOSS_TOL)
  print("FSDP_OK")
""")


@pytest.mark.slow
def test_sharded_training_over_four_simulated_devices_equals_unsharded():
  """Model-axis sharding (LSTM) and FSDP (fine-tuned GPT-NeoX) over 4 simulated CPU devices equal unsharded runs."""
  # Other XLA flags pass through, e.g. --xla_cpu_max_isa=SSE4_2 to check this on another SIMD width.
  flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
  env = dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu")
  script = _SHARDED_SCRIPT.format(tests=TESTS, root=ROOT)
  proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "SHARDED_OK 4" in proc.stdout and "FSDP_OK" in proc.stdout
