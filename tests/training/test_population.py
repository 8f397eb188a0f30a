"""RMIA's population (training/population.py, training/population_run.py): never a canary nor a training row, scored on
the checkpointed models by the canaries' loss code, added to a finished run with the files a run trained with it has,
and run folders from before the `population` block (the command: tests/e2e/test_population_losses_command.py)."""

import json
import os
import shutil

import ml_collections
import numpy as np
import pytest

from lira.errors import InputError
import run_folder
from lira.reports import synthetic_run
from resume_check import Killed
from test_pipeline import _finished, tiny_cfg
from training import checkpoints
from training import group_files
from training import model_setup
from training import pipeline
from training import population
from training import population_run
from training import run_config
from training import run_data
from training import trainer


@pytest.fixture(autouse=True)
def _use_small_corpus(monkeypatch, small_corpus):
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: small_corpus)


def _rows(array):
  return {row.tobytes() for row in np.ascontiguousarray(array).reshape(len(array), -1)}


def _cfg(size, source="auto", kind="worst"):
  return ml_collections.ConfigDict(dict(population=dict(size=size, source=source), shadow=dict(seed=0),
                                        canaries=dict(kind=kind), model=dict(image_shape=(2, 2, 1), num_levels=2)))


# ---------------------------------------------------------------- drawing (no training)


def test_random_rows_equal_to_a_canary_or_a_training_row_are_drawn_again():
  """Tokens 1..3 (0 is BOS), T = 2: 9 possible rows, 6 of them canaries or training rows, so most first draws hit one."""
  canaries = np.array([[1, 1], [1, 2], [2, 1], [2, 2]], np.int32)
  train = np.array([[3, 3], [1, 3]], np.int32)
  pop = population.sequences(_cfg(40), canaries, train, None, vocab_size=4, bos_id=0)
  assert pop.shape == (40, 2) and pop.dtype == np.int32
  assert _rows(pop) <= {np.array(r, np.int32).tobytes() for r in ([2, 3], [3, 1], [3, 2])}
  np.testing.assert_array_equal(pop, population.sequences(_cfg(40), canaries, train, None, 4, 0))  # seeded
  first = population.sequences(_cfg(40), canaries[:0], train[:0], None, 4, 0)
  canary_stream = np.random.default_rng(0).integers(3, size=(40, 2)) + 1
  assert not np.array_equal(first, canary_stream)  # not the canaries' stream


def test_held_out_rows_are_distinct_and_neither_canaries_nor_training_rows():
  heldout = np.array([[5, 5], [5, 5], [6, 6], [7, 7], [8, 8], [9, 9]], np.int32)  # a twin, a canary, a training row
  canaries, train = np.array([[6, 6]], np.int32), np.array([[7, 7], [1, 1]], np.int32)
  for kind, source in (("average", "auto"), ("worst", "heldout")):
    pop = population.sequences(_cfg(3, source, kind), canaries, train, heldout, 10, 0)
    assert sorted(map(tuple, pop.tolist())) == [(5, 5), (8, 8), (9, 9)]
  with pytest.raises(InputError, match=r"population.size=4 is more than the 3 distinct held-out sequences that are "
                                       r"neither canaries nor training data"):
    population.sequences(_cfg(4, "heldout"), canaries, train, heldout, 10, 0)
  assert population.sequences(_cfg(0, "heldout"), canaries, train, heldout, 10, 0) is None


def test_images_random_or_held_out():
  canaries = np.zeros((1, 2, 2, 1), np.uint8)
  pop = population.images(_cfg(20), canaries, canaries[:0], None)  # 16 possible images, one a canary
  assert pop.shape == (20, 2, 2, 1) and pop.dtype == np.uint8 and pop.max() <= 1
  assert not _rows(pop) & _rows(canaries)
  heldout = np.arange(5, dtype=np.uint8).reshape(5, 1, 1, 1).repeat(4, axis=1).reshape(5, 2, 2, 1)
  pop = population.images(_cfg(4, "heldout"), heldout[:1], canaries, heldout)
  assert _rows(pop) == _rows(heldout[1:])


@pytest.mark.parametrize("overrides, message", [
    (dict(population__size=-1), r"population.size must be an integer >= 0 \(0: no population\), got -1"),
    (dict(population__source="best"), r"population.source must be one of auto, heldout, got 'best'"),
    (dict(population__source="heldout", population__size=100_000),
     r"population.size=100000 is more than the \d+ distinct held-out sequences"),
    (dict(canaries__kind="average", population__size=100_000), r"population.size=100000 is more than the \d+"),
])
def test_bad_population_settings_are_refused_before_training(tmp_path, monkeypatch, overrides, message):
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("training started"))
  with pytest.raises(InputError, match=message):
    pipeline.run(tiny_cfg(**overrides), str(tmp_path / "run"), progress=False)
  assert not os.path.exists(tmp_path / "run" / "population.npy")


