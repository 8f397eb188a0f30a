"""experiments.covariance_error as a user runs it (a subprocess): it writes its tables, and shadow counts all above M
are a one-line error with exit status 2."""

import os
import subprocess
import sys

import pytest

from test_cov_error import run_dir  # noqa: F401  (a fixture: a run folder of 8 models, 12 canaries, 6 positions)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_cli_subprocess(run_dir):
  env = {**os.environ, "PYTHONPATH": ROOT}
  ok = subprocess.run([sys.executable, "-m", "experiments.covariance_error", f"--run_dir={run_dir}",
                       "--shadow_counts=4,8", "--draws=1"], capture_output=True, text=True, env=env, cwd=ROOT)
  assert ok.returncode == 0, ok.stderr
  assert (run_dir / "covariance_error" / "covariance_error_draws-1.csv").exists()
  bad = subprocess.run([sys.executable, "-m", "experiments.covariance_error", f"--run_dir={run_dir}",
                        "--shadow_counts=32", "--noprogress"], capture_output=True, text=True, env=env, cwd=ROOT)
  assert bad.returncode == 2 and bad.stderr.startswith("error: --shadow_counts") and "Traceback" not in bad.stderr
