"""Tests for training.pipeline: run folder, resumption, bad input (the commands that run it: tests/e2e/)."""

import json
import os

import numpy as np
import pytest

import lira
from attacks.shadow import ShadowRun
from experiments.configs import lstm as lstm_configs
from experiments.configs import pythia as pythia_configs
from lira import dp_audit
from lira.errors import MissingFileError
import run_folder
from resume_check import assert_killed_run_resumes
from training import checkpoints
from training import data as data_lib
from training import group_files
from training import model_setup
from training import pipeline
from training import run_config
from training import run_data
from training import shadow_model
from training import trainer


@pytest.fixture(autouse=True)
def _use_small_corpus(monkeypatch, small_corpus):
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: small_corpus)


def _override(cfg, overrides):
  for key, value in overrides.items():
    *sections, field = key.split("__")
    node = cfg
    for section in sections:
      node = node[section]
    node[field] = value
  return cfg


def tiny_cfg(**overrides):
  return _override(lstm_configs.get_config("tiny"), overrides)


def pythia_cfg(**overrides):
  return _override(pythia_configs.get_config("tiny"), overrides)


def _finished(tmp_path_factory, small_corpus, cfg, name):
  mp = pytest.MonkeyPatch()
  mp.setattr(run_data, "_corpus", lambda cfg: small_corpus)
  run_dir = str(tmp_path_factory.mktemp(name))
  assert pipeline.run(cfg, run_dir, progress=False)
  mp.undo()
  return run_dir


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, small_corpus):
  return _finished(tmp_path_factory, small_corpus, tiny_cfg(), "run")


