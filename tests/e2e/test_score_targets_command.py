"""experiments.score_targets as a user runs it (a subprocess): the report of known target models, and a missing
target file as a one-line error with exit status 2."""

import os
import subprocess
import sys

import pytest

from test_score_targets import folders  # noqa: F401  (a fixture: a shadow run of 12 models and 3 target models)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_attack_command_line(folders, tmp_path):
  root, _, _, _ = folders
  env = {**os.environ, "PYTHONPATH": ROOT}
  def run(*args):
    cmd = [sys.executable, "-m", "experiments.score_targets", f"--run_dir={root / 'shadows'}", f"--out_dir={tmp_path}",
           "--noprogress", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

  ok = run(f"--target={root / 'target.npy'}", f"--target_keep={root / 'target_keep.npy'}", "--n_boot=10")
  assert ok.returncode == 0, ok.stderr[-2000:]
  assert "OAS Shared" in ok.stdout and str(tmp_path / "attack_roc_nboot-10.png") in ok.stdout
  bad = run(f"--target={root / 'missing.npy'}")
  assert bad.returncode == 2 and bad.stderr.strip().startswith("error: ") and "Traceback" not in bad.stderr
