"""AdamW for a stack of models of which some may sit a step out (a batch of only padding): optax.adamw, with the
parameters stepped from the state after the per-model choice between new and old.

A vmapped step keeps a model whose batch is all padding as it was: parameters, moments and step count. Choosing per
model between optax's new parameters and state and the old ones (jnp.where(has_data, new, old) on each) leaves XLA
computing the new moments twice, once for the chosen state and again inside the parameters' update, from copies of
the old moments (the new ones overwrite the donated buffers): on a CPU that update took 3.8x the unmasked one
(BENCHMARKS.md, "AdamW with models that sit a step out"). `masked_update` chooses the state first and steps the
parameters from the chosen moments by optax.adamw's own operations in its order (scale_by_adam's bias correction
and m / (sqrt(v + eps_root) + eps), add_decayed_weights, scale_by_learning_rate, apply_updates): the same floats
as optax's update bit for bit (tests/training/test_adamw.py), at the unmasked update's cost.
"""

import jax
import jax.numpy as jnp
import optax

B1, B2, EPS, EPS_ROOT = 0.9, 0.999, 1e-8, 0.0  # optax.adamw's defaults, named so `masked_update` uses the same


def make_optimizer(learning_rate, weight_decay):
  """optax.adamw with a constant learning rate and weight decay."""
  return optax.adamw(learning_rate, b1=B1, b2=B2, eps=EPS, eps_root=EPS_ROOT, weight_decay=weight_decay)


def masked_update(grads, opt_state, params, has_data, learning_rate, weight_decay):
  """(params, opt_state) after one `make_optimizer(learning_rate, weight_decay)` step where `has_data` (a bool
  scalar; per model under vmap), both unchanged where not."""
  if not isinstance(learning_rate, (int, float)) or not isinstance(weight_decay, (int, float)):
    raise TypeError("masked_update takes a constant learning rate and weight decay")
  keep_new = lambda new, old: jnp.where(has_data, new, old)  # noqa: E731
  _, new_state = make_optimizer(learning_rate, weight_decay).update(grads, opt_state, params)
  new_state = jax.tree.map(keep_new, new_state, opt_state)
  adam = new_state[0]  # the chain's states: scale_by_adam's, add_decayed_weights', scale_by_learning_rate's
  mu_hat = optax.tree.bias_correction(adam.mu, B1, adam.count)
  nu_hat = optax.tree.bias_correction(adam.nu, B2, adam.count)
  updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v + EPS_ROOT) + EPS), mu_hat, nu_hat)
  if weight_decay != 0.0:  # add_decayed_weights skips a weight decay of constant 0
    updates = jax.tree.map(lambda u, p: u + weight_decay * p, updates, params)
  step_size = -1 * learning_rate  # scale_by_learning_rate: scale(-learning_rate)
  updates = jax.tree.map(lambda u: step_size * u, updates)
  return jax.tree.map(keep_new, optax.apply_updates(params, updates), params), new_state
