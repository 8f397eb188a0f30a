"""training.adamw.masked_update against optax.adamw: the same floats bit for bit where a model steps, nothing
changed where it sits the step out."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from training import adamw


def tree(rng, G, scale=1.0):
  shapes = {"kernel": (G, 5, 3), "bias": (G, 3), "layers": [{"w": (G, 4, 4)}, {"w": (G, 2)}]}
  return jax.tree.map(lambda s: jnp.asarray(rng.normal(0, scale, s), jnp.float32), shapes,
                      is_leaf=lambda s: isinstance(s, tuple))


@pytest.mark.parametrize("learning_rate, weight_decay", [(1e-3, 0.0), (3e-2, 1e-2)])
def test_masked_update_is_optax_adamw_bit_for_bit_and_skips_models_without_data(learning_rate, weight_decay):
  rng = np.random.default_rng(0)
  G, steps = 3, 6
  opt = optax.adamw(learning_rate, weight_decay=weight_decay)  # optax's defaults, as the trainer's optimizer

  def reference(p, s, g):
    updates, s = opt.update(g, s, p)
    return optax.apply_updates(p, updates), s

  reference = jax.jit(jax.vmap(reference))
  masked = jax.jit(jax.vmap(lambda g, s, p, has: adamw.masked_update(g, s, p, has, learning_rate, weight_decay)))
  params = tree(rng, G)
  ours = (params, jax.vmap(adamw.make_optimizer(learning_rate, weight_decay).init)(params))
  theirs = (params, jax.vmap(opt.init)(params))
  # model 1 sits out steps 2 and 4 (its reference is not stepped either); grads spread over decades, some exactly 0
  for step in range(steps):
    grads = jax.tree.map(lambda x: x * jnp.asarray(10.0 ** rng.integers(-8, 2, x.shape), jnp.float32),
                         tree(rng, G))
    grads = jax.tree.map(lambda x: jnp.where(jnp.abs(x) < 1e-7, 0.0, x), grads)
    has = np.array([True, step not in (2, 4), True])
    before = ours
    ours = masked(grads, ours[1], ours[0], jnp.asarray(has))
    stepped = reference(theirs[0], theirs[1], grads)
    theirs = jax.tree.map(lambda new, old: jnp.where(jnp.asarray(has).reshape((G,) + (1,) * (new.ndim - 1)), new,
                                                     old), stepped, theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    if not has[1]:
      for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(before)):
        np.testing.assert_array_equal(np.asarray(a)[1], np.asarray(b)[1])  # not even the count or moments decay
  count = np.asarray(ours[1][0].count)
  np.testing.assert_array_equal(count, [steps, steps - 2, steps])


def test_masked_update_wants_constants():
  params = {"w": jnp.zeros(2)}
  state = adamw.make_optimizer(1e-3, 0.0).init(params)
  with pytest.raises(TypeError, match="constant"):
    adamw.masked_update(params, state, params, True, optax.constant_schedule(1e-3), 0.0)