@pytest.mark.slow
def test_tiny_run_writes_the_run_folder_lira_reads(finished_run):
  cfg = tiny_cfg()
  M, N, T = cfg.shadow.num_models, cfg.canaries.num_canaries, cfg.data.seq_len
  run = run_folder.load_run(finished_run)
  assert run.loss_MxNxT.shape == (M, N, T) and run.loss_MxNxT.dtype == np.float32
  assert np.isfinite(run.loss_MxNxT).all() and (run.loss_MxNxT >= 0).all()
  np.testing.assert_array_equal(run.keep_MxN.sum(axis=0), M // 2)
  canaries_NxT = np.load(os.path.join(finished_run, "canaries.npy"))
  assert canaries_NxT.shape == (N, T) and canaries_NxT.dtype == np.int32
  tokenizer = data_lib.load_tokenizer(os.path.join(finished_run, "tokenizer.json"))
  assert canaries_NxT.max() < data_lib.vocab_size(tokenizer)
  assert not (canaries_NxT == data_lib.bos_id(tokenizer)).any()
  assert run.config["shadow"]["num_models"] == M and run.config["model"]["name"] == "lstm"
  for stat in ("mu", "sigma"):  # per-token moments of ln p over the vocabulary, beside the losses
    assert np.load(os.path.join(finished_run, f"{stat}.npy")).shape == (M, N, T)
  groups = -(-M // cfg.shadow.group_size)
  assert sorted(os.listdir(os.path.join(finished_run, "checkpoints"))) == [f"group_{g:04d}" for g in range(groups)]
  assert not [f for f in os.listdir(finished_run) if ".tmp" in f]


@pytest.mark.slow
def test_losses_are_the_checkpointed_models_losses(finished_run):
  """losses.npy holds -ln p of each canary token under the saved parameters of each model."""
  cfg = tiny_cfg()
  import orbax.checkpoint as ocp
  from flax import nnx
  import jax
  tokenizer = data_lib.load_tokenizer(os.path.join(finished_run, "tokenizer.json"))
  data = run_data.prepare_data(cfg, finished_run, progress=False)
  model = model_setup.build_model(cfg, data, finished_run, progress=False)
  params = ocp.StandardCheckpointer().restore(os.path.abspath(os.path.join(finished_run, "checkpoints", "group_0001")))
  state = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), 3)))
  nnx.replace_by_pure_dict(state, params)
  canaries_NxT = np.load(os.path.join(finished_run, "canaries.npy"))
  one = jax.tree.map(lambda x: x[1], state)  # model 4 = second model of group 1
  loss_NxT = trainer.token_losses(model, one, canaries_NxT, data_lib.bos_id(tokenizer))
  # Same params, same loss function; only the forward pass's rounding order differs (vmapped over the group,
  # batched): ~1e-7 relative on O(3) losses.
  np.testing.assert_allclose(np.load(os.path.join(finished_run, "losses.npy"))[4], loss_NxT, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_group_checkpointed_as_a_npy_folder_loads_as_its_orbax_checkpoint(tmp_path, finished_run):
  """A jax.distributed run checkpoints a group as one .npy per parameter (training/checkpoints.py): the shadow-model
  loader reads that folder as it reads orbax's, to the same parameters."""
  import shutil
  import jax
  from flax import nnx
  run_dir = str(tmp_path / "run")
  shutil.copytree(finished_run, run_dir)
  orbax_module, _, _ = shadow_model.load_shadow_model(run_dir, 4)
  ckpt = run_folder.group_paths(run_dir, 1)[0]
  params = checkpoints.checkpointer().restore(os.path.abspath(ckpt))
  shutil.rmtree(ckpt)
  for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
    run_folder.save_npy(os.path.join(ckpt, checkpoints.npy_name(path)), np.asarray(x))
  assert not os.path.exists(os.path.join(ckpt, "_CHECKPOINT_METADATA"))
  npy_module, _, _ = shadow_model.load_shadow_model(run_dir, 4)
  want, got = jax.tree.leaves(nnx.state(orbax_module)), jax.tree.leaves(nnx.state(npy_module))
  assert len(want) == len(got) > 0
  for a, b in zip(want, got):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _mtimes(folder):
  return {os.path.relpath(os.path.join(d, f), folder): os.stat(os.path.join(d, f)).st_mtime_ns
          for d, _, files in os.walk(folder) for f in files}


@pytest.mark.slow
def test_a_finished_run_reruns_without_writing_anything(finished_run, monkeypatch):
  """A finished run folder can be re-run read-only: no file is rewritten (root ignores chmod, so mtimes and a
  writer that fails stand in for a read-only folder)."""
  before = _mtimes(finished_run)
  for writer in ("save_npy", "save_json", "save_text", "save_bytes"):
    monkeypatch.setattr(run_folder, writer,
                        lambda *a, _w=writer, **k: pytest.fail(f"run_folder.{_w}{a[:1]} on a re-run"))
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a finished group"))
  assert pipeline.run(tiny_cfg(), finished_run, progress=False)
  assert _mtimes(finished_run) == before


@pytest.mark.slow
def test_a_run_from_before_top1_gets_it_from_its_checkpoints(tmp_path, monkeypatch, finished_run):
  """A finished run without the top-1 files (canaries' and population's, group and stacked): re-running it scores
  each group's checkpoint for them, retrains nothing and leaves the losses it has untouched."""
  import shutil
  run_dir = str(tmp_path / "run")
  shutil.copytree(finished_run, run_dir)
  top1 = ["top1.npy", "population_top1.npy"] + [os.path.join("losses", f"group_{g:04d}_{kind}top1.npy")
                                                for g in range(2) for kind in ("", "population_")]
  for name in top1:
    os.remove(os.path.join(run_dir, name))
  assert not group_files.is_finished(tiny_cfg(), run_dir)
  with pytest.raises(MissingFileError, match=r"top1.npy: the models' top-1 correctness per token.*python -m "
                     r"experiments.train_shadows --run_dir=.* adds it from the groups' checkpoints"):
    ShadowRun.load(run_dir).top1()
  kept = {n: os.path.getmtime(os.path.join(run_dir, n)) for n in ("losses.npy", "population_losses.npy",
                                                                  os.path.join("losses", "group_0000.npy"))}
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a finished group"))
  assert pipeline.run(tiny_cfg(), run_dir, progress=False)
  for name in top1:  # the same forward pass of the same parameters: the same bits
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, name)), np.load(os.path.join(finished_run, name)),
                                  err_msg=name)
  assert {n: os.path.getmtime(os.path.join(run_dir, n)) for n in kept} == kept
  assert group_files.is_finished(tiny_cfg(), run_dir)


