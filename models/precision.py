"""Compute dtypes of the model families: float32, or bfloat16 mixed precision.

A family's config field `dtype` is its compute dtype. In bfloat16 the operands of every matmul and convolution are
bfloat16, and so are the activations between layers, in the forward and the backward pass; the parameters stay
float32 (the trainer's master weights and AdamW moments) and each use rounds them. A bfloat16 matmul or convolution
whose output is a bfloat16 activation sums as XLA's backend does; float32 sums are asked for explicitly
(`preferred_element_type`) where the output stays float32: the logits and mixture parameters the loss reads, and
the LSTM's gate pre-activations and weight gradients. The losses (models/token_loss.py,
models/discretized_logistic.py) are computed in float32. In float32 every cast is the identity and no helper here
is on the models' path except `matmul`, which is then the plain float32 a @ b.
"""

import jax
import jax.numpy as jnp

from lira.errors import InputError

COMPUTE_DTYPES = ("float32", "bfloat16")


def check(value, field="dtype"):
  """`value` if it is a compute dtype name; InputError naming `field` otherwise."""
  if value not in COMPUTE_DTYPES:
    raise InputError(f"{field} must be one of {', '.join(COMPUTE_DTYPES)}, got {value!r}")
  return value


def matmul(a, b, dtype):
  """a @ b with both operands in `dtype`, the products summed and returned in float32."""
  return jnp.matmul(a.astype(dtype), b.astype(dtype), preferred_element_type=jnp.float32)


def float32_output(op, a, b):
  """`op(a, b, preferred_element_type)`, a product bilinear in a and b (matmul, einsum) of operands in the compute
  dtype, returned in float32 from float32 sums. Its gradient is the backward pass of `op(a, b, None)` with the
  float32 cotangent rounded to the operands' dtype, so the backward products stay in the compute dtype (autodiff of
  the float32-output product would multiply float32 cotangents by the bfloat16 operands)."""
  @jax.custom_vjp
  def product(a, b):
    return op(a, b, jnp.float32)

  def forward(a, b):
    return product(a, b), (a, b)

  def backward(saved, g):
    a, b = saved
    _, pullback = jax.vjp(lambda a, b: op(a, b, None), a, b)
    return pullback(g.astype(jnp.result_type(a, b)))

  product.defvjp(forward, backward)
  return product(a, b)
