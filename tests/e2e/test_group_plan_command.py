"""train_shadows --plan and --config.shadow.group_size as a user types them: the plan table with nothing written,
and bad group sizes refused in one line with exit status 2."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train_shadows(*args, cwd=ROOT):
  return subprocess.run([sys.executable, "-m", "experiments.train_shadows", *args], cwd=cwd, capture_output=True,
                        text=True, timeout=600)


@pytest.mark.slow
def test_plan_prints_the_table_and_writes_nothing(tmp_path, corpus_flags):
  run_dir = tmp_path / "run"
  proc = train_shadows("--config=experiments/configs/lstm.py:tiny", *corpus_flags, "--config.shadow.group_size=auto",
                       "--plan", f"--run_dir={run_dir}", "--noprogress", cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = proc.stdout
  assert "group plan of " in out
  assert "lstm.py:tiny on cpu: M = 6 models, batch 16 of 12 int32, computing in float32" in out
  assert "memory limit per device:" in out and "available memory" in out
  for column in ("G", "memory", "per model", "added/model", "step FLOPs", "fits", "step time"):
    assert column in out
  assert "(measured) <- the run's" in out
  assert "group size 6 (auto): 1 group(s) of 6 models; 5 steps per epoch, 2 epochs, 10 steps per group" in out
  assert "  with G = 1 instead: " in out  # one model per group, measured beside auto's choice
  assert "estimated training time:" in out
  assert "per-token extraction: 256 sequences per batch\n" in out  # train.eval_batch_size: a CPU host holds it
  assert not run_dir.exists() and os.listdir(tmp_path) == []


@pytest.mark.slow
def test_plan_with_fastest_times_the_groups_it_compares(tmp_path, corpus_flags):
  proc = train_shadows("--config=experiments/configs/lstm.py:tiny", *corpus_flags,
                       "--config.shadow.group_size=fastest", "--plan", f"--run_dir={tmp_path / 'run'}", "--noprogress",
                       cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [line for line in proc.stdout.splitlines() if line.strip()[:1].isdigit() and " yes " in line]
  assert sum("(measured)" in row for row in rows) >= 2  # M = 6 fits: 6 timed, then smaller groups
  chosen = [row for row in rows if row.endswith("<- the run's")]
  assert len(chosen) == 1 and "(measured)" in chosen[0]
  assert f"group size {chosen[0].split()[0]} (fastest): " in proc.stdout
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_plan_with_a_group_size_above_the_models_times_the_group_the_run_trains(tmp_path, corpus_flags):
  proc = train_shadows("--config=experiments/configs/lstm.py:tiny", *corpus_flags, "--config.shadow.group_size=100",
                       "--plan", f"--run_dir={tmp_path / 'run'}", "--noprogress", cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = {int(line.split()[0]): line for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()}
  assert 100 not in rows and "(measured) <- the run's" in rows[6]  # G = 100 is neither compiled nor timed
  assert "group size 6 (the config's 100, at most the 6 models; auto would choose 6): 1 group(s) of 6 models" \
      in proc.stdout
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value, shown", [("0", "0"), ("many", "'many'")])
def test_a_bad_group_size_is_one_line_and_exit_status_2(tmp_path, value, shown):
  proc = train_shadows("--config=experiments/configs/lstm.py:tiny", f"--config.shadow.group_size={value}",
                       f"--run_dir={tmp_path / 'run'}", "--plan")
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      f'error: --config.shadow.group_size={value}: shadow.group_size must be a positive integer, "auto" or "fastest", '
      f"got {shown} (see --help)"]
  assert not (tmp_path / "run").exists()
