"""Hub sources where the hub cannot be reached, as a user runs them (subprocesses): one line at once (no retries)
that says how to pass a local copy, and the local-copy forms working with the hub unreachable. The "hub" here is a
closed port on 127.0.0.1 (HF_ENDPOINT): no test reaches the network."""

import json
import os
import socket
import subprocess
import sys

import pytest

from test_feature_extraction import _labelled, model_dir  # noqa: F401  (model_dir: a fixture, a tiny GPT-NeoX folder)
from test_user_errors_command import assert_user_error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def unreachable_hub_env(tmp_path):
  """The environment of a machine without network: hub access not switched off by hand, the hub's host refusing
  connections, an empty hub cache."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
  return {**env, "PYTHONPATH": ROOT, "HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path / "hf")}


def extract(tmp_path, *args):
  return subprocess.run([sys.executable, "-m", "experiments.extract_features", f"--out_dir={tmp_path}/feats",
                         "--noprogress", *args], cwd=ROOT, env=unreachable_hub_env(tmp_path), capture_output=True,
                        text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("args, needles", [
    (("--model=EleutherAI/pythia-70m", "--texts={texts}"),
     ("tokenizer 'EleutherAI/pythia-70m' is not a local file or folder", "pass a local tokenizer.json")),
    (("--model={model}", "--texts=wikimia:32"),
     ("could not load swj0419/WikiMIA (WikiMIA_length32)", "--texts=wikimia:32:PATH")),
    (("--model={model}", "--texts=mimir:arxiv"),
     ("of iamgroot42/mimir", "--texts=mimir:DOMAIN:SPLIT:PATH")),
    (("--model={model}", "--texts={texts}", "--reference_model=EleutherAI/pythia-70m"),
     ("is not a local file or folder", "cannot be reached")),
])
def test_a_hub_source_without_network_fails_at_once_naming_the_local_copy(model_dir, tmp_path, args, needles):
  texts, labels = _labelled(20)
  src = tmp_path / "texts.jsonl"
  src.write_text("".join(json.dumps({"text": t, "label": int(y)}) + "\n" for t, y in zip(texts, labels)))
  proc = extract(tmp_path, *(a.format(texts=src, model=model_dir) for a in args))
  assert_user_error(proc, "the Hugging Face hub (127.0.0.1:", "cannot be reached from here", *needles)
  assert "Retry" not in proc.stderr  # offline mode: no 24 s of doubled "Retrying in Ns" lines
  assert not (tmp_path / "feats").exists()


@pytest.mark.slow
def test_local_copies_of_the_benchmarks_are_read_with_the_hub_unreachable(model_dir, tmp_path):
  texts, labels = _labelled(20)
  os.makedirs(tmp_path / "WikiMIA" / "data")
  (tmp_path / "WikiMIA" / "data" / "WikiMIA_length32.jsonl").write_text(
      "".join(json.dumps({"input": t, "label": int(y)}) + "\n" for t, y in zip(texts, labels)))
  proc = extract(tmp_path, f"--model={model_dir}", f"--texts=wikimia:32:{tmp_path}/WikiMIA")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "20 texts (10 members, 10 non-members)" in proc.stdout
  assert "Unable to initialize backend" not in proc.stderr and "Retry" not in proc.stderr
