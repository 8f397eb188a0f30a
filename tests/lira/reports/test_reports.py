"""Reports say how they were made: names by settings, strict JSON with the settings, dropped variants named."""

import json
import math
import os

import numpy as np
import pytest

from lira.reports import provenance
from lira.reports import loo_report
import run_folder
from lira.reports import synthetic_run
from lira.errors import InputError


def strict_load(path):
  """json.loads that refuses NaN, Infinity and -Infinity, as strict parsers (JavaScript, Go, jq) do."""

  def refuse(constant):
    raise ValueError(f"{path}: non-standard JSON constant {constant}")

  with open(path) as f:
    return json.loads(f.read(), parse_constant=refuse)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("run"))
  synthetic_run.write_synthetic_run(path, num_models=8, num_canaries=120, seq_len=6, seed=5)
  return path


def test_report_names_list_only_the_settings_that_differ_from_the_defaults():
  defaults = {"reduction": None, "statistic": "logit", "offline": False, "shared": True, "fpr": 1e-4}
  same = {"reduction": None, "statistic": "logit", "offline": False, "shared": True, "fpr": 1e-4}
  assert provenance.report_path("d", "results", "json", same, defaults) == os.path.join("d", "results.json")
  other = {"reduction": "min:4", "statistic": "loss", "offline": True, "shared": False, "fpr": 1e-3}
  name = os.path.basename(provenance.report_path("d", "results", "json", other, defaults))
  assert name == "results_reduction-min4_statistic-loss_offline_noshared_fpr-0.001.json"
  assert provenance.suffix({"variants": ["oas-shared", "univariate-classwise"], "counts": [4, 8]}, {}) == (
      "_variants-oas-shared+univariate-classwise_counts-4+8")
  assert set(provenance.suffix({"odd": "a:b/c d\\e*?"}, {})) <= set("_abcdeo-")  # filesystem-safe, no colons


def test_run_description_names_the_folder_the_model_family_and_the_canary_kind():
  neox = {"model": {"name": "gpt_neox"}, "canaries": {"kind": "average"}}
  assert provenance.run_description("runs/neox/", neox) == "neox (gpt_neox, average-case canaries)"
  assert provenance.run_description("runs/s", {"source": "synthetic"}) == "s (synthetic losses)"
  assert provenance.run_description("own", {}) == "own (model unknown, canary kind unknown)"
  assert provenance.run_description("own", None) == "own (model unknown, canary kind unknown)"
  lstm = {"model": {"name": "lstm"}, "canaries": {"kind": "worst"}}
  assert provenance.runs_description([("a", lstm), ("x/b", neox), ("c/", lstm)]) == (
      "a, c (lstm, worst-case canaries); b (gpt_neox, average-case canaries)")


def test_save_json_writes_strict_json_with_null_for_missing_values(tmp_path):
  path = str(tmp_path / "x.json")
  run_folder.save_json(path, {"nan": float("nan"), "inf": -math.inf, "np": np.float32("nan"), "ok": np.float64(0.5),
                          "int": np.int64(3), "flag": np.bool_(True), "arr": np.array([1.0, np.nan, np.inf]),
                          "nested": [{"t": (np.nan, 2)}]})
  saved = strict_load(path)
  assert saved == {"nan": None, "inf": None, "np": None, "ok": 0.5, "int": 3, "flag": True,
                   "arr": [1.0, None, None], "nested": [{"t": [None, 2]}]}


def test_evaluate_names_dropped_variants_and_refuses_when_none_is_left(run_dir, tmp_path):
  text, result = loo_report.evaluate_run(run_dir, str(tmp_path), fix_variance=True, n_boot=0, progress=False)
  dropped = result["dropped_variants"]
  assert [d["name"] for d in dropped] == ["OAS Class-Wise", "OAS Shared"]
  assert all("fix_variance" in d["reason"] for d in dropped)
  assert text.count("not evaluated: OAS Class-Wise, OAS Shared") == 1  # said once
  assert "--fix_variance pools one variance" in text  # balanced counts (the default) do not apply: said once
  saved = strict_load(tmp_path / "results_fixvariance_nobalancecounts_nboot-0.json")
  assert saved["dropped_variants"] == dropped and saved["balance_counts"] is False
  with pytest.raises(InputError, match="no variant left.*OAS Shared.*offline"):
    loo_report.evaluate_run(run_dir, str(tmp_path / "never"), offline=True, variants=["oas-shared"], progress=False)
  assert not os.path.exists(tmp_path / "never")


def test_evaluate_refuses_an_output_folder_it_cannot_create_before_any_work(run_dir, tmp_path):
  (tmp_path / "file").write_text("")
  with pytest.raises(InputError, match="--out_dir"):
    loo_report.evaluate_run(run_dir, str(tmp_path / "file" / "out"), progress=False)
