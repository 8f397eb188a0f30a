"""experiments.scoring_flags.jax_compile_note: the jax backend's traced-count program for many IN counts is announced
where it is costly (many counts, or model subsets) and nowhere else; the commands print it before scoring."""

import os
import subprocess
import sys

from experiments import scoring_flags
from lira.reports import synthetic_run
from lira.scoring import Scoring

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_note_only_for_the_jax_backend_with_many_in_counts():
  jax, numpy = Scoring(backend="jax"), Scoring(backend="numpy")
  assert scoring_flags.jax_compile_note(numpy, 30, "x") is None
  assert scoring_flags.jax_compile_note(numpy, None, "x") is None
  assert scoring_flags.jax_compile_note(jax, 1, "x") is None  # a full run: every canary IN for M / 2 models
  assert scoring_flags.jax_compile_note(jax, scoring_flags.MANY_IN_COUNTS, "x") is None
  note = scoring_flags.jax_compile_note(jax, 24, "the run's canaries have")
  assert note.startswith("note: the run's canaries have 24 distinct IN counts; --backend=jax scores them with one")
  assert "--backend=numpy may be faster" in scoring_flags.jax_compile_note(jax, None, "model subsets have")


def test_shadow_sweep_prints_the_note_with_the_jax_backend(tmp_path):
  run = tmp_path / "run"
  synthetic_run.write_synthetic_run(str(run), num_models=8, num_canaries=6, seq_len=2, seed=0)
  proc = subprocess.run([sys.executable, "-m", "experiments.shadow_sweep", f"--run_dir={run}", "--backend=jax",
                         "--counts=6,8", "--draws=1", "--fpr=0.1", "--variants=univariate-shared", "--noprogress"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "note: model subsets have many distinct IN counts" in proc.stdout