@pytest.mark.slow
def test_assemble_names_groups_without_mu_or_sigma(tmp_path, finished_run):
  """A group extracted without mu / sigma files: losses.npy is still assembled; mu.npy is not, with a warning that
  names the missing file."""
  import shutil
  run_dir = str(tmp_path / "run")
  shutil.copytree(finished_run, run_dir)
  for name in ("losses.npy", "mu.npy", "sigma.npy", os.path.join("losses", "group_0001_mu.npy")):
    os.remove(os.path.join(run_dir, name))
  missing = r"mu.npy not written: 1 group\(s\) have no mu file \(losses/group_0001_mu.npy\)"
  with pytest.warns(UserWarning, match=missing):
    assert group_files.assemble(tiny_cfg(), run_dir)
  assert not os.path.exists(os.path.join(run_dir, "mu.npy"))
  for name in ("losses", "sigma"):
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(finished_run, f"{name}.npy")), err_msg=name)


@pytest.mark.slow
def test_a_killed_run_resumes_to_identical_arrays(tmp_path, monkeypatch, finished_run):
  assert_killed_run_resumes(tiny_cfg(), str(tmp_path / "run"), finished_run, monkeypatch)


@pytest.mark.slow
def test_a_run_split_over_two_processes_equals_one_process(tmp_path, finished_run):
  run_dir = str(tmp_path / "run")
  assert not pipeline.run(tiny_cfg(), run_dir, process_id=1, num_processes=2, progress=False)
  assert sorted(os.listdir(os.path.join(run_dir, "losses"))) == [
      "group_0001.npy", "group_0001_mu.npy", "group_0001_population.npy", "group_0001_population_top1.npy",
      "group_0001_sigma.npy", "group_0001_top1.npy"]
  assert pipeline.run(tiny_cfg(), run_dir, process_id=0, num_processes=2, progress=False)
  for name in ("losses", "population_losses"):
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(finished_run, f"{name}.npy")), err_msg=name)


@pytest.mark.slow
def test_a_diverging_group_names_the_model_and_keeps_finished_groups(tmp_path, monkeypatch):
  run_dir = str(tmp_path / "run")
  real_train = trainer.train_group

  def diverge_second_group(model, examples, ids, model_ids, config, **kwargs):
    if model_ids[0] == 3:
      config = trainer.TrainConfig(config.epochs, config.batch_size, float("inf"), config.weight_decay, config.seed)
    return real_train(model, examples, ids, model_ids, config, **kwargs)

  monkeypatch.setattr(trainer, "train_group", diverge_second_group)
  with pytest.raises(trainer.TrainingDiverged, match="model 3 has a non-finite training loss"):
    pipeline.run(tiny_cfg(), run_dir, progress=False)
  assert sorted(os.listdir(os.path.join(run_dir, "losses"))) == [
      "group_0000.npy", "group_0000_mu.npy", "group_0000_population.npy", "group_0000_population_top1.npy",
      "group_0000_sigma.npy", "group_0000_top1.npy"]
  assert os.listdir(os.path.join(run_dir, "checkpoints")) == ["group_0000"]


@pytest.mark.parametrize("overrides, message", [
    (dict(shadow__num_models=5), r"shadow.num_models must be even"),
    (dict(shadow__group_size=0), r"shadow.group_size must be a positive integer, \"auto\" or \"fastest\", got 0"),
    (dict(canaries__kind="best"), r"canaries.kind must be 'worst' or 'average'"),
    (dict(canaries__kind="average", canaries__num_canaries=100_000),
     r"canaries.num_canaries=100000 is more than the \d+ distinct held-out sequences"),
    (dict(data__seq_len=10_000_000), r"data.seq_len=10000000 is longer than the training split allows"),
    (dict(data__max_train_sequences=3), r"leaves only 3 training sequences"),
    (dict(train__dp__epsilon=0.0), r"train.dp.epsilon must be > 0"),
    (dict(train__dp__epsilon=2.0, train__dp__delta=1.5), r"train.dp.delta must be in \(0, 1\)"),
    (dict(train__dp__noise_multiplier=1.0, train__dp__clip_norm=0.0), r"train.dp.clip_norm must be > 0"),
])
def test_bad_config_is_refused_before_training(tmp_path, monkeypatch, overrides, message):
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(ValueError, match=message):
    pipeline.run(tiny_cfg(**overrides), str(tmp_path / "run"), progress=False)


