"""The suite's XLA compile settings: tests/conftest.py compiles at LLVM level 0 with XLA CPU's elemental emitters and
without its concurrency-optimised scheduler (compiling is most of the suite's time and its arrays are tiny; the LiRA
device pipeline's blocks compile 2-3x faster with them than at level 0 alone); a test whose subprocess runs many
steps, or compares rounding with a bound argued for the default code, starts it with XLA's defaults with
at_default_level."""

import os
import shutil
import subprocess
import sys
import tempfile

LEVEL_0 = "--xla_backend_optimization_level=0"
# Flags that not every jaxlib knows (XLA aborts on an unknown one): added only where a probe accepts them.
EMITTERS = ("--xla_cpu_use_fusion_emitters=false", "--xla_cpu_enable_concurrency_optimized_scheduler=false")
FAST_COMPILE = (LEVEL_0,) + EMITTERS
_PROBED = "SEQLIRA_TESTS_XLA_EMITTERS"  # "1" or "0": this jaxlib's answer, inherited by the workers and commands


def _add(flags):
  present = os.environ.get("XLA_FLAGS", "").split()
  os.environ["XLA_FLAGS"] = " ".join(present + [f for f in flags if f not in present])


def _accepts(flags):
  """Whether a process with `flags` added to XLA_FLAGS starts jax and compiles (an unknown flag aborts it)."""
  env = {**os.environ, "XLA_FLAGS": " ".join(os.environ.get("XLA_FLAGS", "").split() + list(flags)),
         "JAX_PLATFORMS": "cpu"}
  code = "import jax.numpy as jnp; jnp.zeros(2).sum().block_until_ready()"
  try:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120).returncode == 0
  except subprocess.TimeoutExpired:
    return False


def set_fast_compile():
  """Add FAST_COMPILE to XLA_FLAGS of this process (and so of the commands it starts), EMITTERS only where this
  jaxlib accepts them (probed once per session); before jax is imported."""
  _add([LEVEL_0])
  if _PROBED not in os.environ:
    os.environ[_PROBED] = "1" if _accepts(EMITTERS) else "0"
  if os.environ[_PROBED] == "1":
    _add(EMITTERS)


def at_default_level(env):
  """A copy of the environment `env` whose XLA_FLAGS leave the optimisation level and the emitters at XLA's
  defaults."""
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_backend_optimization_level") and f not in EMITTERS]
  return {**env, "XLA_FLAGS": " ".join(flags)}


_OWNED = "SEQLIRA_TESTS_XLA_CACHE"  # the cache folder this session made (removed at its end), inherited by its workers


def share_compilation_cache():
  """Point JAX's persistent compilation cache at one fresh folder for this test session, caching every compile: the
  xdist workers and the commands the tests start inherit the environment, so the same function compiled with the
  same XLA flags and devices (all part of JAX's cache key) is compiled once and loaded elsewhere. A cache the
  environment already names is used as it is."""
  if "JAX_COMPILATION_CACHE_DIR" in os.environ:
    return
  path = tempfile.mkdtemp(prefix="seqlira-tests-xla-cache-")
  os.environ.update({"JAX_COMPILATION_CACHE_DIR": path, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", _OWNED: path})


def remove_compilation_cache():
  """Remove the folder share_compilation_cache made (called once, by the process that made it)."""
  path = os.environ.get(_OWNED)
  if path and os.environ.get("JAX_COMPILATION_CACHE_DIR") == path:
    shutil.rmtree(path, ignore_errors=True)
