"""The offline pretraining-data benchmark's command as a user runs it (a subprocess) on the tiny benchmark's trained
models (tests/training/pretraining/test_offline_benchmark.py's fixture, built again in this module), and its shifted
texts read in a fresh interpreter."""

import json
import os
import subprocess
import sys

import pytest

from test_offline_benchmark import conversations, tiny_run  # noqa: F401  (fixtures: the tiny benchmark, trained once)
from training.pretraining import offline_benchmark as mb


@pytest.mark.slow
def test_cli_writes_summary_with_labelled_shift_column(tiny_run):
  cfg, out, _, _ = tiny_run  # models already trained: the command skips pretraining
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  result = subprocess.run([sys.executable, "-m", "experiments.pretrain_benchmark", "--out_dir", out, "--noprogress",
                           "--config", "experiments/configs/pretrain_benchmark.py:tiny"],
                          cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root})
  assert result.returncode == 0, result.stderr[-2000:]
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  assert list(summary["columns"]) == [f"epoch_{e}" for e in cfg.pretrain.checkpoint_epochs] + ["shift"]
  assert "SHIFT" in summary["columns"]["shift"]
  assert not any(k.startswith("pretrain_") and v > 5 for k, v in summary["seconds"].items())  # reused, not retrained
  for col in summary["columns"]:
    names = set(summary["auc"][col])
    assert {"Loss", "Zlib", "Min-K% (k=0.2)", "Min-K%++ (k=0.2)", "Reference", "Neighbourhood"} <= names
    for family in ("ReCaLL", "Con-ReCall", "EM-MIA", "Blind"):
      assert sum(n.startswith(family + " ") for n in names) == 1, (family, names)
  assert set(summary["blind_warning"]) <= set(summary["columns"])  # the columns whose blind row reached the attacks
  with open(os.path.join(out, "summary.md")) as f:
    assert "SHIFTED split" in f.read()
  assert os.path.getsize(os.path.join(out, "auc_vs_epochs.png")) > 0


def test_shift_texts_do_not_depend_on_what_the_process_imported():
  """The docstrings are read from the stdlib's source files, so a fresh interpreter gets the same paragraphs as
  this test process, which has imported (and possibly patched) many modules."""
  import hashlib
  import torch  # noqa: F401  (imports and patches much of the stdlib's namespace)
  digest = lambda ps: hashlib.sha256("\n".join(ps).encode()).hexdigest()  # noqa: E731
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  code = ("import hashlib; from training.pretraining import offline_benchmark as m; "
          "print(hashlib.sha256('\\n'.join(m.stdlib_paragraphs()).encode()).hexdigest())")
  result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": root})
  assert result.stdout.strip() == digest(mb.stdlib_paragraphs())
