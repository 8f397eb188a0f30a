"""Tests for training.pretraining.offline_benchmark: disjoint deterministic splits, epoch checkpoints, resumption, and
membership signal after 8 epochs (Loss attack from causal_lm_statistics, independent of the features builder). The
benchmark's command: tests/e2e/test_pretrain_benchmark_command.py."""

import os

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import attacks
from experiments.configs import pretrain_benchmark as configs
from models import hf_convert
from training import data as data_lib
from training import per_token
from training import trainer
from training.pretraining import offline_benchmark as mb


@pytest.fixture(scope="module")
def conversations():
  return data_lib.load_chitchat()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, conversations):
  """The tiny config's data and both models, trained once for the module."""
  cfg = configs.get_config("tiny")
  out = str(tmp_path_factory.mktemp("bench"))
  sets, tokenizer = mb.prepare_data(cfg, out, conversations, progress=False)
  mb.pretrain_models(cfg, out, sets, tokenizer, progress=False)
  return cfg, out, sets, tokenizer


def _check_disjoint(sets):
  groups = ("target_corpus", "reference_corpus", "nonmembers", "shift_nonmembers")
  for i, a in enumerate(groups):
    assert len(set(sets[a])) == len(sets[a]), f"{a} has duplicates"
    for b in groups[i + 1:]:
      assert not set(sets[a]) & set(sets[b]), f"{a} and {b} overlap"
  assert set(sets["members"]) <= set(sets["target_corpus"])


def test_tiny_splits_disjoint_and_labelled(tiny_run):
  cfg, out, sets, tokenizer = tiny_run
  _check_disjoint(sets)
  texts, labels = mb.read_jsonl(os.path.join(out, "eval_main.jsonl"))
  assert texts == sets["members"] + sets["nonmembers"]
  assert labels.tolist() == [1] * cfg.data.num_eval + [0] * cfg.data.num_eval
  shift_texts, shift_labels = mb.read_jsonl(os.path.join(out, "eval_shift.jsonl"))
  assert shift_texts == sets["members"] + sets["shift_nonmembers"]
  assert shift_labels.tolist() == labels.tolist()
  # The shifted non-members are cut to their paired member's word count.
  assert [len(t.split()) for t in sets["shift_nonmembers"]] == [len(t.split()) for t in sets["members"]]
  # Every evaluated member lies whole in the packed training sequences.
  whole = mb.whole_after_packing(sets["target_corpus"], tokenizer, cfg.data.seq_len)
  assert set(sets["members"]) <= {t for t, w in zip(sets["target_corpus"], whole) if w}


def test_cpu_splits_disjoint_and_deterministic(tmp_path, conversations):
  cfg = configs.get_config("cpu")
  sets, _ = mb.prepare_data(cfg, str(tmp_path / "a"), conversations, progress=False)
  _check_disjoint(sets)
  assert len(sets["members"]) == len(sets["nonmembers"]) == len(sets["shift_nonmembers"]) == cfg.data.num_eval
  docs = mb.chitchat_documents(conversations, cfg.data.min_words, cfg.data.max_words)
  again = mb.split_documents(docs, cfg.data.num_eval, cfg.data.num_reference, cfg.data.max_target, cfg.seed)
  assert again == (sets["target_corpus"], sets["nonmembers"], sets["reference_corpus"])
  other = mb.split_documents(docs, cfg.data.num_eval, cfg.data.num_reference, cfg.data.max_target, cfg.seed + 1)
  assert other[1] != sets["nonmembers"]


def test_checkpoints_saved_after_each_epoch(tiny_run):
  cfg, out, _, _ = tiny_run
  for e in cfg.pretrain.checkpoint_epochs:
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
      assert os.path.exists(os.path.join(mb.target_checkpoint(out, e), name))
  assert os.path.exists(os.path.join(mb.reference_checkpoint(cfg, out), "model.safetensors"))
  # Only the latest training state is kept.
  assert os.listdir(os.path.join(out, "models", "target", "train_state")) == ["epoch_8.npz"]


def test_resume_skips_finished_epochs_and_continues_exactly(tiny_run, tmp_path, monkeypatch):
  cfg, out, sets, tokenizer = tiny_run
  seq_SxT = data_lib.pack_sequences(sets["target_corpus"], tokenizer, cfg.data.seq_len)
  steps_per_epoch = -(-len(seq_SxT) // cfg.pretrain.batch_size)
  kwargs = dict(arch=dict(cfg.model.arch), vocab_size=data_lib.vocab_size(tokenizer), bos_id=data_lib.bos_id(tokenizer),
                batch_size=cfg.pretrain.batch_size, learning_rate=cfg.pretrain.learning_rate,
                weight_decay=cfg.pretrain.weight_decay, seed=cfg.seed, tokenizer_file=os.path.join(out, "tokenizer.json"),
                progress=False)
  calls = []
  make_step = trainer.make_step

  def counting_make_step(*args, **kw):
    step = make_step(*args, **kw)
    return lambda *a: (calls.append(1), step(*a))[1]

  monkeypatch.setattr(mb.trainer, "make_step", counting_make_step)
  folder = str(tmp_path / "target")
  mb.pretrain(seq_SxT, folder, epochs=(1,), **kwargs)  # a run killed in its second epoch
  first = os.stat(os.path.join(mb.checkpoint_dir(folder, 1), "model.safetensors")).st_mtime_ns
  calls.clear()
  mb.pretrain(seq_SxT, folder, epochs=(1, 2), **kwargs)
  assert len(calls) == steps_per_epoch  # epoch 2 only
  assert os.stat(os.path.join(mb.checkpoint_dir(folder, 1), "model.safetensors")).st_mtime_ns == first
  calls.clear()
  mb.pretrain(seq_SxT, folder, epochs=(1, 2), **kwargs)
  assert not calls  # everything on disk: nothing trained
  # The resumed epoch 2 equals the uninterrupted run's: same example order, same restored AdamW state.
  _, resumed = hf_convert.load_hf_folder(mb.checkpoint_dir(folder, 2))
  _, straight = hf_convert.load_hf_folder(mb.target_checkpoint(out, 2))
  for a, b in zip(jax_leaves(resumed), jax_leaves(straight)):
    # Same operations on the same inputs in the same order on one CPU: bit-identical.
    np.testing.assert_array_equal(a, b)


def jax_leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_members_have_higher_loss_scores_after_8_epochs(tiny_run):
  cfg, out, _, tokenizer = tiny_run
  texts, labels = mb.read_jsonl(os.path.join(out, "eval_main.jsonl"))
  ids_NxT, mask_NxT = per_token.encode_batch(tokenizer, texts, cfg.features.max_length)
  gaps = {}
  for epoch in (1, 8):
    lp_NxT = per_token.causal_lm_statistics(hf_convert.from_pretrained(mb.target_checkpoint(out, epoch)), ids_NxT,
                                            mask_NxT)[0]
    ll_N = attacks.loss(lp_NxT)
    gaps[epoch] = ll_N[labels == 1].mean() - ll_N[labels == 0].mean()
    if epoch == 8:
      # 24 + 24 texts: under no membership signal the AUC's standard deviation is sqrt((n1 + n2 + 1) / (12 n1 n2))
      # = 0.084, so 0.7 is 2.4 of them above chance (one-sided p < 0.01).
      assert roc_auc_score(labels, ll_N) > 0.7
  assert gaps[8] > 0
  assert gaps[8] > gaps[1]  # more epochs, more memorisation
