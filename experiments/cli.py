"""The one entry point of every command: user errors become `error: ...` on stderr and exit status 2.

A user error (lira.errors.UserError: a bad file, flag, config field or array, named in the message; an operating-system
error on a path the user gave: missing, unreadable, read-only, disk full; or a bad command line: an unknown flag, a
value outside its range, a missing required flag) is reported as its message alone. Anything else is a bug and keeps
its traceback. The flags are parsed here, before main runs (`parse_flags`): a bad one is refused before any work, and
`--help` / `--helpfull` print to stdout and exit with status 0. Every flag with a numeric domain declares it with
`check_range`, which also appends it to the flag's help.

Ctrl-C (SIGINT) ends a command with one line, `stopped by Ctrl-C (SIGINT)` (and, for a command that resumes, that the
finished work is kept), and exit status 130 (128 + SIGINT, as a shell reports it). Every file is written atomically,
so nothing half-written is left (train_shadows stops between training steps instead: training.preemption).
"""

import math
import os
import re
import _thread
import signal
import sys
import threading
import warnings

from absl import app
from absl import flags

from experiments import EXIT_INTERRUPTED  # 130 (128 + SIGINT); experiments/__init__.py handles Ctrl-C until run()
from experiments import STOPPED
from lira.errors import UserError
from lira.options import range_words

EXIT_USER_ERROR = 2
RESUMES = "finished work is kept, run the command again to resume"
_HELP_FLAGS = (app.HelpFlag, app.HelpfullFlag, app.HelpXMLFlag)  # absl's, which exit with status 1 after the help


def message(error):
  """What a user error says: its text, or for an OSError on a path, `path: reason`."""
  if isinstance(error, OSError) and error.filename is not None and error.strerror:
    return f"{error.filename}: {error.strerror}"
  return str(error)


def is_user_error(error):
  return isinstance(error, (UserError, app.UsageError)) or (isinstance(error, OSError) and error.filename is not None)


def report(error):
  """Print a user error as one `error: ...` line on stderr; returns the exit status to use."""
  hint = " (see --help)" if isinstance(error, app.UsageError) else ""
  print(f"error: {message(error)}{hint}", file=sys.stderr)
  return EXIT_USER_ERROR


def flag_defaults(names):
  """{name: default} of the named absl flags: what a report's file name leaves out (the flags are the one source)."""
  return {name: flags.FLAGS[name].default for name in names}


# ---- flag values: their ranges, and absl's parsing errors as one line -------------------------------------------

def _number(value):
  return f"{value:g}" if isinstance(value, float) else str(value)


def _rule(low, high, low_open, high_open, even):
  """The words of a range (lira.options.range_words): '>= 0', 'in (0, 1]', 'an even number >= 6'."""
  words = range_words(low, high, low_open, high_open)
  return "a finite number" if words is None else ("an even number " if even else "") + words


def check_range(name, low=None, high=None, *, low_open=False, high_open=False, even=False, flag_values=flags.FLAGS):
  """Refuse a value of the numeric flag `name` outside its domain when the flags are parsed, before any work:
  `error: --name=value: must be >= 0` (None, the default of an optional flag, passes). A float must be finite too; a
  list flag (comma-separated numbers) must hold integers, each in the range. The range is appended to the help."""
  flag = flag_values[name]
  is_list = isinstance(flag.parser, flags.ListParser)
  rule = _rule(low, high, low_open, high_open, even)
  what = f"comma-separated integers, each {rule}" if is_list else rule

  def inside(x):
    if isinstance(x, float) and not math.isfinite(x):
      return False
    return ((low is None or (x > low if low_open else x >= low)) and
            (high is None or (x < high if high_open else x <= high)) and not (even and x % 2))

  def checker(value):
    if value is None:
      return True
    if is_list:
      try:
        ok = all(inside(int(v)) for v in value)
      except ValueError:
        ok = False
      shown = ",".join(value)
    else:
      ok, shown = inside(value), _number(value)
      if isinstance(value, float) and not math.isfinite(value):
        finite = what if what.startswith("a finite number") else f"a finite number {what}"
        raise flags.ValidationError(f"--{name}={shown}: must be {finite}")
    if not ok:
      raise flags.ValidationError(f"--{name}={shown}: must be {what}")
    return True

  flags.register_validator(name, checker, flag_values=flag_values)
  flag.help = f"{flag.help.rstrip()} Must be {what}."


