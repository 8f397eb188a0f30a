"""The suite's XLA optimisation level: tests/conftest.py compiles at LLVM level 0 (compiling is most of the suite's
time and its arrays are tiny); a test whose subprocess runs many steps, or compares rounding with a bound argued for
the default code, starts it at XLA's default level with at_default_level."""

import os
import shutil
import tempfile

LEVEL_0 = "--xla_backend_optimization_level=0"


def set_level_0():
  """Add LEVEL_0 to XLA_FLAGS of this process (and so of the commands it starts); before jax is imported."""
  if LEVEL_0 not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + LEVEL_0).strip()


def at_default_level(env):
  """A copy of the environment `env` whose XLA_FLAGS leave the optimisation level at XLA's default."""
  flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_backend_optimization_level")]
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
