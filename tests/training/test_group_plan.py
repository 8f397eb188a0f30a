"""Tests for training.group_plan and shadow.group_size=auto in training.pipeline: the choice against every candidate
compiled, its record in config.json, a resumed run keeping it, and bad values refused."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import models
from experiments.configs import lstm as lstm_configs
from training import group_plan
from training import plan_table
from training import pipeline
from training import run_config
from training import run_data
from training import trainer

V, D, T, B = 50, 64, 6, 4  # D: the parameters and their AdamW state dominate a group's memory, so it grows with G
# by a model's state, far above the few hundred bytes by which XLA's temporaries differ between layouts


class Bigram(nnx.Module):
  def __init__(self, rngs):
    self.embed = nnx.Embed(V, D, rngs=rngs)
    self.out = nnx.Linear(D, V, rngs=rngs)

  def __call__(self, tokens_BxT):
    return self.out(self.embed(tokens_BxT))


def _bigram_loss(module, tokens_BxT, bos_id, key):
  del key
  inputs = jnp.concatenate([jnp.full_like(tokens_BxT[:, :1], bos_id), tokens_BxT[:, :-1]], axis=1)
  logp = jax.nn.log_softmax(module(inputs))
  return -jnp.take_along_axis(logp, tokens_BxT[..., None], axis=-1)[..., 0]


def _bigram_stats(module, tokens_BxT, bos_id):
  return (_bigram_loss(module, tokens_BxT, bos_id, None),)


MODEL = models.functional("bigram", None, Bigram, loss_fn=_bigram_loss, statistics_fn=_bigram_stats, stat_names=())
SHAPES = group_plan.Shapes((T,), "int32", B, 16, 1e-2, 0.0, bos_id=0)


def test_group_size_values_are_parsed_or_refused_in_one_line():
  assert group_plan.parse("auto") == "auto" and group_plan.parse("AUTO") == "auto"
  assert group_plan.parse("fastest") == "fastest" and group_plan.parse(" Fastest") == "fastest"
  assert group_plan.parse("8") == 8 and group_plan.parse(3) == 3
  assert group_plan.planned("auto") and group_plan.planned("fastest") and not group_plan.planned(8)
  for bad in (0, -1, "0", "abc", "fast", 2.5, True, None):
    with pytest.raises(ValueError, match=r'^shadow.group_size must be a positive integer, "auto" or "fastest", got '):
      group_plan.parse(bad)


def test_candidates_are_powers_of_two_and_divisors_up_to_the_model_count():
  assert group_plan.candidates(6) == [1, 2, 3, 4, 6]
  assert group_plan.candidates(64) == [1, 2, 4, 8, 16, 32, 64]
  assert group_plan.candidates(12, multiple=4) == [4, 8, 12]  # a "models" mesh of 4 devices


@pytest.fixture(scope="module")
def every():
  """Every candidate of M = 6 compiled on its own: the brute force the plan's bisection must agree with."""
  return {G: group_plan.compile_candidate(MODEL, G, SHAPES, 16, budget=0)[0] for G in group_plan.candidates(6)}


@pytest.mark.parametrize("fits_up_to", [0, 1, 3, 6])
def test_the_plan_chooses_the_largest_candidate_whose_programs_fit(every, fits_up_to):
  # the limit is set between two candidates' memory so that exactly the candidates <= fits_up_to fit
  sizes = sorted(every)
  assert all(every[a].bytes < every[b].bytes for a, b in zip(sizes, sizes[1:]))  # memory grows with G
  if fits_up_to == 0:
    budget = every[1].bytes - 1
  elif fits_up_to == 6:
    budget = every[6].bytes
  else:
    budget = (every[fits_up_to].bytes + every[sizes[sizes.index(fits_up_to) + 1]].bytes) // 2
  plan = group_plan.make_plan(MODEL, 6, SHAPES, 16, limit=(budget / (1 - group_plan.MARGIN) + 1, "test"))
  assert plan.budget_bytes >= budget
  assert plan.chosen == max(fits_up_to, 1)
  for c in plan.candidates:  # each compiled candidate measured as the brute force measured it, and judged so
    assert (c.step_bytes, c.extraction_bytes, c.flops) == (every[c.G].step_bytes, every[c.G].extraction_bytes,
                                                           every[c.G].flops)
    assert c.fits == (c.bytes <= plan.budget_bytes)
  assert plan.candidate(plan.chosen).fits == (fits_up_to > 0)
  assert len(plan.candidates) <= 4  # the largest, then a bisection of the other four: not every candidate