def test_a_run_folder_of_another_config_is_refused(tmp_path, monkeypatch):
  run_dir = str(tmp_path / "run")
  os.makedirs(run_dir)
  run_config.check_config(tiny_cfg(), run_dir)
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(ValueError, match=r"different config(.|\n)*train.epochs: run folder has 2, this command has 3"):
    pipeline.run(tiny_cfg(train__epochs=3), run_dir, progress=False)
  with open(os.path.join(run_dir, "config.json")) as f:
    assert json.load(f)["train"]["epochs"] == 2  # the folder's record is untouched


def test_a_tokenizer_with_another_vocabulary_is_refused_on_resume(tmp_path, monkeypatch, small_corpus):
  texts = data_lib.conversation_texts(small_corpus)
  tok_path = str(tmp_path / "tok.json")
  data_lib.train_bpe_tokenizer(texts, 300, tok_path)
  cfg = tiny_cfg(tokenizer__name=tok_path)
  run_dir = str(tmp_path / "run")
  os.makedirs(run_dir)
  run_config.check_config(cfg, run_dir)
  run_data.prepare_data(cfg, run_dir, progress=False)  # the run started with this tokenizer
  data_lib.train_bpe_tokenizer(texts, 280, tok_path)  # then the file changed
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(ValueError, match=r"tokenizer .*tok.json.* has a different vocabulary"):
    pipeline.run(cfg, run_dir, progress=False)


# ---------------------------------------------------------------- fine-tuned GPT-NeoX (pythia configs)


@pytest.fixture(scope="module")
def pythia_run(tmp_path_factory, small_corpus):
  return _finished(tmp_path_factory, small_corpus, pythia_cfg(), "pythia")


@pytest.mark.slow
def test_pythia_run_pretrains_a_base_then_fine_tunes_copies_of_it(pythia_run):
  from models import hf_convert
  cfg = pythia_cfg()
  M, N, T = cfg.shadow.num_models, cfg.canaries.num_canaries, cfg.data.seq_len
  base = os.path.join(pythia_run, "base_model")
  assert sorted(os.listdir(base)) == ["config.json", "model.safetensors", "tokenizer.json"]
  base_model = hf_convert.from_pretrained(base)
  assert base_model.config.hidden_size == cfg.model.arch.hidden_size
  run = run_folder.load_run(pythia_run)
  assert run.loss_MxNxT.shape == (M, N, T)
  mu_MxNxT, sigma_MxNxT = (np.load(os.path.join(pythia_run, f"{s}.npy")) for s in ("mu", "sigma"))
  assert mu_MxNxT.shape == sigma_MxNxT.shape == (M, N, T) and mu_MxNxT.dtype == np.float32
  assert (mu_MxNxT <= 0).all() and (sigma_MxNxT >= 0).all()
  # The stored statistics are those of the checkpointed copy: restore model 4 and recompute.
  import jax
  import orbax.checkpoint as ocp
  from flax import nnx
  from models import token_loss
  data = run_data.prepare_data(cfg, pythia_run, progress=False)
  model = model_setup.build_model(cfg, data, pythia_run, progress=False)
  params = ocp.StandardCheckpointer().restore(os.path.abspath(os.path.join(pythia_run, "checkpoints", "group_0001")))
  state = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), 3)))
  nnx.replace_by_pure_dict(state, params)
  one = jax.tree.map(lambda x: x[1], state)
  canaries_NxT = np.load(os.path.join(pythia_run, "canaries.npy"))
  loss, mu, sigma, top1 = token_loss.sequence_statistics(lambda x, m: model.apply(one, x, m), canaries_NxT,
                                                         bos_id=data.bos_id)
  for ours, stored in zip((loss, mu, sigma), (run.loss_MxNxT[4], mu_MxNxT[4], sigma_MxNxT[4])):
    np.testing.assert_allclose(stored, ours, rtol=1e-5, atol=1e-5)  # same params; rounding order only (~1e-6)
  # top1 is the argmax of the same logits: it could differ only where the top two logits are within that rounding
  top1_MxNxT = np.load(os.path.join(pythia_run, "top1.npy"))
  assert top1_MxNxT.dtype == bool and top1_MxNxT.shape == run.loss_MxNxT.shape
  np.testing.assert_array_equal(top1_MxNxT[4], top1)
  # fine-tuning moved the copy away from the base
  base_params = nnx.state(base_model, nnx.Param)
  assert not np.allclose(one["embed_in"]["embedding"], base_params["embed_in"]["embedding"])


