"""training.trainer.make_step: an all-padding batch changes nothing, in the single path (lax.cond) and vmapped."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import get_model
from training import trainer


@pytest.mark.parametrize("G, single", [(1, True), (2, False)])
def test_an_all_padding_batch_changes_nothing_and_a_real_one_does(G, single):
  model = get_model("lstm", vocab_size=12, embed_dim=4, hidden_dim=4)
  step = trainer.make_step(model, 1e-2, 1e-2, 0, single=single)  # weight decay too: it must not step either
  params = trainer.init_stack(model, jnp.stack([trainer.model_key(0, m) for m in range(G)]))
  opt_state = trainer.opt_init(params, 1e-2, 1e-2)
  before = jax.tree.map(np.asarray, (params, opt_state))
  tokens_GxBxT = jnp.asarray(np.random.default_rng(0).integers(1, 12, (G, 3, 5)), jnp.int32)
  params, opt_state, _ = step(params, opt_state, tokens_GxBxT, jnp.zeros((G, 3)))
  for a, b in zip(jax.tree.leaves((params, opt_state)), jax.tree.leaves(before)):
    np.testing.assert_array_equal(a, b)  # untouched: not even AdamW's count or moments decay
  params, opt_state, _ = step(params, opt_state, tokens_GxBxT, jnp.ones((G, 3)))
  moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(before[0]))]
  assert all(moved)