def test_memory_and_flops_grow_with_the_group_and_the_step_donates_its_state():
  one, four = (group_plan.compile_candidate(MODEL, G, SHAPES, 16, budget=0)[0] for G in (1, 4))
  params = V * D + D * V + V  # embedding, projection and its bias
  # float32 params + AdamW's two moments, every one donated: the step's memory is not twice its state
  state = 3 * 4 * params * 4
  assert state < four.step_bytes < 2 * state + 4 * 4 * B * T * V * 4
  assert 3.5 * one.flops < four.flops < 4.5 * one.flops  # four models' work (one is not vmapped: a little less)


def test_the_extraction_batch_keeps_a_language_models_logits_within_the_memory():
  lstm = models.get_model("lstm", vocab_size=V, embed_dim=8, hidden_dim=8, num_layers=1)
  row = group_plan.LOGIT_BUFFERS * 4 * 2 * T * V  # bytes of one row's [T, V] float32 buffers on a group of 2
  limit = int(3 * row / (1 - group_plan.MARGIN)) + 1  # three rows fit within the margin, four do not
  assert group_plan.extraction_batch(lstm, 2, (T,), 256, limit_bytes=limit) == 3
  assert group_plan.extraction_batch(lstm, 1, (T,), 256, limit_bytes=limit) == 6  # half the group, twice the rows
  assert group_plan.extraction_batch(lstm, 2, (T,), 2, limit_bytes=limit) == 2  # the configured batch fits: kept
  assert group_plan.extraction_batch(lstm, 2, (T,), 256, limit_bytes=0) == 1  # nothing fits: one row at a time
  assert group_plan.extraction_batch(MODEL, 2, (T,), 256, limit_bytes=0) == 256  # no vocabulary: the config's
  # the plan compiles the extraction at that batch: at a smaller limit its program holds fewer rows
  big, small = (group_plan.compile_extraction(lstm, 2, SHAPES, 16, limit_bytes=b) for b in (None, limit))
  assert group_plan.program_bytes(small) < group_plan.program_bytes(big)


def test_a_candidate_whose_compile_runs_out_of_memory_does_not_fit(monkeypatch):
  real = group_plan.compile_step

  def compile_step(model, G, shapes, mesh=None):
    if G >= 4:  # as XLA's GPU autotuner reports a program too large to profile
      raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 393.02GiB")
    return real(model, G, shapes, mesh)

  monkeypatch.setattr(group_plan, "compile_step", compile_step)
  plan = group_plan.make_plan(MODEL, 6, SHAPES, 16)
  assert plan.chosen == 3 and plan.candidate(6).error == "out of memory while compiling"
  assert not plan.candidate(6).fits and plan.compiled[6] is None
  text = plan_table.table(plan, num_models=6, G=3, auto=True, steps_per_epoch=1, epochs=1, step_seconds=0.1,
                          title="plan")
  assert any(line.split()[:1] == ["6"] and line.endswith("out of memory while compiling") for line in text.splitlines())
  assert group_plan.from_record(json.loads(json.dumps(plan.record()))) == plan
  monkeypatch.setattr(group_plan, "compile_step", lambda *a, **k: (_ for _ in ()).throw(ValueError("a bug")))
  with pytest.raises(ValueError, match="a bug"):  # any other error is not a result
    group_plan.make_plan(MODEL, 6, SHAPES, 16)


