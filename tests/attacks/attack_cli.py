"""Helpers of the attack tests: a hand-made features folder, in-process runs of the experiments commands (absl flags
set aside between commands), strict JSON reading and a word-level tokenizer."""

import importlib
import json
import sys

import numpy as np
import pytest
from absl import flags

from attacks import feature_folder

N, T, S, G, J = 40, 7, 3, 2, 2  # 20 non-members: TPR at 5% FPR is resolved


def strict_json(path):
  """Parse JSON refusing NaN / Infinity, as strict parsers do."""
  def refuse(token):
    raise AssertionError(f"{path}: non-standard JSON constant {token}")
  with open(path) as f:
    return json.load(f, parse_constant=refuse)


def make_features(folder, seed=0, same_tokens=False):
  """A hand-made features folder: members' lp raised by 0.8 nats, ragged rows, every array of the schema; the
  reference model tokenizes the texts its own way, or (same_tokens) as the target does."""
  rng = np.random.default_rng(seed)
  labels_N = np.array([1, 0] * (N // 2), np.int8)
  length_N = rng.integers(3, T + 1, size=N)
  pad_NxT = np.arange(T)[None] >= length_N[:, None]

  def per_token(*lead, shift=0.8, first=False, width=T, pad=True):
    lp = rng.normal(-3.0, 1.0, size=lead + (N, width)) + shift * labels_N[:, None]
    if not first:
      lp[..., 0] = np.nan
    if pad and width == T:
      lp[..., pad_NxT] = np.nan
    return lp.astype(np.float32)

  lp = per_token()
  arrays = {
      "lp": lp, "mu": np.where(np.isnan(lp), np.nan, lp + rng.normal(0.5, 0.3, lp.shape)).astype(np.float32),
      "sigma": np.where(np.isnan(lp), np.nan, rng.uniform(0.5, 2.0, lp.shape)).astype(np.float32),
      "ids": rng.integers(0, 50, size=(N, T)).astype(np.int32), "mask": ~pad_NxT,
      "labels": labels_N, "source_index": np.arange(N, dtype=np.int64) + S,
      "cond_lp_shots": per_token(S, shift=1.2, first=True), "cond_lp_member": per_token(shift=0.4, first=True),
      "cond_lp_ensemble": per_token(G, shift=1.0, first=True), "pair_lp": per_token(N, shift=1.0, first=True),
      "ref_lp": per_token(shift=0.0) if same_tokens else per_token(width=T - 2, shift=0.0),
      "neighbour_lp": per_token(J, width=T + 1, shift=0.0).transpose(1, 0, 2),
      "top1": (rng.random((N, T)) < 0.3) & np.isfinite(lp),
      "ref_kl": np.where(np.isfinite(lp), rng.exponential(0.3, (N, T)), np.nan).astype(np.float32),
  }
  arrays["ref_top1"] = (rng.random(arrays["ref_lp"].shape) < 0.3) & np.isfinite(arrays["ref_lp"])
  for name, array in arrays.items():
    feature_folder.write_array(folder, name, array)
  texts = [" ".join(["member" if labels_N[n] else "other"] * int(rng.integers(1, 6))) for n in range(N)]
  feature_folder.write_json(folder, "texts", texts)
  feature_folder.write_json(folder, "neighbours", [[t + " x"] * J for t in texts])
  feature_folder.write_meta(folder, {"model": "hand-made", "n_texts": N, "notes": []})
  return arrays, texts


def cli_module(name):
  """Import experiments.<name> for an in-process run. Commands share flag names (--out_dir, --seed), which absl
  refuses to define twice: flags another command imported in this session are set aside and put back afterwards."""
  FLAGS, module_name = flags.FLAGS, f"experiments.{name}"
  assert module_name not in sys.modules
  owners = {m: list(fs) for m, fs in FLAGS.flags_by_module_dict().items() if m.startswith("experiments.")}
  set_aside = [(m, f) for m, fs in owners.items() for f in fs if f.name in FLAGS]
  for _, flag in set_aside:
    if flag.name in FLAGS:
      delattr(FLAGS, flag.name)
  module = importlib.import_module(module_name)
  try:
    yield module
  finally:
    module.FLAGS.unparse_flags()
    for flag in list(FLAGS.flags_by_module_dict().get(module_name, [])):
      if flag.name in FLAGS:
        delattr(FLAGS, flag.name)
    del sys.modules[module_name]
    for owner, flag in set_aside:
      FLAGS[flag.name] = flag
      FLAGS.register_flag_by_module(owner, flag)


@pytest.fixture
def pretrain_cli():
  yield from cli_module("pretrain_attacks")


@pytest.fixture
def evaluate_cli():
  yield from cli_module("evaluate")


def run_cli(module, *args):
  module.FLAGS(["prog", *args])
  module.main([])


def tiny_tokenizer(path, vocab_size):
  from tokenizers import Tokenizer, models, pre_tokenizers
  vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, vocab_size)}}
  tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  tokenizer.save(str(path))
