"""evaluate's report set is written whole, results.json last, or not at all: a Ctrl-C before the writes leaves no
report, and one that lands while the files are written (the work done) lets them all be written and is not a
stop (run_folder.ctrl_c_held(deliver=False))."""

import json
import os
import signal

import pytest

import run_folder
from lira.reports import loo_report
from lira.reports import synthetic_run


@pytest.fixture
def run(tmp_path):
  path = str(tmp_path / "run")
  synthetic_run.write_synthetic_run(path, num_models=8, num_canaries=30, seq_len=4, seed=0, population_size=0)
  return path


def test_ctrl_c_while_the_reports_are_written_lets_every_file_be_written(run, tmp_path, monkeypatch):
  real = run_folder.save_figure

  def save_figure(path, fig):  # the ROC's PNG, between the scores and results.json: Ctrl-C lands here
    os.kill(os.getpid(), signal.SIGINT)
    real(path, fig)
  monkeypatch.setattr(run_folder, "save_figure", save_figure)
  out = str(tmp_path / "out")
  _, result = loo_report.evaluate_run(run, out, n_boot=0, variants=["oas-shared"], progress=False)
  with open(os.path.join(out, "results_variants-oas-shared_nboot-0.json")) as f:
    listed = json.load(f)["files"]
  assert sorted(listed) == sorted(os.listdir(out)) == sorted(result["files"])  # every file it lists, and no other
  assert not [f for f in os.listdir(out) if f.endswith(".tmp")]


def test_ctrl_c_before_the_reports_are_written_leaves_no_report(run, tmp_path, monkeypatch):
  from lira.reports import plots

  def roc_figure(*args, **kwargs):  # the last work before the writes
    raise KeyboardInterrupt
  monkeypatch.setattr(plots, "roc_figure", roc_figure)
  out = str(tmp_path / "out")
  with pytest.raises(KeyboardInterrupt):
    loo_report.evaluate_run(run, out, n_boot=0, variants=["oas-shared"], progress=False)
  assert not os.path.exists(out) or os.listdir(out) == []
