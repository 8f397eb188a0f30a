"""What every command shares on its command line, checked on every command as a user runs it (subprocesses): `--help`
prints the command's flags to stdout and exits 0; an unknown flag, a value outside its flag's range or a missing
required flag is one `error: ...` line with exit status 2, found while the flags are parsed (before any work);
`--noprogress` is accepted. The commands are found, not listed: every experiments/*.py that calls `cli.run(main...)`.

The subprocesses run in parallel (a module fixture starts them all; each takes the seconds of its imports)."""

import ast
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

import pytest

from experiments import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _source(command):
  with open(os.path.join(ROOT, "experiments", f"{command}.py")) as f:
    return f.read()


COMMANDS = sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
                  if "cli.run(main" in open(path).read())


def defined_flags(command):
  """The flags the command's module defines: its DEFINE_* calls and the scoring, attack and process flags it
  takes."""
  source = _source(command)
  names = set(re.findall(r"DEFINE_\w+\(\s*\"(\w+)\"", source))
  for chosen in re.findall(r"scoring_flags\.define\((.*?)\)\n", source):
    from experiments import scoring_flags
    names |= set(ast.literal_eval(chosen) if chosen else scoring_flags.EVALUATION)
  for chosen in re.findall(r"option_flags\.define\(\w[\w.]*, (\(.*?\))\)\n", source):
    names |= set(ast.literal_eval(chosen))
  for where in re.findall(r"attack_flags\.define\(\s*\"(\w+)\"", source):
    from attacks.catalogue import ATTACKS
    names |= {"attacks"} | {s.name for s in ATTACKS.settings_for(where)}
  if "process_flags.define(" in source:
    from experiments import process_flags
    names |= {"cluster", *process_flags.BY_HAND}
  return names


def required_flags(command):
  """Placeholder values of the flags absl requires (mark_flag(s)_as_required): what a parse that succeeds needs."""
  source = _source(command)
  names = re.findall(r"mark_flag_as_required\(\"(\w+)\"\)", source)
  for group in re.findall(r"mark_flags_as_required\(\[(.*?)\]\)", source):
    names += re.findall(r"\"(\w+)\"", group)
  return [f"--{name}=placeholder" for name in names]


# Bad values, at least one per command with numeric flags: the (evaluate, length_grid, shadow_sweep,
# pretrain_attacks, make_synthetic) and each kind of check (a bound, both bounds, an even number, a finite float, a
# list of integers, a scoring field). That every other integer or number flag has its range is read off --help.
BAD_VALUES = {
    "audit": ["--delta=0", "--confidence=1"],
    "compare_runs": ["--n_boot=0"],
    "false_positives": ["--top=0", "--fpr=1"],
    "token_map": ["--top=0"],
    "cov_structure": ["--max_positions=1"],
    "covariance_error": ["--shadow_counts=1,4"],
    "evaluate": ["--n_boot=-1", "--k=1.5", "--reduction=min:0"],
    "extract_features": ["--shots=-1", "--neighbour_fraction=0"],
    "extract_tokens": ["--max_length=1"],
    "image_maps": ["--canary=-1"],
    "length_grid": ["--fpr=2"],
    "make_synthetic": ["--num_canaries=0", "--num_models=7", "--shift=nan"],
    "membership_structure": ["--gaps=0,2", "--n_boot=-1"],
    "paper_table": ["--n_boot=0"],
    "partial_run": ["--num_models=2"],
    "population_losses": ["--size=0"],
    "pretrain_attacks": ["--gamma=-1"],
    "score_targets": ["--seed=-1"],
    "shadow_sweep": ["--draws=0", "--counts=2,8"],
    "train_shadows": ["--num_processes=0"],
}
BAD_CASES = [(command, arg) for command in sorted(BAD_VALUES) for arg in BAD_VALUES[command]]
OTHER_ERRORS = [  # (command, args, what the error line says)
    ("paper_table", ("--run_dir=placeholder", "--setting=foo"), "--setting=foo: must be one of none, "),
    ("score_targets", ("--run_dir=placeholder", "--target=placeholder"), "--out_dir is required"),
    ("evaluate", ("--n_boot=abc",), "--n_boot=abc: must be an integer"),
    ("evaluate", ("--noprogress=3",), "--noprogress=3 does not take an argument"),
    ("evaluate", ("--run_dir=placeholder", "stray"), "unexpected argument 'stray'"),
    ("shadow_sweep", ("--draws",), "--draws needs a value"),
    ("population_losses", ("--run_dir=placeholder", "--source=outside"), "--source=outside: must be one of auto, "
     "heldout"),
    ("train_shadows", ("--config.model.hiden_dim=3",), "unknown flag --config.model.hiden_dim: the config has no "
     "field 'hiden_dim'; did you mean \"hidden_dim\""),
    ("pretrain_benchmark", ("--config=nofile.py", "--out_dir=placeholder"), "--config=nofile.py: "),
]
UNKNOWN = "--no_such_flag=1"


