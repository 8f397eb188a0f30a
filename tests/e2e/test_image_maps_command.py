"""experiments.covariance_error and experiments.image_maps as a user runs them (subprocesses), on a synthetic image
run: covariance_error points to the image maps, and image_maps' user errors are one line with exit status 2."""

import json
import os
import subprocess
import sys

import pytest

from test_canary_maps import write_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _command(module, *args):
  env = {**os.environ, "PYTHONPATH": ROOT}
  return subprocess.run([sys.executable, "-m", f"experiments.{module}", *args], capture_output=True, text=True,
                        env=env, cwd=ROOT)


@pytest.mark.slow
def test_command_lines_covariance_error_points_to_the_maps_and_errors_are_one_line(tmp_path):
  write_run(tmp_path)
  ok = _command("covariance_error", f"--run_dir={tmp_path}", "--shadow_counts=8", "--draws=1", "--noprogress")
  assert ok.returncode == 0, ok.stderr
  assert "python -m experiments.image_maps" in ok.stdout
  assert (tmp_path / "covariance_error" / "covariance_heatmap.png").exists()
  bad = _command("image_maps", f"--run_dir={tmp_path}", "--pixel=99")
  assert bad.returncode == 2 and bad.stderr.startswith("error: --pixel=99 is outside") and "Traceback" not in bad.stderr
  (tmp_path / "config.json").write_text(json.dumps({"model": {"name": "lstm"}}))
  bad = _command("image_maps", f"--run_dir={tmp_path}")
  assert bad.returncode == 2 and bad.stderr.startswith("error: not an image run")
