"""Where a shadow run keeps each group's files, and which models a group holds (training/pipeline.py writes them,
training/partial.py and training/shadow_model.py read them). Pure path arithmetic: no model code is imported.

RUN_DIR/checkpoints/group_GGGG  orbax checkpoint of group G's parameters
RUN_DIR/losses/group_GGGG.npy   its canary losses [G, N, T], written last: the group is done when it exists
RUN_DIR/losses/group_GGGG_<stat>.npy  a language model's per-token extras (mu, sigma) beside them
"""

import os


def groups(num_models, group_size, process_id=0, num_processes=1):
  """(group index, model ids) of a process's share: groups g with g % num_processes == process_id."""
  starts = range(0, num_models, group_size)
  every = [(g, list(range(s, min(s + group_size, num_models)))) for g, s in enumerate(starts)]
  return [(g, ids) for g, ids in every if g % num_processes == process_id]


def group_paths(run_dir, g):
  """Checkpoint folder and losses file of group g; the losses file is written last and marks the group done."""
  return (os.path.abspath(os.path.join(run_dir, "checkpoints", f"group_{g:04d}")),
          os.path.join(run_dir, "losses", f"group_{g:04d}.npy"))


def stat_path(losses_path, stat):
  """mu / sigma of a group, beside its losses file."""
  return losses_path[:-len(".npy")] + f"_{stat}.npy"
