"""experiments.process_flags: a Slurm array task's share read from its variables, --cluster refused beside the flags
that name the processes by hand, and --cluster=auto without a cluster as a user error (the commands under simulated
clusters: tests/e2e/test_cluster_processes.py)."""

from absl import app
from absl import flags
import pytest

from experiments import cli
from experiments import process_flags
from lira.errors import InputError


def _array(task, first, count, last=None, step=None):
  env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(first), "SLURM_ARRAY_TASK_COUNT": str(count)}
  env.update({} if last is None else {"SLURM_ARRAY_TASK_MAX": str(last)})
  env.update({} if step is None else {"SLURM_ARRAY_TASK_STEP": str(step)})
  return env


def test_an_array_task_is_its_index_in_the_range():
  assert process_flags.array_share(_array(5, 4, 4, last=7, step=1)) == (1, 4, 5)  # --array=4-7
  assert process_flags.array_share(_array(6, 0, 8, last=14, step=2)) == (3, 8, 6)  # --array=0-14:2
  assert process_flags.array_share(_array(2, 0, 3)) == (2, 3, 2)  # MAX and STEP follow from MIN and COUNT
  assert process_flags.array_share(_array(0, 0, 1, last=0, step=1)) == (0, 1, 0)


def test_a_missing_or_bad_array_variable_is_named():
  with pytest.raises(InputError, match="SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_COUNT are not set: "
                                       "this is not a task of a Slurm array job"):
    process_flags.array_share({"SLURM_JOB_ID": "7"})
  env = _array(1, 0, 2)
  del env["SLURM_ARRAY_TASK_COUNT"]
  with pytest.raises(InputError, match=r"^--cluster=slurm_array: SLURM_ARRAY_TASK_COUNT is not set"):
    process_flags.array_share(env)
  with pytest.raises(InputError, match="SLURM_ARRAY_TASK_STEP='two' is not an integer"):
    process_flags.array_share({**_array(1, 0, 2), "SLURM_ARRAY_TASK_STEP": "two"})


@pytest.mark.parametrize("env", [_array(4, 1, 3, last=6, step=1),  # --array=1,4,6: not a range
                                 _array(3, 0, 3, last=4, step=2),  # a task off the step
                                 _array(9, 0, 4, last=3, step=1),  # outside the range
                                 _array(0, 0, 0)])
def test_an_array_that_is_not_a_range_holding_the_task_is_refused(env):
  with pytest.raises(InputError, match="the array's indices are not a range holding this task; submit --array=A-B"):
    process_flags.array_share(env)


def _flags(*argv, array=True):
  fv = flags.FlagValues()
  process_flags.define("the groups", array=array, flag_values=fv)
  fv(["prog", *argv])
  return fv


def test_cluster_beside_the_processes_by_hand_is_a_usage_error():
  with pytest.raises(app.UsageError, match=r"^--cluster=auto takes the processes from the cluster; --num_processes "
                                           "describes them by hand: give one or the other$"):
    process_flags.chosen(_flags("--cluster=auto", "--num_processes=2"))
  # a flag given at its default value is given all the same
  with pytest.raises(app.UsageError, match="--num_processes, --process_id, --coordinator_address describe them"):
    process_flags.chosen(_flags("--cluster=slurm_array", "--num_processes=1", "--process_id=0",
                                "--coordinator_address=h:1"), environ=_array(0, 0, 2))


def test_the_processes_each_cluster_describes():
  assert process_flags.chosen(_flags()) == process_flags.Processes("none", 0, 1)
  by_hand = process_flags.chosen(_flags("--num_processes=3", "--process_id=2"))
  assert (by_hand.process_id, by_hand.num_processes, by_hand.coordinated, by_hand.name) == (2, 3, False, "process 2")
  assert process_flags.chosen(_flags("--num_processes=2", "--coordinator_address=h:1")).coordinated
  with pytest.raises(app.UsageError, match=r"--process_id=2 is outside \[0, --num_processes=2\)"):
    process_flags.chosen(_flags("--num_processes=2", "--process_id=2"))
  auto = process_flags.chosen(_flags("--cluster=auto"))
  assert auto.coordinated and auto.process_id is None and auto.coordinator_address is None
  array = process_flags.chosen(_flags("--cluster=slurm_array"), environ=_array(7, 4, 4, last=7, step=1))
  assert (array.process_id, array.num_processes, array.coordinated, array.name) == (3, 4, False, "array task 7")


def test_a_command_without_array_tasks_refuses_slurm_array_as_it_parses_its_flags():
  with pytest.raises(flags.IllegalFlagValueError) as e:
    _flags("--cluster=slurm_array", array=False)
  assert cli.flag_error_message(e.value).startswith("--cluster=slurm_array: an array's tasks share no coordinator")
  assert _flags("--cluster=auto", array=False).cluster == "auto"


def test_join_initializes_only_a_jax_distributed_run_and_reads_back_auto_s_processes():
  calls = []
  by_hand = process_flags.Processes("none", 1, 2)
  assert process_flags.join(by_hand, lambda *args: calls.append(args)) == by_hand and calls == []
  array = process_flags.Processes("slurm_array", 1, 2, array_task=1)
  assert process_flags.join(array, lambda *args: calls.append(args)) == array and calls == []
  joined = process_flags.join(process_flags.Processes("auto", None, None), lambda *args: calls.append(args))
  assert calls == [(None, None, None)]
  assert (joined.process_id, joined.num_processes) == (0, 1)  # jax.process_index(), jax.process_count(): one process


def test_auto_without_a_cluster_is_a_user_error_and_other_failures_are_not_rewritten():
  def undetected(*args):
    raise ValueError("coordinator_address should be defined.")  # what jax raises when no cluster is detected

  with pytest.raises(InputError, match=r"^--cluster=auto: jax.distributed.initialize\(\) found no cluster it knows "
                                       r"\(coordinator_address should be defined.\): run the command under srun"):
    process_flags.join(process_flags.Processes("auto", None, None), undetected)
  with pytest.raises(ValueError, match="^coordinator_address should be defined.$"):
    process_flags.join(process_flags.Processes("none", 0, 2, "h:1"), undetected)