@pytest.mark.slow
def test_a_fine_tuning_run_records_the_canaries_losses_on_its_base_model(pythia_run, finished_run):
  from models import token_loss
  base_NxT = np.load(os.path.join(pythia_run, "base_losses.npy"))  # what WBC compares each fine-tuned copy with
  data = run_data.prepare_data(pythia_cfg(), pythia_run, progress=False)
  model = model_setup.build_model(pythia_cfg(), data, pythia_run, progress=False)  # the saved base: model.pretrained
  canaries_NxT = np.load(os.path.join(pythia_run, "canaries.npy"))
  loss, _, _, top1 = token_loss.sequence_statistics(lambda x, m: model.apply(model.pretrained, x, m), canaries_NxT,
                                                    bos_id=data.bos_id)
  assert base_NxT.shape == canaries_NxT.shape and base_NxT.dtype == np.float32
  np.testing.assert_allclose(base_NxT, loss, rtol=1e-5, atol=1e-5)  # same params; rounding order only (~1e-6)
  np.testing.assert_array_equal(np.load(os.path.join(pythia_run, "base_top1.npy")), top1)  # the same logits' argmax
  assert not np.allclose(base_NxT, np.load(os.path.join(pythia_run, "losses.npy"))[0])  # the copies moved away
  assert not os.path.exists(os.path.join(finished_run, "base_losses.npy"))  # an LSTM trained from scratch has none


@pytest.mark.slow
def test_pythia_run_resumes_without_pretraining_again(tmp_path, monkeypatch, pythia_run):
  import shutil
  run_dir = str(tmp_path / "run")
  shutil.copytree(pythia_run, run_dir)
  os.remove(os.path.join(run_dir, "losses", "group_0001.npy"))
  os.remove(os.path.join(run_dir, "losses.npy"))
  monkeypatch.setattr(model_setup, "pretrain_base", lambda *a, **k: pytest.fail("pretrained again"))
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a checkpointed group"))
  assert pipeline.run(pythia_cfg(), run_dir, progress=False)
  np.testing.assert_array_equal(np.load(os.path.join(run_dir, "losses.npy")),
                                np.load(os.path.join(pythia_run, "losses.npy")))


@pytest.mark.slow
def test_a_base_checkpoint_smaller_than_the_vocabulary_is_refused(tmp_path, pythia_run, monkeypatch):
  from models import gpt_neox, hf_convert
  small = gpt_neox.GPTNeoXForCausalLM(gpt_neox.GPTNeoXConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                                             num_attention_heads=2, intermediate_size=32),
                                      rngs=__import__("flax").nnx.Rngs(0))
  hf_convert.save_pretrained(small, tmp_path / "small")
  cfg = pythia_cfg()
  cfg.model.base = str(tmp_path / "small")
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(ValueError, match=r"model.base .*small.* embeds 50 token ids but the tokenizer 'bpe' has 300"):
    pipeline.run(cfg, str(tmp_path / "run"), progress=False)


