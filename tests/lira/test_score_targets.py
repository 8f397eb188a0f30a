"""lira.reports.target_report: scores and reports for target models trained outside the run (the command,
experiments.score_targets, as a user runs it: tests/e2e/test_score_targets_command.py)."""

import json
import os

import numpy as np
import pytest

import lira
from lira import metrics, synthetic
import run_folder
from lira.reports import target_report
from lira.errors import InputError
from lira import scoring as scoring_lib


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
  """A shadow run of 12 models and 3 target models of the same canaries (ragged), with their membership."""
  root = tmp_path_factory.mktemp("attack")
  loss, keep, mask = synthetic.synthetic_losses(num_models=16, num_canaries=80, seq_len=6, shift=1.5, ragged=True,
                                                seed=7)
  run_folder.save_npy(root / "shadows" / "losses.npy", loss[:12])
  run_folder.save_npy(root / "shadows" / "keep.npy", keep[:12])
  run_folder.save_npy(root / "shadows" / "mask.npy", mask)
  run_folder.save_npy(root / "target.npy", loss[12:15])
  run_folder.save_npy(root / "target_keep.npy", keep[12:15])
  run_folder.save_npy(root / "one_target.npy", loss[15])
  return root, loss, keep, mask


def test_scores_and_report_with_known_membership(folders, tmp_path):
  root, loss, keep, mask = folders
  text, result = target_report.attack_run(str(root / "shadows"), str(root / "target.npy"), str(tmp_path),
                                          str(root / "target_keep.npy"), n_boot=20, progress=False)
  assert "OAS Shared" in text and result["num_targets"] == 3
  for variant, row in zip(scoring_lib.VARIANTS, result["variants"]):
    _, covariance, shared = variant
    want = lira.score_targets(loss[:12], keep[:12], loss[12:15], covariance=covariance, shared=shared, mask_NxT=mask)
    saved = np.load(tmp_path / row["scores_file"])
    np.testing.assert_array_equal(saved, want)
    summary = metrics.summarize(want, keep[12:15], n_boot=20)
    assert row["summary"]["auc"] == summary["auc"] and row["summary"]["tpr"] == summary["tpr"]
  files = set(os.listdir(tmp_path))
  assert {"attack_nboot-20.json", "attack_nboot-20.md", "attack_roc_nboot-20.png"} <= files
  saved = json.loads((tmp_path / "attack_nboot-20.json").read_text(), parse_constant=lambda c: 1 / 0)
  assert saved["schema"]["name"] == "seqlira.attack" and saved["shape"] == {"M": 12, "N": 80, "T": 6}


def test_one_target_without_membership_gives_scores_only(folders, tmp_path):
  root, loss, keep, mask = folders
  text, result = target_report.attack_run(str(root / "shadows"), str(root / "one_target.npy"), str(tmp_path),
                                          variants=["independent-classwise"], offline=True, offline_shift="uniform",
                                          progress=False)
  name = "attack_scores_independent-classwise_offline_offlineshift-uniform.npy"
  report = "attack_variants-independent-classwise_offline_offlineshift-uniform.json"
  assert sorted(os.listdir(tmp_path)) == sorted([name, report])
  want = lira.score_targets(loss[:12], keep[:12], loss[15], covariance="independent", shared=False, offline=True,
                            offline_shift="uniform", mask_NxT=mask)
  np.testing.assert_array_equal(np.load(tmp_path / name), want)
  assert "score > 0" in text


def test_bad_target_files_are_named_before_any_scoring(folders, tmp_path):
  root, loss, _, _ = folders
  run_folder.save_npy(tmp_path / "short.npy", loss[12:14, :50])
  with pytest.raises(InputError, match=r"short\.npy: expected .*N=80"):
    target_report.attack_run(str(root / "shadows"), str(tmp_path / "short.npy"), str(tmp_path / "out"))
  run_folder.save_npy(tmp_path / "keep.npy", np.ones((2, 80), bool))
  with pytest.raises(InputError, match=r"keep\.npy: expected the targets' membership as bool \[K, N\] = \[3, 80\]"):
    target_report.attack_run(str(root / "shadows"), str(root / "target.npy"), str(tmp_path / "out"),
                             str(tmp_path / "keep.npy"))
  # membership (bool) or token ids (int) given as losses, no target at all, and other positions than the run's
  for name, array, match in (("bool", loss[12] > 1, "expected floating-point per-token losses, got dtype bool"),
                             ("int", loss[12:14].astype(np.int64), "got dtype int64"),
                             ("empty", loss[12:12], r"holds no target model \(shape \[0, 80, 6\], K = 0\)"),
                             ("short_T", loss[12, :, :5], r"N=80 canaries and T=6 positions .*got \[80, 5\]")):
    run_folder.save_npy(tmp_path / f"{name}.npy", array)
    with pytest.raises(InputError, match=match):
      target_report.attack_run(str(root / "shadows"), str(tmp_path / f"{name}.npy"), str(tmp_path / "out"))
  assert not (tmp_path / "out").exists()