def test_the_measured_step_time_and_the_table(capsys):
  plan = group_plan.make_plan(MODEL, 6, SHAPES, 16)
  assert plan.chosen == 6 and plan.limit_from.endswith("available memory")  # a CPU: a share of the host's memory
  examples = np.random.default_rng(0).integers(1, V, (40, T)).astype(np.int32)
  seconds = group_plan.measure_step(MODEL, 6, SHAPES, examples, compiled=plan.compiled[6])
  assert 0 < seconds < 10
  text = plan_table.table(plan, num_models=6, G=6, auto=True, steps_per_epoch=10, epochs=2, step_seconds=seconds,
                          title="plan")
  assert "(measured) <- the run's" in text and "group size 6 (auto): 1 group(s) of 6 models" in text
  assert "20 steps per group" in text and "estimated training time" in text
  assert "per-token extraction:" not in text  # said only when given
  text = plan_table.table(plan, num_models=6, G=6, auto=True, steps_per_epoch=10, epochs=2, step_seconds=seconds,
                          title="plan", extraction=(3, 256))
  assert text.splitlines()[-1] == ("per-token extraction: 3 sequences per batch (train.eval_batch_size = 256: the "
                                   "logits of a group of 6 over the vocabulary would not fit)")
  plan = group_plan.with_candidate(plan, MODEL, 4, SHAPES, 16)
  assert plan.candidate(4) is not None and 4 in plan.compiled
  text = plan_table.table(plan, num_models=6, G=4, auto=False, steps_per_epoch=10, epochs=2, step_seconds=0.5,
                          title="plan")
  assert "2 group(s) of 4, 2 models" in text and "the config; auto would choose 6" in text
  marks = {int(line.split()[0]): line for line in text.splitlines() if line.strip()[:1].isdigit()}
  assert marks[4].endswith("<- the run's") and marks[6].endswith("(auto's choice)")  # not "chosen" at 6
  # a configured G above M trains one group of M: the table says so and marks M as the run's
  text = plan_table.table(plan, num_models=6, G=6, auto=False, steps_per_epoch=10, epochs=2, step_seconds=0.5,
                          title="plan", configured=100)
  assert "group size 6 (the config's 100, at most the 6 models; auto would choose 6): 1 group(s) of 6" in text
  # with auto, every other G whose step was measured is estimated beside the run's (the largest is not always the
  # fastest)
  timed = group_plan.timed(group_plan.timed(plan, 4, 0.1), 6, 0.5)
  text = plan_table.table(timed, num_models=6, G=6, auto=True, steps_per_epoch=10, epochs=2, step_seconds=0.5,
                          title="plan")
  other = group_plan.estimate_run_seconds(timed, 6, 4, 20, 0.1)
  assert f"  with G = 4 instead: {plan_table.seconds_text(other)} (its step measured: 2 x 20 steps); " \
         "shadow.group_size=fastest chooses by these times" in text
  # the smaller last group costs its share of the FLOPs of a group of 4 (G = 2 was compiled by the bisection or not)
  assert 20 * 0.5 < group_plan.estimate_run_seconds(plan, 6, 4, 20, 0.5) < 2 * 20 * 0.5
  record = json.loads(json.dumps(plan.record()))  # what config.json holds
  assert group_plan.from_record(record) == plan


EXAMPLES = np.random.default_rng(0).integers(1, V, (40, T)).astype(np.int32)


@pytest.mark.parametrize("per_model_ms, timed, chosen", [
    # ms per step of one model in a group of G (G = 1, 2, 4, 6): the step of a group of G takes G times that
    # (runs of 6 models, ms per step of every group: G = 6: 33; 4: 16 + ~8 (a group of 2 at G = 4's pace); 2: 39)
    ({1: 10, 2: 6.5, 4: 4, 6: 5.5}, [2, 4, 6], 4),  # 2's run is over SLOWER_STOP x 4's: 1 is never timed
    ({1: 1, 2: 2, 4: 3, 6: 4}, [1, 2, 4, 6], 1),  # as on a CPU: one model per group is fastest; every size timed
    ({1: 100, 2: 50, 4: 5, 6: 5}, [2, 4, 6], 6),  # 4's run (20 + ~10) ties 6's (30): the larger group
])
def test_fastest_times_the_fitting_groups_largest_first_and_takes_the_fastest_run(monkeypatch, per_model_ms, timed,
                                                                                    chosen):
  calls = []

  def measure_step(model, G, shapes, examples_ExT, compiled=None, mesh=None):
    assert compiled is not None and examples_ExT is EXAMPLES  # the step the plan compiled, the rows it was given
    calls.append(G)
    return G * per_model_ms[G] / 1e3

  monkeypatch.setattr(group_plan, "measure_step", measure_step)
  plan = group_plan.make_plan(MODEL, 6, SHAPES, 16, examples_ExT=EXAMPLES)
  assert calls == timed[::-1] and plan.rule == "fastest" and plan.chosen == chosen
  # the choice against a brute force over the timed sizes: each run's seconds per step of all its groups, by hand
  # (groups of G, then the rest; a smaller last group costs its share of G's FLOPs)
  flops = {c.G: c.flops for c in plan.candidates}
  run = {G: sum(G * per_model_ms[G] * (flops[n] / flops[G] if n in flops else n / G)
                for n in group_plan.group_sizes(6, G)) for G in timed}
  assert plan.chosen == max(G for G in timed if run[G] <= (1 + group_plan.TIE) * min(run.values()))
  assert {c.G: c.step_seconds for c in plan.candidates if c.step_seconds} == {
      G: pytest.approx(G * per_model_ms[G] / 1e3) for G in timed}
  assert group_plan.from_record(json.loads(json.dumps(plan.record()))) == plan  # rule and times survive config.json
  text = plan_table.table(plan, num_models=6, G=plan.chosen, auto=True, steps_per_epoch=1, epochs=1,
                          step_seconds=plan.candidate(plan.chosen).step_seconds, title="plan")
  assert f"group size {chosen} (fastest)" in text
  assert sum("(measured)" in line for line in text.splitlines()) == len(timed)