@pytest.mark.slow
def test_pythia_base_folder_loads_in_transformers_with_the_same_logits(pythia_run):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from models import hf_convert
  import jax.numpy as jnp
  base = os.path.join(pythia_run, "base_model")
  hf = transformers.GPTNeoXForCausalLM.from_pretrained(base, attn_implementation="eager").eval()
  tokens_BxT = np.load(os.path.join(pythia_run, "canaries.npy"))[:4]
  with torch.no_grad():
    theirs = hf(torch.from_numpy(tokens_BxT.astype(np.int64))).logits.numpy()
  ours = np.asarray(hf_convert.from_pretrained(base)(jnp.asarray(tokens_BxT)))
  # torch and XLA round differently (test_gpt_neox.assert_logits_close: ~1e-6 relative on O(1-10) logits); 1e-4
  # leaves room for a trained base's larger logits and stays far below the O(0.1-1) a conversion error causes.
  np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_pythia_configs_hold_table_one_and_are_reachable_from_lstm_py():
  paper = pythia_configs.get_config("pythia")
  assert (paper.train.epochs, paper.train.learning_rate, paper.train.weight_decay, paper.train.batch_size) == (
      7, 1e-4, 1e-4, 16)  # Rossi et al. 2025, Table I
  assert (paper.data.seq_len, paper.shadow.num_models, paper.canaries.num_canaries) == (128, 64, 10_000)
  assert paper.model.base == paper.tokenizer.name == "EleutherAI/pythia-1b-deduped"
  for arg in ("pythia", "pythia_tiny"):
    assert lstm_configs.get_config(arg).to_dict() == pythia_configs.get_config(arg).to_dict()
  with pytest.raises(ValueError, match="unknown Pythia config 'pythia-1b'"):
    pythia_configs.get_config("pythia-1b")


def test_a_dp_run_records_each_models_epsilon_no_audit_exceeds_it_and_it_resumes(tmp_path):
  cfg = tiny_cfg(train__dp__epsilon=2.0, canaries__num_canaries=64)
  run_dir = str(tmp_path / "run")
  assert pipeline.run(cfg, run_dir, progress=False)
  record = run_folder.load_config(run_dir)["accountant"]
  eps_M = np.array(record["epsilon_per_model"])
  assert len(eps_M) == 6 and eps_M.max() == record["epsilon"] <= 2.0
  assert record["noise_multiplier"] > 0 and record["target_epsilon"] == 2.0 and record["delta"] == 1e-5
  loss_MxNxT, keep_MxN = np.load(os.path.join(run_dir, "losses.npy")), np.load(os.path.join(run_dir, "keep.npy"))
  assert np.isfinite(loss_MxNxT).all()
  # No empirical lower bound may exceed the accountant's epsilon: every LiRA variant and the Loss attack, per model
  # and pooled, every method (a bound above it would mean a bug in the training, the accounting or the audit).
  scores = lira.leave_one_out_variants(loss_MxNxT, keep_MxN, [lira.Scoring(covariance=c, shared=sh)
                                                              for _, c, sh in lira.VARIANTS])
  scores.append(-loss_MxNxT.mean(axis=2))
  for llr_MxN in scores:
    for method in dp_audit.METHODS:
      per_model = [b.epsilon for b in dp_audit.model_bounds(llr_MxN, keep_MxN, method=method)]
      assert np.all(np.array(per_model) <= eps_M), (method, per_model)
      assert dp_audit.pooled_bound(llr_MxN, keep_MxN, method=method).epsilon <= record["epsilon"]
  assert pipeline.run(cfg, run_dir, progress=False)  # the recorded accountant entry is no config difference
  with pytest.raises(ValueError, match=r"train.dp.epsilon: run folder has 2.0, this command has 4.0"):
    pipeline.run(tiny_cfg(train__dp__epsilon=4.0, canaries__num_canaries=64), run_dir, progress=False)


def test_a_folder_recorded_before_the_dp_block_resumes_without_dp_only(tmp_path, monkeypatch):
  run_dir = str(tmp_path / "run")
  os.makedirs(run_dir)
  run_config.check_config(tiny_cfg(), run_dir)
  config = run_folder.load_config(run_dir)
  del config["train"]["dp"]
  run_folder.save_config(run_dir, config)
  run_config.check_config(tiny_cfg(), run_dir)  # DP off: the same config
  with pytest.raises(ValueError, match=r"train.dp: run folder has '<missing>'"):
    run_config.check_config(tiny_cfg(train__dp__epsilon=1.0), run_dir)