def test_a_config_json_from_before_the_block_matches_any_population_and_runs_without_one(tmp_path):
  run_dir = str(tmp_path / "run")
  os.makedirs(run_dir)
  run_config.check_config(run_config.without_section(tiny_cfg(), "population"), run_dir)  # as before the block
  cfg = tiny_cfg(population__size=8)
  run_config.check_config(cfg, run_dir)
  assert "population" not in run_config.effective_config(cfg, run_dir)
  assert run_config.effective_config(cfg, run_dir, population_given=True) is cfg
  assert "population" not in run_config.effective_config(tiny_cfg(population__size=0), run_dir, population_given=True)
  run_config.record_population(cfg, run_dir)
  assert run_folder.load_config(run_dir)["population"] == {"size": 8, "source": "auto"}
  with pytest.raises(InputError, match=r"population.size: run folder has 8, this command has 16\n  \(python -m "
                                       r"experiments.population_losses --run_dir=.* gives a finished run another"):
    run_config.check_config(tiny_cfg(), run_dir)


# ---------------------------------------------------------------- a tiny run with its population


@pytest.fixture(scope="module")
def pop_run(tmp_path_factory, small_corpus):
  return _finished(tmp_path_factory, small_corpus, tiny_cfg(), "pop")


@pytest.mark.slow
def test_the_population_is_neither_a_canary_nor_trained_on(pop_run):
  cfg = tiny_cfg()
  Z, T, M = cfg.population.size, cfg.data.seq_len, cfg.shadow.num_models
  pop_ZxT = np.load(os.path.join(pop_run, "population.npy"))
  assert pop_ZxT.shape == (Z, T) and pop_ZxT.dtype == np.int32
  data = run_data.prepare_data(cfg, pop_run, progress=False)
  np.testing.assert_array_equal(data.population_ZxT, pop_ZxT)
  bos = data.bos_id
  assert not (pop_ZxT == bos).any() and pop_ZxT.max() < data.vocab_size  # drawn as the worst-case canaries are
  assert not _rows(pop_ZxT) & _rows(data.canaries_NxT)
  assert not _rows(pop_ZxT) & (_rows(data.examples_ExT) | _rows(data.pretrain_SxT))  # every model's data
  pop_MxZxT = np.load(os.path.join(pop_run, "population_losses.npy"))
  assert pop_MxZxT.shape == (M, Z, T) and pop_MxZxT.dtype == np.float32
  assert run_folder.load_population(pop_run)[1] is None  # the pipeline scores every position: no mask
  with open(os.path.join(pop_run, "config.json")) as f:
    assert json.load(f)["population"] == {"size": Z, "source": "auto"}


@pytest.mark.slow
def test_population_losses_are_the_checkpointed_models_losses(pop_run):
  """Model 4 (second of group 1) restored from its checkpoint, its per-token losses of the population computed
  directly: -ln p(x_t | BOS, x_<t) at every position."""
  import jax
  from flax import nnx
  cfg = tiny_cfg()
  data = run_data.prepare_data(cfg, pop_run, progress=False)
  model = model_setup.build_model(cfg, data, pop_run, progress=False)
  target = nnx.to_pure_dict(trainer.abstract_stack(model, 3))
  params = checkpoints.restore(run_folder.group_paths(pop_run, 1)[0], target)
  state = jax.eval_shape(lambda: trainer.init_stack(model, jax.random.split(jax.random.PRNGKey(0), 3)))
  nnx.replace_by_pure_dict(state, params)
  pop_ZxT = np.load(os.path.join(pop_run, "population.npy"))
  loss_ZxT = np.asarray(trainer.token_losses(model, jax.tree.map(lambda x: x[1], state), pop_ZxT, data.bos_id))
  # Same params and loss function; only the forward pass's rounding order differs (vmapped over the group,
  # batched): ~1e-7 relative on O(3) losses.
  np.testing.assert_allclose(np.load(os.path.join(pop_run, "population_losses.npy"))[4], loss_ZxT, rtol=1e-5,
                             atol=1e-6)


# ---------------------------------------------------------------- a run folder from before the population block