def test_fastest_keeps_to_the_groups_that_fit(monkeypatch):
  monkeypatch.setattr(group_plan, "measure_step", lambda model, G, *a, **k: 1e-3)  # larger groups: faster runs
  every = {G: group_plan.compile_candidate(MODEL, G, SHAPES, 16, budget=0)[0] for G in (3, 4)}
  budget = (every[3].bytes + every[4].bytes) // 2  # 1, 2 and 3 fit, 4 and 6 do not
  plan = group_plan.make_plan(MODEL, 6, SHAPES, 16, limit=(budget / (1 - group_plan.MARGIN) + 1, "test"),
                              examples_ExT=EXAMPLES)
  assert plan.chosen == 3 and plan.candidate(3).fits
  assert all(c.fits for c in plan.candidates if c.step_seconds)


def test_fastest_on_this_cpu_measures_the_groups_it_compares():
  plan = group_plan.make_plan(MODEL, 6, SHAPES, 16, examples_ExT=EXAMPLES)  # the real step, timed on this CPU
  timed = {c.G: c.step_seconds for c in plan.candidates if c.step_seconds}
  assert plan.rule == "fastest" and plan.chosen in timed and 6 in timed  # the largest that fits is timed first
  run = {G: group_plan.estimate_run_seconds(plan, 6, G, 1, s) for G, s in timed.items()}
  assert run[plan.chosen] <= (1 + group_plan.TIE) * min(run.values())


# ---- shadow.group_size=auto in a run ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _use_small_corpus(monkeypatch, small_corpus):
  monkeypatch.setattr(run_data, "_corpus", lambda cfg: small_corpus)


def auto_cfg():
  cfg = lstm_configs.get_config("tiny")
  cfg.shadow.num_models = 4
  cfg.train.epochs = 1
  cfg.population.size = 0
  return run_config.with_group_size(cfg, "auto")


class Stop(Exception):
  pass


@pytest.mark.slow
def test_auto_records_a_fitting_group_size_and_a_resumed_run_keeps_it(tmp_path, monkeypatch):
  run_dir = str(tmp_path / "run")
  real_limit, real_run_group = group_plan.memory_limit, pipeline.run_group
  # The first start sees a device on which only one model fits: G = 1, and it stops after its first group.
  monkeypatch.setattr(group_plan, "memory_limit", lambda mesh=None: (1, "test: nothing fits"))

  def first_group_only(cfg, run_dir, data, model, g, ids, *args, **kwargs):
    if g > 0:
      raise Stop()
    return real_run_group(cfg, run_dir, data, model, g, ids, *args, **kwargs)

  monkeypatch.setattr(pipeline, "run_group", first_group_only)
  batches, real_statistics = [], trainer.canary_statistics

  def statistics(*args, batch_size, **kwargs):
    batches.append(batch_size)
    return real_statistics(*args, batch_size=batch_size, **kwargs)

  monkeypatch.setattr(trainer, "canary_statistics", statistics)
  with pytest.raises(Stop):
    pipeline.run(auto_cfg(), run_dir, progress=False)
  assert batches == [1]  # the canaries' extraction, one row at a time where not even one model's logits fit
  monkeypatch.setattr(trainer, "canary_statistics", real_statistics)
  with open(os.path.join(run_dir, "config.json")) as f:
    shadow = json.load(f)["shadow"]
  assert shadow["group_size"] == 1 and shadow["group_size_plan"]["chosen"] == 1
  assert shadow["group_size_plan"]["limit_from"] == "test: nothing fits"
  assert os.listdir(os.path.join(run_dir, "checkpoints")) == ["group_0000"]
  # Resumed with "auto" on a device where all four fit: the recorded G = 1 is kept, nothing is planned again.
  monkeypatch.setattr(group_plan, "memory_limit", real_limit)
  monkeypatch.setattr(pipeline, "run_group", real_run_group)
  monkeypatch.setattr(group_plan, "make_plan", lambda *a, **k: pytest.fail("planned again on resume"))
  assert pipeline.run(auto_cfg(), run_dir, progress=False)
  assert sorted(os.listdir(os.path.join(run_dir, "checkpoints"))) == [f"group_{g:04d}" for g in range(4)]
  with open(os.path.join(run_dir, "config.json")) as f:
    assert json.load(f)["shadow"] == shadow  # the record is untouched
  # The same run with the recorded integer is the same config; another integer is refused in one line.
  assert pipeline.run(run_config.with_group_size(auto_cfg(), 1), run_dir, progress=False)
  with pytest.raises(ValueError, match=r"shadow.group_size: run folder has 1, this command has 2"):
    pipeline.run(run_config.with_group_size(auto_cfg(), 2), run_dir, progress=False)


