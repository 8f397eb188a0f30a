"""RMIA's population files of a run folder read and checked: run_folder.load_population's shapes, and every scored
loss finite and >= 0 (lira.checks), before any scoring. And which population a report was made from: a report whose
rows read the population records its fingerprint (run_folder.population_fingerprint) under FINGERPRINT; one made from
a population the run no longer has (replaced by population_losses --overwrite, or removed) is refused by the commands
that read reports and named by evaluate and population_losses."""

import os

import run_folder
from lira import checks
from lira.errors import InputError
from run_folder import names

FINGERPRINT = "population_fingerprint"


def load_population(run_dir, mmap=False):
  """(population_MxZxT, population_mask_ZxT or None) of run_folder.load_population, with its losses checked: the
  first loss not finite and >= 0 at a scored position is named (model, population sequence, position)."""
  population, mask = run_folder.load_population(run_dir, mmap=mmap)
  checks.check_losses(population, mask, item="population sequence", mask_file=names.POPULATION_MASK)
  return population, mask


def record(run_dir):
  """{FINGERPRINT: the run's population fingerprint}, for a report whose rows read the population."""
  return {FINGERPRINT: run_folder.population_fingerprint(run_dir)}


def _rerun(report):
  """The command line that wrote a report, as a user types it."""
  argv = report.get("argv") or []
  return f"python -m experiments.{report.get('command', '...')} {' '.join(argv[1:])}".rstrip()


def check_report(report, path, run_dir):
  """Refuse a report (its dict, read from `path`) whose rows were computed from a population run_dir no longer has."""
  made = report.get(FINGERPRINT)
  if made is None or made == run_folder.population_fingerprint(run_dir):
    return
  raise InputError(f"{path}: its RMIA rows were computed from a population that {run_dir} no longer has "
                   f"({names.POPULATION_LOSSES} has changed since, or is gone); re-run {_rerun(report)}")


def stale_reports(folders, run_dir):
  """The JSON reports in `folders` made from a population of run_dir that it no longer has (their recorded
  fingerprint differs from the run's), by path."""
  run, stale, now = os.path.realpath(run_dir), [], []  # now: the run's fingerprint, hashed once a report has one
  unique = {}
  for folder in folders:  # each folder once, however it is spelled
    unique.setdefault(os.path.realpath(folder), folder)
  for folder in unique.values():
    if not os.path.isdir(folder):
      continue
    for name in sorted(os.listdir(folder)):
      path = os.path.join(folder, name)
      if not name.endswith(".json") or not os.path.isfile(path):
        continue
      try:
        report = run_folder.load_json(path)
      except (InputError, UnicodeDecodeError):  # not a report of ours
        continue
      if not (isinstance(report, dict) and report.get(FINGERPRINT) is not None
              and os.path.realpath(str(report.get("run_dir"))) == run):
        continue
      now = now or [run_folder.population_fingerprint(run_dir)]
      if report[FINGERPRINT] != now[0]:
        stale.append(path)
  return stale


def stale_note(folders, run_dir):
  """One line naming the reports of `stale_reports`, or None when there are none."""
  stale = stale_reports(folders, run_dir)
  if not stale:
    return None
  return (f"note: reports made from a population that {run_dir} no longer has (their RMIA rows are stale): "
          f"{', '.join(stale)}; re-run the commands that wrote them (each report's argv) or remove them")