@pytest.fixture(scope="module")
def old_run(tmp_path_factory, small_corpus):
  """A run started by a config without the `population` block, killed in its second group, then resumed by today's
  config (whose block asks for 16)."""
  mp = pytest.MonkeyPatch()
  mp.setattr(run_data, "_corpus", lambda cfg: small_corpus)
  run_dir = str(tmp_path_factory.mktemp("old"))
  real_train, calls = trainer.train_group, []

  def killed_in_second_group(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise Killed()
    return real_train(*args, **kwargs)

  mp.setattr(trainer, "train_group", killed_in_second_group)
  with pytest.raises(Killed):
    pipeline.run(run_config.without_section(tiny_cfg(), "population"), run_dir, progress=False)
  mp.setattr(trainer, "train_group", real_train)
  assert pipeline.run(tiny_cfg(), run_dir, progress=False)
  mp.undo()
  return run_dir


def _population_files(run_dir):
  return sorted(n for d, _, files in os.walk(run_dir) for n in files if "population" in n)


@pytest.mark.slow
def test_an_old_folder_resumes_and_assembles_without_a_population(old_run, pop_run):
  assert _population_files(old_run) == []
  with open(os.path.join(old_run, "config.json")) as f:
    assert "population" not in json.load(f)
  # the population changes no model: the old folder's models are the population run's
  np.testing.assert_array_equal(np.load(os.path.join(old_run, "losses.npy")),
                                np.load(os.path.join(pop_run, "losses.npy")))
  assert group_files.is_finished(run_config.effective_config(tiny_cfg(), old_run), old_run)
  assert not group_files.is_finished(run_config.effective_config(tiny_cfg(), old_run, population_given=True), old_run)


@pytest.mark.slow
def test_a_population_given_on_resume_scores_the_finished_groups(tmp_path, monkeypatch, old_run, pop_run):
  """train_shadows with --config.population.* on an old folder: its finished groups are restored and scored, not
  retrained, into the files a run trained with the population has."""
  run_dir = str(tmp_path / "run")
  shutil.copytree(old_run, run_dir)
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a finished group"))
  assert pipeline.run(tiny_cfg(), run_dir, progress=False, population_given=True)
  for name in ("population", "population_losses"):
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(pop_run, f"{name}.npy")), err_msg=name)
  with open(os.path.join(run_dir, "config.json")) as f:
    assert json.load(f)["population"] == {"size": 16, "source": "auto"}


def _mtimes(folder):
  return {os.path.relpath(os.path.join(d, f), folder): os.stat(os.path.join(d, f)).st_mtime_ns
          for d, _, files in os.walk(folder) for f in files}


@pytest.mark.slow
def test_adding_a_population_to_a_finished_run_equals_training_with_it(tmp_path, monkeypatch, old_run, pop_run):
  run_dir = str(tmp_path / "run")
  shutil.copytree(old_run, run_dir)
  monkeypatch.setattr(trainer, "train_group", lambda *a, **k: pytest.fail("retrained a finished group"))
  there, settings, _ = population_run.add_population(run_dir, 16, "auto", progress=False)
  assert not there and settings == (16, "auto")
  for name in ("population", "population_losses"):
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(pop_run, f"{name}.npy")), err_msg=name)
  # the same settings again: nothing written
  before = _mtimes(run_dir)
  assert population_run.add_population(run_dir, progress=False)[0]  # the recorded size and source by default
  assert _mtimes(run_dir) == before
  with pytest.raises(InputError, match=r"already has a population of 16 \(source auto\) in config.json; pass "
                                       r"--overwrite"):
    population_run.add_population(run_dir, 8, progress=False)
  assert _mtimes(run_dir) == before
  # another population replaces it; a run stopped after one group resumes with the other
  population_run.add_population(run_dir, 8, "heldout", overwrite=True, progress=False)
  os.remove(os.path.join(run_dir, "losses", "group_0001_population.npy"))
  os.remove(os.path.join(run_dir, "population_losses.npy"))
  first_group = os.stat(os.path.join(run_dir, "losses", "group_0000_population.npy")).st_mtime_ns
  population_run.add_population(run_dir, progress=False)
  assert os.stat(os.path.join(run_dir, "losses", "group_0000_population.npy")).st_mtime_ns == first_group
  pop_MxZxT, _ = run_folder.load_population(run_dir)
  assert pop_MxZxT.shape == (6, 8, 12)
  with open(os.path.join(run_dir, "config.json")) as f:
    assert json.load(f)["population"] == {"size": 8, "source": "heldout"}
  pop_ZxT = np.load(os.path.join(run_dir, "population.npy"))
  assert not _rows(pop_ZxT) & _rows(np.load(os.path.join(run_dir, "canaries.npy")))


def test_runs_without_models_are_refused(tmp_path):
  syn = str(tmp_path / "syn")
  synthetic_run.write_synthetic_run(syn, num_models=6, num_canaries=8, seq_len=3)
  with pytest.raises(InputError, match="synthetic run .*make_synthetic --population_size"):
    population_run.add_population(syn, progress=False)
  unfinished = str(tmp_path / "unfinished")
  os.makedirs(unfinished)
  run_config.check_config(tiny_cfg(), unfinished)
  with pytest.raises(InputError, match="not a finished shadow run .*--config.population.size=16"):
    population_run.add_population(unfinished, 16, progress=False)