@pytest.mark.slow
def test_auto_on_the_cpu_picks_a_group_whose_step_fits(tmp_path):
  run_dir = str(tmp_path / "run")
  assert pipeline.run(auto_cfg(), run_dir, progress=False)
  with open(os.path.join(run_dir, "config.json")) as f:
    shadow = json.load(f)["shadow"]
  plan = group_plan.from_record(shadow["group_size_plan"])
  assert shadow["group_size"] == plan.chosen == 4  # four tiny LSTMs fit a CPU host many times over
  chosen = plan.candidate(plan.chosen)
  assert chosen.fits and 0 < chosen.step_bytes <= plan.budget_bytes < plan.limit_bytes
  assert chosen.flops > 0 and plan.limit_from.endswith("available memory")
  assert os.listdir(os.path.join(run_dir, "checkpoints")) == ["group_0000"]  # one group of four
  assert run_config.recorded_group_size(auto_cfg(), run_dir).shadow.group_size == 4


@pytest.mark.slow
def test_fastest_in_a_run_records_its_timed_choice(tmp_path):
  run_dir = str(tmp_path / "run")
  assert pipeline.run(run_config.with_group_size(auto_cfg(), "fastest"), run_dir, progress=False)
  with open(os.path.join(run_dir, "config.json")) as f:
    shadow = json.load(f)["shadow"]
  plan = group_plan.from_record(shadow["group_size_plan"])
  assert plan.rule == "fastest" and shadow["group_size"] == plan.chosen
  assert plan.candidate(plan.chosen).fits and plan.candidate(plan.chosen).step_seconds > 0
  assert len(os.listdir(os.path.join(run_dir, "checkpoints"))) == len(group_plan.group_sizes(4, plan.chosen))
  for rule in ("fastest", "auto"):  # resumed with either rule: the recorded G, nothing planned again
    assert run_config.recorded_group_size(run_config.with_group_size(auto_cfg(), rule), run_dir).shadow.group_size \
        == plan.chosen


@pytest.mark.parametrize("value", [0, -2, "many", 1.5])
def test_bad_group_sizes_are_refused_before_anything_is_written(tmp_path, value):
  with pytest.raises(ValueError, match=r'shadow.group_size must be a positive integer, "auto" or "fastest", got '):
    pipeline.run(run_config.with_group_size(auto_cfg(), value), str(tmp_path / "run"), progress=False)
  assert not (tmp_path / "run").exists()


def test_the_plan_compiles_the_step_in_the_runs_compute_dtype_and_the_extraction_in_float32():
  lstm = models.get_model("lstm", vocab_size=V, embed_dim=8, hidden_dim=8, num_layers=1)
  bf16 = group_plan.Shapes((T,), "int32", B, 16, 1e-2, 0.0, bos_id=0, compute_dtype="bfloat16")
  step = group_plan.compile_step(lstm, 2, bf16)
  extraction = group_plan.compile_extraction(lstm, 2, bf16, 16)
  assert "bf16" in step.as_text() and "bf16" not in extraction.as_text()
  assert "bf16" not in group_plan.compile_step(lstm, 2, SHAPES).as_text()