def flag_error_message(error):
  """absl's text of a flag-parsing error as this package's one line, naming the flag (and value) at fault."""
  text = str(error).removeprefix("ERROR:: ")  # absl's prefix of a flagfile it cannot open
  cause, chained = None, error.__cause__ or error.__context__
  while chained is not None:  # the innermost user error: ml_collections re-raises one with a traceback in its text
    cause = chained if isinstance(chained, UserError) else cause
    chained = chained.__cause__ or chained.__context__
  if cause is not None:  # a config file's get_config refusing its variant
    parsed = re.match(r"flag (--\S+?)=", text)
    return f"{parsed.group(1) + ': ' if parsed else ''}{message(cause)}"
  missing = re.match(r"Missing value for flag (--\S+)$", text)
  if missing:
    return f"{missing.group(1)} needs a value ({missing.group(1)}=VALUE)"
  if isinstance(error, flags.UnrecognizedFlagError):
    similar = re.search(r"Did you mean: (.+?) ?\?$", text)
    hint = f"; did you mean {', '.join('--' + s.strip() for s in similar.group(1).split(','))}?" if similar else ""
    return f"unknown flag {error.flagvalue.split('=')[0] or '--' + error.flagname}{hint}"
  required = re.search(r"Flag --(\S+) must have a value other than None", text)
  if required:
    return f"--{required.group(1)} is required"
  parsed = re.match(r"flag --([\w.-]+)=(.*)$", text, re.S)
  if not parsed:
    return text
  name, rest = parsed.groups()
  ours = rest.find(f": --{name}=")  # a check_range message names the flag and value itself
  if ours >= 0:
    return rest[ours + 2:]
  for pattern, says in ((r"(.*): value should be one of <(.*)>$", None),
                        (r"(.*): invalid literal for int\(\) with base \d+: .*$", "must be an integer"),
                        (r"(.*): could not convert string to float: .*$", "must be a number")):
    m = re.match(pattern, rest, re.S)
    if m:
      return f"--{name}={m.group(1)}: {says or 'must be one of ' + ', '.join(m.group(2).split('|'))}"
  return f"--{name}={rest}"


def define_config_file(name, default, help_string):
  """ml_collections' DEFINE_config_file. It reads the command line while the flag is defined, and an override of a
  field the config lacks (--config.model.nope=1) raises there, before any parsing: that is one `error: ...` line."""
  from ml_collections import config_flags
  try:
    return config_flags.DEFINE_config_file(name, default, help_string)
  except (AttributeError, KeyError) as e:
    says = _unknown_config_field(e, sys.argv, name)
    if says is None:
      raise
    sys.exit(report(app.UsageError(says)))


def _unknown_config_field(error, argv, name):
  """The line for ml_collections' error about an override of a field the config lacks (`'nope'`, then perhaps
  `Did you mean "x" instead of "nope"?`), or None if no --NAME.PATH override on argv names that field."""
  while error.args and isinstance(error.args[0], BaseException):  # AttributeError(KeyError(text))
    error = error.args[0]
  lines = (error.args[0] if error.args and isinstance(error.args[0], str) else str(error)).splitlines() or [""]
  field = lines[0].strip("'\"")
  given = [arg.split("=")[0] for arg in argv[1:] if arg.startswith(f"--{name}.")]
  arg = next((a for a in given if field in a.split(".")[1:]), None)
  if arg is None:
    return None
  hint = f"; {lines[1][0].lower()}{lines[1][1:]}" if len(lines) > 1 and lines[1] else ""
  return f"unknown flag {arg}: the config has no field {field!r}{hint}"


def _help_exit(exit_error):
  """Whether this SystemExit comes from absl's --help / --helpfull / --helpxml (which exit with status 1)."""
  tb = exit_error.__traceback__
  while tb is not None:
    if isinstance(tb.tb_frame.f_locals.get("self"), _HELP_FLAGS):
      return True
    tb = tb.tb_next
  return False


def parse_flags(argv):
  """absl's flag parsing (app.run's flags_parser): a bad command line is one `error: ...` line with exit status 2,
  --help exits with status 0, and an argument that is not a flag is refused (every setting is a flag)."""
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    sys.exit(report(app.UsageError(flag_error_message(e))))
  except UserError as e:  # a config file's get_config refusing its variant
    sys.exit(report(e))
  except ValueError as e:  # absl's own for a boolean given a value: `--noprogress=3 does not take an argument`
    if "does not take an argument" not in str(e):
      raise
    sys.exit(report(app.UsageError(str(e))))
  except (AttributeError, KeyError) as e:  # ml_collections: an override of a field the --config file lacks
    config_flags = [name for name in flags.FLAGS if type(flags.FLAGS[name]).__name__ == "_ConfigFlag"]
    says = next((s for s in (_unknown_config_field(e, argv, name) for name in config_flags) if s), None)
    if says is None:
      raise
    sys.exit(report(app.UsageError(says)))
  except SystemExit as e:
    if e.code == 1 and _help_exit(e):
      sys.exit(0)
    raise
  if len(rest) > 1:
    sys.exit(report(app.UsageError(f"unexpected argument {rest[1]!r}: every setting is a --flag")))
  for name in flags.FLAGS:  # ml_collections keeps a config file it could not load as a value that raises when read
    value = flags.FLAGS[name].value
    if type(value).__name__ == "_ErrorConfig":
      failure = str(vars(value).get("_error", "")).strip().splitlines() or ["cannot be loaded"]
      sys.exit(report(app.UsageError(f"--{name}={flags.FLAGS[name].config_filename}: {failure[-1].strip()}")))
  return rest


