"""experiments.partial_run as a user runs it: a refusal is one line on stderr and exit status 2."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_partial_run_command_names_a_folder_without_config_in_one_line(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "experiments.partial_run", f"--run_dir={tmp_path}/none",
                         f"--out_run_dir={tmp_path}/f"], capture_output=True, text=True, cwd=REPO)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [f"error: {tmp_path}/none/config.json does not exist: not a run "
                                              "folder of experiments.train_shadows"]
