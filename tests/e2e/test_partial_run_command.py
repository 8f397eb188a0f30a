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


def test_partial_run_command_drops_canaries(tmp_path):
  sys.path.insert(0, os.path.join(REPO, "tests", "training"))
  from test_partial_run import fake_run
  fake_run(str(tmp_path / "run"), N=6, finished=4)
  proc = subprocess.run([sys.executable, "-m", "experiments.partial_run", f"--run_dir={tmp_path}/run",
                         f"--out_run_dir={tmp_path}/part", "--drop_canaries=1,4"], capture_output=True, text=True,
                        cwd=REPO)
  assert proc.returncode == 0, proc.stderr
  assert f"the first 8 of 8 models of {tmp_path}/run, without 2 of its 6 canaries as a run folder" in proc.stdout
  bad = subprocess.run([sys.executable, "-m", "experiments.partial_run", f"--run_dir={tmp_path}/run",
                        f"--out_run_dir={tmp_path}/bad", "--drop_canaries=9"], capture_output=True, text=True, cwd=REPO)
  assert bad.returncode == 2
  assert bad.stderr.strip().splitlines() == ["error: --drop_canaries: canary 9 is out of range (the run has N=6 "
                                             "canaries, 0-5)"]
