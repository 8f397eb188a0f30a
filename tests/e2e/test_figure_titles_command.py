"""Every figure a command draws from a run folder names the run in its title: the folder's name, the model family
and the canary kind of its config.json (lira.reports.provenance.run_description). Commands run as a user runs them
(subprocesses, with test_figure_resolution_command's recorder of each saved figure's titles) on runs of 8 models."""

import json
import subprocess
import sys

import pytest

from test_canary_maps import H, W, write_run
from test_figure_resolution_command import ROOT, run

LSTM = "lstm_run (lstm, worst-case canaries)"
PIXELS = "pixel_run (pixelcnn_pp, average-case canaries)"


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
  """make_synthetic's losses under the config.json of an LSTM run with worst-case canaries."""
  run_dir = tmp_path_factory.mktemp("runs") / "lstm_run"
  proc = subprocess.run([sys.executable, "-m", "experiments.make_synthetic", f"--run_dir={run_dir}", "--num_models=8",
                         "--num_canaries=12", "--seq_len=4", "--shift=3", "--seed=1"], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  config = json.loads((run_dir / "config.json").read_text())
  (run_dir / "config.json").write_text(json.dumps({**config, "model": {"name": "lstm"}, "canaries": {"kind": "worst"}}))
  return run_dir


def titles(record_dir):
  """{png name: [suptitle, axes titles...]} of every figure the command saved."""
  return {p.name[:-len(".titles.json")]: json.loads(p.read_text()) for p in record_dir.glob("*.titles.json")}


def check_named(record_dir, description, pngs):
  recorded = titles(record_dir)
  assert sorted(recorded) == sorted(pngs)
  for png, texts in recorded.items():
    heading = next(t for t in texts if t)  # the suptitle, or the first axes' title where there is none
    assert description in heading, (png, heading)


COMMANDS = {
    "evaluate": (["--n_boot=0", "--variants=oas-shared", "--nosave_scores"], ["roc_variants-oas-shared_nboot-0.png"]),
    "shadow_sweep": (["--counts=8", "--draws=1", "--variants=oas-shared", "--fpr=0.01"],
                     ["shadow_sweep_draws-1_variants-oas-shared_fpr-0.01.png"]),
    "length_grid": (["--lengths=1,2", "--strategies=group", "--covariances=oas", "--n_boot=0"],
                    ["length_grid_lengths-1+2_strategies-group_covariances-oas_nboot-0.png"]),
    "covariance_error": (["--shadow_counts=4,8", "--draws=1"],  # 4, 8: the default counts at M = 8
                         ["error_vs_shadow_models_draws-1.png", "relative_error_draws-1.png",
                          "covariance_heatmap.png"]),
    "cov_structure": (["--permutations=9"], ["cov_structure_permutations-9.png"]),
    "audit": (["--variants=oas-shared"], ["audit_variants-oas-shared.png"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_figure_of_a_run_names_the_run_its_model_and_canaries(command, lstm_run, tmp_path):
  args, pngs = COMMANDS[command]
  run(f"experiments.{command}", tmp_path, f"--run_dir={lstm_run}", f"--out_dir={tmp_path}", *args)
  check_named(tmp_path, LSTM, pngs)


@pytest.mark.slow
def test_score_targets_names_the_shadow_run(lstm_run, tmp_path):
  run("experiments.score_targets", tmp_path, f"--run_dir={lstm_run}", f"--out_dir={tmp_path}", "--n_boot=0",
      f"--target={lstm_run / 'losses.npy'}", f"--target_keep={lstm_run / 'keep.npy'}", "--variants=oas-shared")
  check_named(tmp_path, f"shadow run {LSTM}", ["attack_roc_variants-oas-shared_nboot-0.png"])


@pytest.mark.slow
def test_image_maps_name_the_run(tmp_path):
  run_dir = tmp_path / "pixel_run"
  run_dir.mkdir()
  write_run(run_dir, config={"model": {"name": "pixelcnn_pp", "image_shape": [H, W, 1], "num_levels": 17},
                             "canaries": {"kind": "average"}})
  record = tmp_path / "record"
  record.mkdir()
  run("experiments.image_maps", record, f"--run_dir={run_dir}", f"--out_dir={tmp_path / 'maps'}")
  check_named(record, PIXELS, ["canary_maps.png", "pixel_covariance.png", "covariance_heatmap.png"])

