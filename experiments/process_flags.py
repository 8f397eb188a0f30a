"""The flags that share a command's work among processes, declared once (train_shadows shares the groups, evaluate
--backend=jax the canaries): the cluster's own description, --cluster, or the processes named by hand,
--num_processes/--process_id/--coordinator_address. The two exclude each other.

--cluster=none         one process, or the processes the three flags describe (the default).
--cluster=auto         jax.distributed.initialize() without arguments: jax reads the coordinator, the process count and
                       this process's index from the cluster it runs in (jax._src.clusters): Slurm under srun
                       (SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID; the coordinator
                       is the step's first node, port 61440 + SLURM_JOB_ID % 4096 unless JAX_COORDINATOR_PORT), Open
                       MPI under mpirun (OMPI_MCA_orte_hnp_uri, OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK), Cloud TPU
                       pods. The processes then form one jax.distributed run, as with --coordinator_address.
--cluster=slurm_array  a Slurm array job (sbatch --array=A-B[:S]): task SLURM_ARRAY_TASK_ID is process
                       (id - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP of SLURM_ARRAY_TASK_COUNT, with no
                       coordinator: the tasks never talk to each other, so only train_shadows takes it (its groups are
                       files; evaluate gathers scores through jax.distributed).
"""

import dataclasses
import os
import sys

from absl import app
from absl import flags

from experiments import cli
from lira.errors import InputError

FLAGS = flags.FLAGS
CLUSTERS = ("none", "auto", "slurm_array")
BY_HAND = ("num_processes", "process_id", "coordinator_address")
ARRAY_REQUIRED = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
ARRAY_OPTIONAL = ("SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")  # checked when set (Slurm sets both)
_NO_ARRAY = ("--cluster=slurm_array: an array's tasks share no coordinator, and this command's processes gather their "
             "results through jax.distributed; use --cluster=auto (one srun step of several tasks)")


@dataclasses.dataclass(frozen=True)
class Processes:
  """This process's share: process_id of num_processes (None under --cluster=auto until join), how they were found
  (cluster), the coordinator given by hand, and the Slurm array task id (--cluster=slurm_array)."""
  cluster: str = "none"
  process_id: int | None = 0
  num_processes: int | None = 1
  coordinator_address: str | None = None
  array_task: int | None = None

  @property
  def coordinated(self):
    """Whether the processes form one jax.distributed run (--cluster=auto or --coordinator_address)."""
    return self.cluster == "auto" or self.coordinator_address is not None

  @property
  def name(self):
    """How a message names this process: `array task 5` or `process 1`."""
    return f"array task {self.array_task}" if self.array_task is not None else f"process {self.process_id}"


def _caller():
  name = sys._getframe(2).f_globals["__name__"]
  return sys.argv[0] if name == "__main__" else name


def define(shares, *, array=True, needs="", coordinated="", flag_values=FLAGS):
  """--cluster, --num_processes, --process_id and --coordinator_address as flags of the calling command, whose
  processes share `shares` ("the groups"); `array`: --cluster=slurm_array is accepted; `needs`: what several processes
  need besides ("--backend=jax"); `coordinated`: what a jax.distributed run does, for --coordinator_address's help."""
  common = dict(flag_values=flag_values, module_name=_caller())
  array_help = ("; slurm_array: a Slurm array job (sbatch --array=A-B[:S]), task (SLURM_ARRAY_TASK_ID - MIN) / STEP "
                "of SLURM_ARRAY_TASK_COUNT trains its groups g with g % COUNT == that share, with no coordinator; the "
                "last task to finish (or a later run without --cluster) assembles" if array else
                "; slurm_array is train_shadows' alone (array tasks share no coordinator)")
  flags.DEFINE_enum("cluster", "none", CLUSTERS, f"How the processes sharing {shares} are found: none (one process, or "
                    "the ones --num_processes/--process_id/--coordinator_address describe); auto: "
                    "jax.distributed.initialize() without arguments, so jax finds the coordinator, the process count "
                    "and this process's index (Slurm under srun, Open MPI under mpirun, Cloud TPU pods)"
                    f"{array_help}. Excludes the three flags.", **common)
  if not array:
    flags.register_validator("cluster", lambda value: value != "slurm_array", message=_NO_ARRAY,
                             flag_values=flag_values)
  needs = f"; needs {needs}" if needs else ""
  flags.DEFINE_integer("num_processes", 1, f"Processes sharing {shares} (multi-host{needs}); or --cluster.", **common)
  cli.check_range("num_processes", 1, flag_values=flag_values)
  flags.DEFINE_integer("process_id", 0, "This process's index in [0, num_processes).", **common)
  cli.check_range("process_id", 0, flag_values=flag_values)  # and below --num_processes, checked by chosen()
  flags.DEFINE_string("coordinator_address", None, "host:port of process 0, the same for every process; calls "
                      f"jax.distributed.initialize{': ' + coordinated if coordinated else ''}.", **common)