def _run(cwd, command, *args):
  """The command run from `cwd` (a temporary folder: a check that failed to stop it writes nothing into the repo)."""
  env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, "-m", f"experiments.{command}", *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300)


def _invocations():
  calls = [(command, ("--help",)) for command in COMMANDS]
  calls += [(command, ("--noprogress", UNKNOWN)) for command in COMMANDS]
  calls += [(command, (*required_flags(command), arg)) for command, arg in BAD_CASES]
  calls += [(command, args) for command, args, _ in OTHER_ERRORS]
  calls.append(("evaluate", ("--helpfull",)))
  return calls


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  """{(command, args): CompletedProcess} of every invocation above, run in parallel."""
  cwd = str(tmp_path_factory.mktemp("commands"))
  calls = _invocations()
  with concurrent.futures.ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
    done = list(pool.map(lambda call: _run(cwd, call[0], *call[1]), calls))
  assert os.listdir(cwd) == [], os.listdir(cwd)  # every command stopped before it wrote anything
  return dict(zip(calls, done))


def assert_one_error_line(proc, *needles):
  assert proc.returncode == cli.EXIT_USER_ERROR, (proc.returncode, proc.stderr[-2000:])
  assert "Traceback" not in proc.stderr and "FATAL" not in proc.stderr, proc.stderr[-2000:]
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
  for needle in needles:
    assert needle in lines[0], lines[0]
  return lines[0]


def test_every_command_is_found():
  assert {"train_shadows", "evaluate", "score_targets", "paper_table", "make_synthetic", "partial_run",
          "extract_tokens", "pretrain_benchmark", "population_losses"} <= set(COMMANDS)
  assert set(BAD_VALUES) <= set(COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_0_and_lists_every_flag_and_its_range(results, command):
  proc = results[command, ("--help",)]
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stderr == "", proc.stderr[-2000:]
  listing = proc.stdout.split("\nflags:\n", 1)[1]
  for name in defined_flags(command) | {"progress"}:
    assert re.search(rf"^  --(\[no\])?{name}:", listing, re.M), (command, name)
  # every integer or number flag states its range (cli.check_range adds it to the help, and checks it)
  for entry in re.split(r"\n(?=  --\S+?:)", listing):
    text = " ".join(entry.split())
    if "(an integer)" in text or "(a number)" in text:
      assert " Must be " in text, (command, text)


@pytest.mark.slow
def test_helpfull_exits_0(results):
  proc = results["evaluate", ("--helpfull",)]
  assert proc.returncode == 0 and "--n_boot" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_noprogress_is_accepted_and_an_unknown_flag_is_one_error_line(results, command):
  # absl raises on the first unknown flag in order: an error naming --no_such_flag means --noprogress was taken
  assert_one_error_line(results[command, ("--noprogress", UNKNOWN)], "unknown flag --no_such_flag")


@pytest.mark.slow
@pytest.mark.parametrize("command,arg", BAD_CASES)
def test_a_value_outside_its_range_is_refused_naming_the_flag(results, command, arg):
  line = assert_one_error_line(results[command, (*required_flags(command), arg)], f"error: {arg}: ")
  assert re.search(r": (must be|reduction must be) ", line), line


@pytest.mark.slow
@pytest.mark.parametrize("command,args,needle", OTHER_ERRORS)
def test_flag_parsing_errors_are_one_error_line(results, command, args, needle):
  assert_one_error_line(results[command, args], needle)
