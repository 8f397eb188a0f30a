"""Every file and folder name of a run folder, a shadow run's group files, a features folder, a population and a
Hugging Face model folder: the one place they are spelled (tests/test_layout.py refuses the file names elsewhere).

A run folder (README, "Run folder layout"; docs/own_losses.md):
RUN_DIR/losses.npy       per-token losses [M, N, T] (a shadow run assembles it once every group is done)
RUN_DIR/keep.npy         membership [M, N] bool
RUN_DIR/mask.npy         scored positions [N, T] bool (optional)
RUN_DIR/config.json      the config that wrote the run
RUN_DIR/mu.npy, sigma.npy  a language model's per-token extras [M, N, T] (stat_file)
RUN_DIR/top1.npy         [M, N, T] bool: the model's top-1 token at that position is the canary's (stat_file)
RUN_DIR/canaries.npy, tokenizer.json, texts.json  the canaries (token ids or images), their tokenizer, their texts
RUN_DIR/population.npy, population_losses.npy [M, Z, T], population_mask.npy [Z, T]  RMIA's population
RUN_DIR/population_top1.npy [M, Z, T] bool: top-1 correctness on the population
RUN_DIR/base_model/      a fine-tuned run's base model (a Hugging Face folder)
RUN_DIR/base_losses.npy, base_top1.npy [N, T]  the canaries on that base model
RUN_DIR/population_overwrite/  a replacement population while experiments.population_losses --overwrite builds it
                         (run_folder.staging: links to the run's files beside the new population's)

A shadow run keeps each group's files (training/pipeline.py writes them, training/partial.py and
training/shadow_model.py read them):
RUN_DIR/checkpoints/group_GGGG  orbax checkpoint of group G's parameters
RUN_DIR/losses/group_GGGG.npy   its canary losses [G, N, T], written last: the group is done when it exists
RUN_DIR/losses/group_GGGG_<stat>.npy  a language model's per-token extras (mu, sigma, top1) beside them
RUN_DIR/losses/group_GGGG_population.npy  its losses of RMIA's population [G, Z, T] (training/population.py)
RUN_DIR/losses/group_GGGG_population_top1.npy  its top-1 correctness on the population [G, Z, T]
"""

import os

# ---- a run folder ----
LOSSES = "losses.npy"
KEEP = "keep.npy"
MASK = "mask.npy"
CONFIG = "config.json"
CANARIES = "canaries.npy"
TOKENIZER = "tokenizer.json"
TEXTS = "texts.json"
MU = "mu.npy"
SIGMA = "sigma.npy"
TOP1 = "top1.npy"
POPULATION = "population.npy"
POPULATION_LOSSES = "population_losses.npy"
POPULATION_MASK = "population_mask.npy"
POPULATION_TOP1 = "population_top1.npy"
BASE_MODEL_DIR = "base_model"
BASE_LOSSES = "base_losses.npy"  # [N, T] the canaries' per-token losses on the base model (fine-tuning runs)
BASE_TOP1 = "base_top1.npy"  # [N, T] bool: the base model's top-1 token is the canary's
POPULATION_STAGING_DIR = "population_overwrite"  # population_losses --overwrite's new population, until swapped in

RUN_FILES = (LOSSES, KEEP, MASK, CONFIG)  # a folder holding any of them holds a run
POPULATION_FILES = (POPULATION_LOSSES, POPULATION_MASK)

# ---- evaluate's report, which later commands read ----
RESULTS = "results.json"

# ---- a Hugging Face model folder (models/hf_convert.py) ----
MODEL_CONFIG = CONFIG
MODEL_WEIGHTS = "model.safetensors"
MODEL_WEIGHTS_INDEX = "model.safetensors.index.json"

# ---- a features folder (attacks/feature_folder.py), every file by its short name ----
FEATURE_FILES = {
    "lp": "lp.npy", "mu": MU, "sigma": SIGMA, "top1": TOP1, "ref_top1": "ref_top1.npy", "ids": "ids.npy", "mask": MASK,
    "labels": "labels.npy", "source_index": "source_index.npy", "texts": TEXTS,
    "cond_lp_shots": "cond_lp_shots.npy", "cond_lp_member": "cond_lp_member.npy",
    "cond_lp_ensemble": "cond_lp_ensemble.npy", "pair_lp": "pair_lp.npy", "ref_lp": "ref_lp.npy",
    "ref_kl": "ref_kl.npy",
    "neighbours": "neighbours.json", "neighbour_lp": "neighbour_lp.npy", "meta": "features.json",
    "prefix": "prefix.json",
}
FEATURES_BUILD = "build.json"  # the extraction's settings, written first (features.json, written last, ends it)
PAIRS_DIR = "pairs"  # EM-MIA's pair lp in chunks while they are extracted
TOKEN_IDS = "token_ids.npy"  # experiments/extract_tokens.py's token ids beside lp, mu, sigma

# ---- a shadow run's groups ----
CHECKPOINTS_DIR = "checkpoints"
LOSSES_DIR = "losses"


def stat_file(stat):
  """RUN_DIR's file of a per-token statistic beside losses.npy ('mu' -> mu.npy)."""
  return f"{stat}.npy"


def config_path(run_dir):
  """RUN_DIR/config.json: the config that wrote the run."""
  return os.path.join(run_dir, CONFIG)


def groups(num_models, group_size, process_id=0, num_processes=1):
  """(group index, model ids) of a process's share: groups g with g % num_processes == process_id."""
  starts = range(0, num_models, group_size)
  every = [(g, list(range(s, min(s + group_size, num_models)))) for g, s in enumerate(starts)]
  return [(g, ids) for g, ids in every if g % num_processes == process_id]


def group_name(g):
  """group_GGGG: group g's checkpoint folder, and its losses file without .npy."""
  return f"group_{g:04d}"


def group_losses_file(g):
  """losses/group_GGGG.npy: group g's losses file, relative to the run folder."""
  return os.path.join(LOSSES_DIR, group_name(g) + ".npy")


def group_paths(run_dir, g):
  """Checkpoint folder and losses file of group g; the losses file is written last and marks the group done."""
  return (os.path.abspath(os.path.join(run_dir, CHECKPOINTS_DIR, group_name(g))),
          os.path.join(run_dir, group_losses_file(g)))


def stat_path(losses_path, stat):
  """mu / sigma of a group, beside its losses file."""
  return losses_path[:-len(".npy")] + f"_{stat}.npy"


def population_group_path(losses_path, stat=None):
  """A group's population losses (or, with `stat`, its per-token extra on the population: "top1"), beside its
  canary losses file."""
  return stat_path(losses_path, "population" if stat is None else f"population_{stat}")


def group_index(file_name):
  """g of a group's losses file name group_GGGG.npy; None for any other name (its statistics, its population)."""
  if not (file_name.startswith("group_") and file_name.endswith(".npy")):
    return None
  g = file_name[len("group_"):-len(".npy")]
  return int(g) if g.isdigit() else None
