"""The features-folder builder (training.pretraining.feature_extraction): contents, prefix removal, agreement with a
full forward pass, resume, bad input. The commands: tests/e2e/test_extract_features_command.py."""

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx

import models
from lira.errors import InputError
from models import hf_convert
from training import data
from training import per_token
from training.pretraining import feature_extraction
from training.pretraining import prefix_lp

WORDS = ("the cat sat on a mat while my dog ran to the park and we all went home after lunch with friends who "
         "like tea or coffee in the morning").split()


def _texts(n, seed):
  rng = np.random.default_rng(seed)
  return [" ".join(rng.choice(WORDS, rng.integers(4, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """A tiny random GPT-NeoX saved as a Hugging Face folder with a BPE trained on the test texts."""
  folder = tmp_path_factory.mktemp("model")
  tok_file = folder / "tok.json"
  tok = data.train_bpe_tokenizer(_texts(200, 1), 300, path=str(tok_file))
  fm = models.get_model("gpt_neox", vocab_size=data.vocab_size(tok), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=96)
  module = nnx.merge(fm.graphdef, fm.init(jax.random.key(0)))
  hf_convert.save_pretrained(module, str(folder / "hf"), tokenizer_file=str(tok_file))
  return str(folder / "hf")


def _labelled(n=16):
  texts = _texts(n, 2)
  return texts, np.array([1, 0] * (n // 2), np.int8)


def test_folder_holds_every_array_and_prefix_texts_leave_the_evaluated_set(model_dir, tmp_path):
  texts, labels = _labelled()
  out = feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, prefix_shots=3, ensemble=2,
                                          pairs=True, reference_model=model_dir,
                                          neighbours=[[t, t + " tea"] for t in texts], neighbour_method="test",
                                          progress=False)
  meta = json.load(open(os.path.join(out, "features.json")))
  prefix = json.load(open(os.path.join(out, "prefix.json")))
  N = len(texts) - 6  # 3 non-member and 3 member shots removed
  assert meta["n_texts"] == N and meta["removed_prefix_texts"] == 6
  source = np.load(os.path.join(out, "source_index.npy"))
  assert not set(source) & set(prefix["nonmember"] + prefix["member"])
  assert [labels[i] for i in prefix["nonmember"]] == [0] * 3 and [labels[i] for i in prefix["member"]] == [1] * 3
  assert json.load(open(os.path.join(out, "texts.json"))) == [texts[i] for i in source]
  T = meta["arrays"]["lp"][1]
  assert meta["arrays"]["cond_lp_shots"] == [3, N, T] and meta["arrays"]["cond_lp_ensemble"] == [2, N, T]
  assert meta["arrays"]["pair_lp"] == [N, N, T] and meta["arrays"]["neighbour_lp"][:2] == [N, 2]
  assert sorted(sum(prefix["ensemble"], [])) == sorted(prefix["nonmember"])
  assert not os.path.exists(os.path.join(out, "pairs"))
  # The reference model is the model itself here: its lp must equal lp, and its top1 top1.
  lp = np.load(os.path.join(out, "lp.npy"))
  np.testing.assert_array_equal(np.load(os.path.join(out, "ref_lp.npy")), lp)
  top1 = np.load(os.path.join(out, "top1.npy"))
  np.testing.assert_array_equal(np.load(os.path.join(out, "ref_top1.npy")), top1)
  assert top1.dtype == bool and meta["arrays"]["top1"] == [N, T] and not top1[~np.isfinite(lp)].any()


def test_ref_kl_is_the_kl_of_the_two_models_distributions_at_each_position(model_dir, tmp_path):
  """A reference on the same tokens (another random init, saved with the same tokenizer): ref_kl against
  KL(p_ref || p) from both models' logits, in float64 by numpy; token-level InfoRMIA reads it."""
  from attacks import informia
  src = hf_convert.from_pretrained(model_dir)
  config = src.config
  fm = models.get_model("gpt_neox", vocab_size=config.vocab_size, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=96)
  ref_dir = str(tmp_path / "ref")
  hf_convert.save_pretrained(nnx.merge(fm.graphdef, fm.init(jax.random.key(7))), ref_dir,
                             tokenizer_file=os.path.join(model_dir, "tokenizer.json"))
  texts, labels = _labelled(6)
  out = feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, reference_model=ref_dir,
                                          progress=False)
  ids, mask = np.load(os.path.join(out, "ids.npy")), np.load(os.path.join(out, "mask.npy"))
  ref = hf_convert.from_pretrained(ref_dir)

  def log_softmax(module):
    z = np.asarray(module(ids, attention_mask=mask), np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

  lp, lp_ref = log_softmax(src), log_softmax(ref)
  want = np.full(ids.shape, np.nan)
  want[:, 1:] = (np.exp(lp_ref[:, :-1]) * (lp_ref[:, :-1] - lp[:, :-1])).sum(axis=-1)
  want[~mask] = np.nan
  ref_kl = np.load(os.path.join(out, "ref_kl.npy"))
  # float32 logits of size ~1 and float32 sums over V = 300 terms against float64: ~1e-6 relative, so 1e-5 absolute
  # on KLs of order 0.01-1
  np.testing.assert_allclose(ref_kl, want, atol=1e-5, rtol=1e-4)
  assert (ref_kl[np.isfinite(ref_kl)] >= -1e-6).all() and np.nanmax(ref_kl) > 1e-3
  s = informia.text_token_scores(np.load(os.path.join(out, "lp.npy")), np.load(os.path.join(out, "ref_lp.npy")),
                                 ref_kl)
  gain = np.load(os.path.join(out, "lp.npy")).astype(np.float64) - np.load(os.path.join(out, "ref_lp.npy"))
  np.testing.assert_allclose(s, (gain + ref_kl) / np.log(2), rtol=1e-12, equal_nan=True)


def test_top1_is_the_argmax_of_the_logits_lp_comes_from(model_dir, tmp_path):
  """top1 from the forward pass that gives lp, against the model's logits taken apart: argmax at t - 1 equals the
  token at t; and a folder built before top1 existed gets it by re-running the build, keeping the arrays it has."""
  from models import hf_convert
  texts, labels = _labelled(6)
  out = feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, progress=False)
  ids, mask = np.load(os.path.join(out, "ids.npy")), np.load(os.path.join(out, "mask.npy"))
  module = hf_convert.from_pretrained(model_dir)
  logits_NxTxV = np.asarray(module(ids, attention_mask=mask))
  want = np.zeros(ids.shape, bool)
  want[:, 1:] = (np.argmax(logits_NxTxV[:, :-1], axis=-1) == ids[:, 1:]) & mask[:, 1:]
  np.testing.assert_array_equal(np.load(os.path.join(out, "top1.npy")), want)
  lp_mtime = os.path.getmtime(os.path.join(out, "lp.npy"))
  os.remove(os.path.join(out, "top1.npy"))
  feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, progress=False)
  np.testing.assert_array_equal(np.load(os.path.join(out, "top1.npy")), want)
  assert os.path.getmtime(os.path.join(out, "lp.npy")) == lp_mtime


def test_cond_lp_equals_the_text_scored_after_the_concatenated_prefix(model_dir, tmp_path):
  """Independent route: one full forward pass of causal_lm_statistics over prefix ids + text ids, sliced."""
  texts, labels = _labelled()
  out = feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, prefix_shots=2, separator=" ",
                                          progress=False)
  tok = data.load_tokenizer(model_dir)
  module = hf_convert.from_pretrained(model_dir)
  prefix = json.load(open(os.path.join(out, "prefix.json")))
  sep = tok.encode(" ", add_special_tokens=False).ids
  shots = sum([tok.encode(texts[i], add_special_tokens=False).ids + sep for i in prefix["nonmember"]], [])
  assert sum([ids + prefix["separator_token_ids"] for ids in prefix["nonmember_token_ids"]], []) == shots
  cond = np.load(os.path.join(out, "cond_lp_shots.npy"))[-1]
  for n, i in enumerate(np.load(os.path.join(out, "source_index.npy"))[:4]):
    ids = tok.encode(texts[i], add_special_tokens=False).ids
    full = np.array([shots + ids], np.int32)
    lp = per_token.causal_lm_statistics(module, full, np.ones_like(full, bool), 1)[0][0, len(shots):]
    # float32 forward passes of the same maths in two orders (cached keys vs one pass): ~1e-6 on O(5) lp values.
    np.testing.assert_allclose(cond[n, :len(ids)], lp, rtol=0, atol=1e-5)
    assert np.isnan(cond[n, len(ids):]).all()


def test_pairs_resume_after_a_kill_without_recomputing_finished_chunks(model_dir, tmp_path, monkeypatch):
  texts, labels = _labelled(40)
  monkeypatch.setattr(feature_extraction, "PAIR_CHUNK", 8)
  whole = feature_extraction.build_features(tmp_path / "a", model_dir, texts, labels, pairs=True, progress=False)
  calls, real = [], prefix_lp.pair_lp

  def dying(*args, rows, **kw):
    calls.append(list(rows))
    if len(calls) == 3:
      raise KeyboardInterrupt  # the kill
    return real(*args, rows=rows, **kw)

  monkeypatch.setattr(prefix_lp, "pair_lp", dying)
  with pytest.raises(KeyboardInterrupt):
    feature_extraction.build_features(tmp_path / "b", model_dir, texts, labels, pairs=True, progress=False)
  assert len(os.listdir(tmp_path / "b" / "pairs")) == 2 and not (tmp_path / "b" / "features.json").exists()
  calls.clear()
  monkeypatch.setattr(prefix_lp, "pair_lp", lambda *a, rows, **kw: (calls.append(list(rows)), real(*a, rows=rows, **kw))[1])
  feature_extraction.build_features(tmp_path / "b", model_dir, texts, labels, pairs=True, progress=False)
  assert calls and calls[0][0] == 16  # chunks [0, 8) and [8, 16) were kept
  np.testing.assert_array_equal(np.load(tmp_path / "b" / "pair_lp.npy"), np.load(os.path.join(whole, "pair_lp.npy")))


def test_bad_input_is_refused_before_any_file_is_written(model_dir, tmp_path):
  texts, labels = _labelled()
  out = tmp_path / "f"
  with pytest.raises(InputError, match="exceeds the model's context"):
    feature_extraction.build_features(out, model_dir, texts * 3, np.tile(labels, 3), prefix_shots=20, progress=False)
  with pytest.raises(InputError, match="known non-members"):
    feature_extraction.build_features(out, model_dir, texts, labels, prefix_shots=8, progress=False)
  with pytest.raises(InputError, match="labels: 3 values"):
    feature_extraction.build_features(out, model_dir, texts, labels[:3], progress=False)
  with pytest.raises(InputError, match="neighbours: 1 lists"):
    feature_extraction.build_features(out, model_dir, texts, labels, neighbours=[["a"]], progress=False)
  assert not out.exists()


def test_prefix_texts_found_among_the_evaluated_texts_are_removed_and_counted(model_dir, tmp_path):
  texts, labels = _labelled()
  out = feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels,
                                          prefix_texts=[texts[3], "a dog ran"], progress=False)
  meta = json.load(open(os.path.join(out, "features.json")))
  assert meta["removed_prefix_texts"] == texts.count(texts[3]) and meta["notes"]
  assert texts[3] not in json.load(open(os.path.join(out, "texts.json")))


def test_other_settings_in_the_same_folder_are_refused_unless_overwritten(model_dir, tmp_path):
  texts, labels = _labelled()
  feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, progress=False)
  with pytest.raises(InputError, match="other settings.*max_length.*choose another --out_dir, or pass --overwrite"):
    feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, max_length=4, progress=False)
  feature_extraction.build_features(tmp_path / "f", model_dir, texts, labels, max_length=4, overwrite=True,
                                    progress=False)
  assert np.load(tmp_path / "f" / "lp.npy").shape[1] == 4


