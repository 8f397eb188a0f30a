"""The suite's XLA optimisation level: tests/conftest.py compiles at LLVM level 0 (compiling is most of the suite's
time and its arrays are tiny); a test whose subprocess runs many steps, or compares rounding with a bound argued for
the default code, starts it at XLA's default level with at_default_level."""

import os

LEVEL_0 = "--xla_backend_optimization_level=0"


def set_level_0():
  """Add LEVEL_0 to XLA_FLAGS of this process (and so of the commands it starts); before jax is imported."""
  if LEVEL_0 not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + LEVEL_0).strip()


def at_default_level(env):
  """A copy of the environment `env` whose XLA_FLAGS leave the optimisation level at XLA's default."""
  flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_backend_optimization_level")]
  return {**env, "XLA_FLAGS": " ".join(flags)}
