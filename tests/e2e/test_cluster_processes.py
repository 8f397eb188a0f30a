"""train_shadows and evaluate --backend=jax as a cluster starts them (subprocesses under simulated Slurm variables):
a Slurm array job's tasks (--cluster=slurm_array) and one srun step of two tasks (--cluster=auto, jax's own Slurm
detection), each against one process."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import xla_level

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# test_multiprocess.py's run: lstm.py:tiny with 8 models in groups of 2, four groups; the corpus: conftest.py
CONFIG = ["--config=experiments/configs/lstm.py:tiny", "--config.shadow.num_models=8", "--config.shadow.group_size=2",
          "--noprogress", "--noevaluate"]
ARRAYS = ("losses", "mu", "sigma", "keep", "canaries", "population_losses")
# what jax.distributed's cluster detection reads (jax._src.clusters), left out of the tests' environment so that a
# test run inside a Slurm job, under mpirun or in a Kubernetes pod sees only the variables a test sets
CLUSTER_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "JAX_COORDINATOR", "JAX_LOCAL_DEVICE_IDS", "KUBERNETES_SERVICE_HOST")


def _env(**extra):
  base = {k: v for k, v in xla_level.at_default_level(os.environ).items() if not k.startswith(CLUSTER_PREFIXES)}
  return dict(base, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu", **extra)


def _train(run_dir, corpus, *extra):
  return [sys.executable, "-m", "experiments.train_shadows", *CONFIG, *corpus, f"--run_dir={run_dir}", *extra]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _array_task(task, count):
  """The variables Slurm sets in task `task` of `sbatch --array=0-{count - 1}`."""
  return dict(SLURM_JOB_ID=str(1000 + task), SLURM_ARRAY_JOB_ID="1000", SLURM_ARRAY_TASK_ID=str(task),
              SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_MAX=str(count - 1), SLURM_ARRAY_TASK_STEP="1",
              SLURM_ARRAY_TASK_COUNT=str(count))


def _srun_task(rank, ntasks, port):
  """The variables of task `rank` of `srun --ntasks={ntasks}` on one node that jax's SlurmCluster reads; the port
  jax would derive from SLURM_JOB_ID (61440 + id % 4096) is overridden by JAX_COORDINATOR_PORT, a free one."""
  return dict(SLURM_JOB_ID="4242", SLURM_STEP_NODELIST="localhost", SLURM_NTASKS=str(ntasks),
              SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NODEID="0", SLURM_STEP_NUM_NODES="1",
              JAX_COORDINATOR_PORT=str(port))


def _run_together(commands_envs, timeout=600):
  procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for cmd, env in commands_envs]
  outs = [p.communicate(timeout=timeout) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return [out for out, _ in outs]


def _assert_same_arrays(run_dir, reference):
  for name in ARRAYS:
    np.testing.assert_array_equal(np.load(os.path.join(run_dir, f"{name}.npy")),
                                  np.load(os.path.join(reference, f"{name}.npy")), err_msg=name)


def _trained(out):
  """The groups a train_shadows output says it trained (`group g (i of n): models a-b finished in ...`)."""
  return sorted(int(line.split()[1]) for line in out.splitlines() if line.startswith("group ") and "finished" in line)


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory, corpus_flags):
  run_dir = str(tmp_path_factory.mktemp("one") / "run")
  proc = subprocess.run(_train(run_dir, corpus_flags), cwd=ROOT, env=_env(), capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return run_dir


@pytest.mark.slow
def test_slurm_array_tasks_train_their_shares_and_the_last_assembles(tmp_path, one_process_run, corpus_flags):
  run_dir = str(tmp_path / "run")
  # tasks 0 and 1 of --array=0-2 at once: groups 0, 3 and 1; group 2 (task 2's) is missing when they finish
  outs = _run_together([(_train(run_dir, corpus_flags, "--cluster=slurm_array"), _env(**_array_task(t, 3)))
                        for t in (0, 1)])
  assert [_trained(out) for out in outs] == [[0, 3], [1]]
  for task, out in enumerate(outs):
    assert f"array task {task} (share {task} of 3): its groups are done" in out, out
    assert "The last array task to finish assembles losses.npy" in out, out
  assert not os.path.exists(os.path.join(run_dir, "losses.npy"))

  # the last task trains group 2, finds every group done and assembles
  (out,) = _run_together([(_train(run_dir, corpus_flags, "--cluster=slurm_array"), _env(**_array_task(2, 3)))])
  assert _trained(out) == [2] and "per-position losses" in out, out
  # same float32 computations on the same machine, one model per vmapped slot either way: bit-identical
  _assert_same_arrays(run_dir, one_process_run)

  # two tasks that find every group done assemble at once: the same arrays, each written atomically
  for name in ARRAYS[:3] + ARRAYS[5:]:
    os.remove(os.path.join(run_dir, f"{name}.npy"))
  outs = _run_together([(_train(run_dir, corpus_flags, "--cluster=slurm_array"), _env(**_array_task(t, 2)))
                        for t in (0, 1)])
  assert all(_trained(out) == [] and "per-position losses" in out for out in outs), outs
  _assert_same_arrays(run_dir, one_process_run)

  # a later run of the same command without --cluster trains nothing and assembles
  os.remove(os.path.join(run_dir, "losses.npy"))
  (out,) = _run_together([(_train(run_dir, corpus_flags), _env())])
  assert "4 of 4 group(s) already finished, 0 to train" in out and _trained(out) == [], out
  _assert_same_arrays(run_dir, one_process_run)


@pytest.mark.slow
def test_cluster_auto_under_srun_variables_equals_one_process(tmp_path, one_process_run, corpus_flags):
  run_dir = str(tmp_path / "run")
  port = _free_port()
  outs = _run_together([(_train(run_dir, corpus_flags, "--cluster=auto"), _env(**_srun_task(rank, 2, port)))
                        for rank in (0, 1)])
  # jax found two processes (SLURM_NTASKS) and this one's index (SLURM_PROCID): each trained its half of the groups
  assert [_trained(out) for out in outs] == [[0, 2], [1, 3]]
  assert "process 0 assembles losses.npy" in outs[1] and "per-position losses" in outs[0], outs
  _assert_same_arrays(run_dir, one_process_run)


def _evaluate(run_dir, out_dir, *extra):
  return [sys.executable, "-m", "experiments.evaluate", f"--run_dir={run_dir}", f"--out_dir={out_dir}",
          "--backend=jax", "--n_boot=20", "--noprogress", "--variants=univariate-classwise,oas-shared", *extra]


def _comparable(out_dir):
  (path,) = out_dir.glob("results*.json")
  result = json.loads(path.read_text())
  return {k: v for k, v in result.items() if k not in ("argv", "seconds", "run_dir", "files")}  # differ by design


@pytest.mark.slow
def test_evaluate_cluster_auto_under_srun_variables_writes_what_one_process_writes(tmp_path):
  run = tmp_path / "run"
  subprocess.run([sys.executable, "-m", "experiments.make_synthetic", f"--run_dir={run}", "--num_models=8",
                  "--num_canaries=30", "--seq_len=6", "--ragged"], env=_env(), cwd=ROOT, check=True,
                 capture_output=True)
  port = _free_port()
  outs = _run_together([(_evaluate(run, tmp_path / "one"), _env())]
                       + [(_evaluate(run, tmp_path / "two", "--cluster=auto"), _env(**_srun_task(rank, 2, port)))
                          for rank in (0, 1)])
  assert "process 1: scored its share of the canaries" in outs[2], outs[2]
  # the same scores reach the same bootstrap (same seed): the reports are equal (test_evaluate_processes.py)
  assert _comparable(tmp_path / "two") == _comparable(tmp_path / "one")
  scores = sorted(p.name for p in (tmp_path / "one").glob("scores_*.npy"))
  assert len(scores) == 2
  for name in scores:
    np.testing.assert_array_equal(np.load(tmp_path / "two" / name), np.load(tmp_path / "one" / name))


@pytest.mark.slow
def test_a_cluster_that_is_not_there_is_one_error_line(tmp_path):
  run_dir = str(tmp_path / "run")
  cases = [(_train(run_dir, [], "--cluster=auto"), {},
            "error: --cluster=auto: jax.distributed.initialize() found no cluster it knows"),
           (_train(run_dir, [], "--cluster=slurm_array"), {"SLURM_JOB_ID": "7"},  # a Slurm job, not an array's task
            "error: --cluster=slurm_array: SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT are not "
            "set"),
           (_evaluate(run_dir, run_dir, "--cluster=slurm_array"), {},
            "error: --cluster=slurm_array: an array's tasks share no coordinator")]
  procs = [subprocess.Popen(cmd, cwd=ROOT, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for cmd, env, _ in cases]
  for p, (_, _, needle) in zip(procs, cases):
    _, err = p.communicate(timeout=300)
    lines = [line for line in err.splitlines() if line.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(needle), err[-2000:]
  assert not os.path.exists(run_dir)  # refused before anything was written