# ---- Ctrl-C ------------------------------------------------------------------------------------------------------

def stopped(resumes=False):
  """Print the one line of a command stopped by Ctrl-C; returns the exit status (130)."""
  lead = "\n" if sys.stderr.isatty() else ""  # after a progress bar or the terminal's ^C, on a line of its own
  print(f"{lead}{STOPPED}{'; ' + RESUMES if resumes else ''}", file=sys.stderr)
  _forget_interrupt()
  # A coroutine the interrupt left unstarted (orbax's checkpoint I/O) is reported at exit as "never awaited": the
  # stop line says all there is to say.
  warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
  return EXIT_INTERRUPTED


def _forget_interrupt():
  """Let the exit status asked for stand. CPython remembers a KeyboardInterrupt that left source code run by exec()
  or eval() (as dataclasses, namedtuple and libraries build functions), even one caught afterwards, and a `python -m`
  process then ends itself by SIGINT at exit (status -2) instead; running source again clears that memory."""
  exec("pass")  # noqa: S102 - a constant: it runs nothing


def _unraisable(hook):
  """sys.unraisablehook that re-delivers a KeyboardInterrupt Python could not raise (one that arrived inside a
  callback it calls from no frame: a weakref or garbage-collection callback such as jax's `_xla_gc_callback`, which
  Python reports as "Exception ignored" and drops): the main thread is interrupted again, until the interrupt lands
  where it can stop the command. It drops asyncio's "Event loop is closed" from `call_soon_threadsafe` called by
  native code: I/O a Ctrl-C abandoned (orbax's tensorstore reads) finishing after its event loop was closed, whose
  result went with the loop; reported, it is a bare traceback beside the stop line. Other unraisable exceptions go
  to `hook`."""
  def unraisable(info):
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
      # from another thread, a moment later: raised here, inside the hook, it would be dropped again
      threading.Timer(0.01, _thread.interrupt_main).start()
      return
    if _closed_loop_callback(info):
      return
    hook(info)
  return unraisable


def _closed_loop_callback(info):
  """Whether an unraisable exception is asyncio's "Event loop is closed" raised in `call_soon_threadsafe` called
  from no Python frame (a native callback)."""
  tb = info.exc_traceback
  return (info.exc_type is RuntimeError and str(info.exc_value) == "Event loop is closed" and tb is not None
          and tb.tb_frame.f_code.co_name == "call_soon_threadsafe"
          and tb.tb_frame.f_code.co_filename.endswith(os.path.join("asyncio", "base_events.py")))


def _wraps_interrupt(e):
  """Whether an exception is Python's wrapper of a Ctrl-C: a KeyboardInterrupt raised inside a hook Python calls
  while it builds a class (Python 3.11's `RuntimeError: Error calling __set_name__ ...`, as a module imported lazily
  defines its dataclasses) reaches the command as the wrapper's cause."""
  seen = set()
  while e is not None and id(e) not in seen:
    if isinstance(e, KeyboardInterrupt):
      return True
    seen.add(id(e))
    e = e.__cause__
  return False


def _exiting():
  """The command's work is done and its last line printed: a Ctrl-C during the interpreter's exit (a second or more
  with jax loaded) is ignored, and one a library swallowed on the way (which CPython remembers, _forget_interrupt) is
  forgotten, so neither turns a finished command into one killed by SIGINT (status -2, no line)."""
  _forget_interrupt()
  if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run(main, resumes=False):
  """absl's app.run(main), with the flags parsed by `parse_flags`, user errors printed as `error: ...` (exit status
  2) instead of a traceback, and Ctrl-C as one `stopped by Ctrl-C (SIGINT)` line (exit status 130); `resumes`: the
  command keeps its finished work and resumes when run again, and the line says so."""

  def guarded(argv):
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # (a background job ignores it)
      signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C is a KeyboardInterrupt again, caught here
      sys.unraisablehook = _unraisable(sys.unraisablehook)
    try:
      result = main(argv)
    except KeyboardInterrupt:
      _exiting()
      sys.exit(stopped(resumes))
    except Exception as e:  # noqa: BLE001 - re-raised unless it is the user's to fix or a wrapped Ctrl-C
      if _wraps_interrupt(e):
        _exiting()
        sys.exit(stopped(resumes))
      if not is_user_error(e):
        raise
      _exiting()
      sys.exit(report(e))
    _exiting()
    return result

  app.run(guarded, flags_parser=parse_flags)
