"""evaluate --attacks on a shadow run: each attack's rows equal the attack functions applied target model by target
model, then pooled by lira.metrics.summarize, and bad input is refused before any report is written."""

import json
import os

import numpy as np
import pytest
from absl import flags

import attacks as A
from lira import metrics
from lira.errors import InputError, MissingFileError
from lira.reports import synthetic_run
from attack_cli import run_cli, strict_json, tiny_tokenizer
from attack_cli import evaluate_cli  # noqa: F401 (a fixture)


@pytest.fixture
def shadow_run(tmp_path):
  """A ragged synthetic run (mask.npy) with fake mu / sigma, canary ids and a word-level tokenizer."""
  run = tmp_path / "run"
  synthetic_run.write_synthetic_run(str(run), num_models=8, num_canaries=16, seq_len=5, ragged=True, seed=3)
  rng = np.random.default_rng(0)
  loss = np.load(run / "losses.npy")
  np.save(run / "mu.npy", (-loss + rng.normal(0.3, 0.2, loss.shape)).astype(np.float32))
  np.save(run / "sigma.npy", rng.uniform(0.2, 1.5, loss.shape).astype(np.float32))
  np.save(run / "canaries.npy", rng.integers(1, 9, size=loss.shape[1:]).astype(np.int32))
  tiny_tokenizer(run / "tokenizer.json", 9)
  return run


def test_evaluate_attack_rows_equal_per_target_attacks(shadow_run, evaluate_cli, capsys):
  run = shadow_run
  run_cli(evaluate_cli, f"--run_dir={run}", "--attacks=loss,zlib,min_k,min_k_pp", "--k=0.3", "--n_boot=30",
          "--variants=oas-shared", "--noprogress")
  printed = capsys.readouterr().out
  stem = "results_variants-oas-shared_nboot-30_attacks-loss+zlib+min_k+min_k_pp_k-0.3"
  result = strict_json(run / f"{stem}.json")
  assert (run / f"roc{stem[7:]}.png").exists()
  loss, keep, mask = np.load(run / "losses.npy"), np.load(run / "keep.npy"), np.load(run / "mask.npy")
  mu, sigma, ids = np.load(run / "mu.npy"), np.load(run / "sigma.npy"), np.load(run / "canaries.npy")
  # Independent decoding: the word-level vocabulary spelt out, over each canary's real (masked-in) tokens.
  texts = [" ".join(f"w{i}" for i in ids[n, :mask[n].sum()]) for n in range(len(ids))]
  per_target = {
      "loss": lambda lp, m: A.loss(lp), "zlib": lambda lp, m: A.zlib(lp, texts),
      "min_k": lambda lp, m: A.min_k(lp, 0.3), "min_k_pp": lambda lp, m: A.min_k_pp(lp, mu[m], sigma[m], 0.3),
  }
  rows = {r["attack"]: r for r in result["attacks"]}
  assert list(rows) == list(per_target)
  for attack, score in per_target.items():
    scores_MxN = np.stack([score(np.where(mask, -loss[m].astype(np.float64), np.nan), m) for m in range(len(loss))])
    expected = metrics.summarize(scores_MxN, keep, n_boot=30, seed=0)
    assert json.loads(json.dumps(rows[attack]["summary"])) == json.loads(json.dumps(expected)), attack
    np.testing.assert_array_equal(np.load(run / rows[attack]["scores_file"]), scores_MxN)
    assert rows[attack]["name"] in printed
  assert result["variants"][0]["name"] == "OAS Shared" and "OAS Shared" in printed
  assert result["settings"]["attacks"] == list(per_target) and result["settings"]["k"] == 0.3
  assert rows["loss"]["summary"]["n_pos"] == int(keep.sum())  # pooled over all M x N pairs, like LiRA
  md = (run / f"{stem}.md").read_text()
  assert "Min-K%++ (k=0.3)" in md and "OAS Shared" in md


def test_evaluate_attacks_bad_input(shadow_run, evaluate_cli):
  os.remove(shadow_run / "sigma.npy")
  with pytest.raises(MissingFileError, match=r"min_k_pp.*sigma\.npy"):
    run_cli(evaluate_cli, f"--run_dir={shadow_run}", "--attacks=loss,min_k_pp", "--noprogress")
  evaluate_cli.FLAGS.unparse_flags()
  os.remove(shadow_run / "tokenizer.json")
  with pytest.raises(MissingFileError, match=r"zlib.*tokenizer\.json"):
    run_cli(evaluate_cli, f"--run_dir={shadow_run}", "--attacks=zlib", "--noprogress")
  evaluate_cli.FLAGS.unparse_flags()
  with pytest.raises(InputError, match=r"'recall' is an attack that cannot score a shadow run's leave-one-out pairs; "
                     r"choose from loss, zlib"):
    run_cli(evaluate_cli, f"--run_dir={shadow_run}", "--attacks=recall", "--noprogress")
  evaluate_cli.FLAGS.unparse_flags()
  with pytest.raises(flags.IllegalFlagValueError, match=r"--k=2: must be in \(0, 1\]"):
    run_cli(evaluate_cli, f"--run_dir={shadow_run}", "--attacks=min_k", "--k=2", "--noprogress")
  assert not any(f.startswith("results") for f in os.listdir(shadow_run))