def test_bad_settings_and_models_are_named_before_anything_is_written(model_dir, tmp_path):
  texts, labels = _labelled()
  build = lambda model=model_dir, **kw: feature_extraction.build_features(  # noqa: E731
      tmp_path / "f", model, texts, labels, progress=False, **kw)
  with pytest.raises(InputError, match=r"prefix_shots \(--shots\) must be an integer >= 0, got -1"):
    build(prefix_shots=-1)
  with pytest.raises(InputError, match=r"ensemble \(--ensemble\) must be an integer >= 0"):
    build(ensemble=-2)
  with pytest.raises(InputError, match=r"batch_size \(--batch_size\) must be an integer >= 1"):
    build(batch_size=0)
  # the model is named as the model (not as a missing tokenizer), a run folder asks for --model_id
  with pytest.raises(FileNotFoundError, match=f"model folder {tmp_path}/nope does not exist"):
    build(str(tmp_path / "nope"))
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(json.dumps({"shadow": {"num_models": 6, "group_size": 3}}))
  with pytest.raises(InputError, match="is a shadow run folder of experiments.train_shadows.*--model_id=M"):
    build(str(run))
  with pytest.raises(FileNotFoundError, match="is not a Hugging Face model folder: it has no config.json"):
    build(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="nope does not exist"):  # the reference model before the long work
    build(reference_model=str(tmp_path / "nope"))
  assert not (tmp_path / "f").exists()