def array_share(environ=os.environ):
  """(share, count, task id) of a Slurm array task: task id SLURM_ARRAY_TASK_ID of the range MIN..MAX by STEP
  (SLURM_ARRAY_TASK_COUNT tasks) is share (id - MIN) / STEP of COUNT. InputError naming what is missing or is not a
  range (an index list such as --array=1,4,6)."""
  missing = [name for name in ARRAY_REQUIRED if name not in environ]
  if missing:
    raise InputError(f"--cluster=slurm_array: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: "
                     "this is not a task of a Slurm array job (sbatch --array=0-7); without one, drop --cluster or use "
                     "--cluster=auto under srun")
  values = {}
  for name in ARRAY_REQUIRED + ARRAY_OPTIONAL:
    if name in environ:
      try:
        values[name] = int(environ[name])
      except ValueError:
        raise InputError(f"--cluster=slurm_array: {name}={environ[name]!r} is not an integer") from None
  task, first, count = (values[name] for name in ARRAY_REQUIRED)
  step = values.get("SLURM_ARRAY_TASK_STEP", 1)
  last = values.get("SLURM_ARRAY_TASK_MAX", first + step * (count - 1))
  if count < 1 or step < 1 or last != first + step * (count - 1) or not first <= task <= last or (task - first) % step:
    raise InputError(f"--cluster=slurm_array: task SLURM_ARRAY_TASK_ID={task} of SLURM_ARRAY_TASK_MIN={first}, "
                     f"SLURM_ARRAY_TASK_MAX={last}, SLURM_ARRAY_TASK_STEP={step}, SLURM_ARRAY_TASK_COUNT={count}: the "
                     "array's indices are not a range holding this task; submit --array=A-B or A-B:S (with any %N)")
  return (task - first) // step, count, task


def chosen(flag_values=FLAGS, environ=os.environ):
  """The Processes the calling command's flags (and, for --cluster=slurm_array, the environment) describe;
  app.UsageError for --cluster with any of the three flags given, or --process_id outside [0, --num_processes)."""
  cluster = flag_values.cluster
  if cluster != "none":
    given = [f"--{name}" for name in BY_HAND if flag_values[name].present]
    if given:
      raise app.UsageError(f"--cluster={cluster} takes the processes from the cluster; {', '.join(given)} "
                           f"describe{'s' * (len(given) == 1)} them by hand: give one or the other")
  if cluster == "auto":
    return Processes("auto", None, None)
  if cluster == "slurm_array":
    share, count, task = array_share(environ)
    return Processes("slurm_array", share, count, array_task=task)
  if not 0 <= flag_values.process_id < flag_values.num_processes:
    raise app.UsageError(f"--process_id={flag_values.process_id} is outside [0, --num_processes="
                         f"{flag_values.num_processes})")
  return Processes("none", flag_values.process_id, flag_values.num_processes, flag_values.coordinator_address)


def join(processes, initialize):
  """`processes` after `initialize(coordinator_address, num_processes, process_id)` (jax.distributed.initialize, or
  a command's wrapper of it) when they form one jax.distributed run, with --cluster=auto's index and count read back
  from jax; unchanged otherwise. InputError when --cluster=auto finds no cluster jax knows."""
  if not processes.coordinated:
    return processes
  try:
    initialize(processes.coordinator_address, processes.num_processes, processes.process_id)
  except ValueError as e:  # jax's `coordinator_address should be defined.` and the like: nothing was detected
    if processes.cluster != "auto":
      raise
    raise InputError(f"--cluster=auto: jax.distributed.initialize() found no cluster it knows ({e}): run the command "
                     "under srun (Slurm), mpirun (Open MPI) or on a Cloud TPU pod, or give --num_processes, "
                     "--process_id and --coordinator_address instead") from None
  import jax
  return dataclasses.replace(processes, process_id=jax.process_index(), num_processes=jax.process_count())
