"""Per-token log-probabilities of a causal LM, ours (an NNX module) and transformers' (a PyTorch model, PEFT-wrapped
or not), both in float64 from the logits, for the families' parity tests."""

import jax.numpy as jnp
import numpy as np


def hf_lp(model, tokens_BxT, mask_BxT):
  """Per-token ln p(t_i | t_<i) [B, T - 1] of the torch model."""
  import torch
  with torch.no_grad():
    logits = model(input_ids=torch.tensor(tokens_BxT), attention_mask=torch.tensor(mask_BxT)).logits.double()
  lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, torch.tensor(tokens_BxT)[:, 1:, None])[..., 0]
  return lp.numpy()


def our_lp(module, tokens_BxT, mask_BxT):
  """The same of our module."""
  logits = np.asarray(module(jnp.asarray(tokens_BxT), attention_mask=jnp.asarray(mask_BxT)), np.float64)
  logits = logits - logits.max(-1, keepdims=True)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  return np.take_along_axis(logp[:, :-1], tokens_BxT[:, 1:, None], -1)[..., 0]
