"""The library with no options scores exactly as `python -m experiments.evaluate` with no flags: one set of defaults."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from lira import scoring

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(args):
  out = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  return out


@pytest.mark.slow
def test_library_defaults_give_the_scores_and_table_evaluate_writes(tmp_path):
  run = tmp_path / "run"
  _run(["-m", "experiments.make_synthetic", f"--run_dir={run}", "--num_models=8", "--num_canaries=40",
        "--seq_len=6", "--ragged"])
  _run(["-m", "experiments.evaluate", f"--run_dir={run}", "--noprogress"])
  code = f"""
    import json, lira, numpy as np
    import run_folder
    run = run_folder.load_run({str(run)!r})
    np.save({str(tmp_path / "default.npy")!r}, lira.leave_one_out(run.loss_MxNxT, run.keep_MxN, mask_NxT=run.mask_NxT))
    for name, covariance, shared in lira.VARIANTS:
      llr = lira.leave_one_out(run.loss_MxNxT, run.keep_MxN, covariance=covariance, shared=shared, mask_NxT=run.mask_NxT)
      np.save({str(tmp_path)!r} + f"/{{covariance}}-{{shared}}.npy", llr)
    rows, _ = lira.evaluate_variants(run.loss_MxNxT, run.keep_MxN, mask_NxT=run.mask_NxT, progress=False)
    print(json.dumps([r["summary"] for r in rows]))
  """
  library = json.loads(_run(["-c", textwrap.dedent(code)]).stdout.strip().splitlines()[-1])
  for name, covariance, shared in scoring.VARIANTS:
    written = np.load(run / f"scores_{scoring.variant_key((name, covariance, shared))}.npy")
    np.testing.assert_array_equal(np.load(tmp_path / f"{covariance}-{shared}.npy"), written)  # bit for bit
  default = scoring.Scoring()
  np.testing.assert_array_equal(np.load(tmp_path / "default.npy"), np.load(run / f"scores_{default.key}.npy"))
  results = json.loads((run / "results.json").read_text())
  assert results["balance_counts"] is True and results["reduction"] is None and results["statistic"] == "logit"
  for summary, row in zip(library, results["variants"]):
    assert summary["auc"] == row["summary"]["auc"] and summary["tpr"] == row["summary"]["tpr"]
