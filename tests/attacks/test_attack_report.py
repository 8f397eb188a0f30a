"""Reports of the pretraining-data attacks: pretrain_attacks on a features folder (tests/attacks/
test_evaluate_attacks.py: evaluate --attacks on a run).

Metrics are checked against sklearn's roc_auc_score / roc_curve on the attack scores.
"""

import json
import os

import numpy as np
import pytest
from absl import flags
from sklearn import metrics as skm

import attacks as A
from attacks import blind
from attacks import ez_mia
from attacks import feature_folder
from attacks import informia
from attacks import wbc
from attacks.catalogue import ATTACKS
from lira.errors import InputError, MissingFileError
import run_folder
from lira.reports import synthetic_run
from attack_cli import N, S, T, make_features, run_cli, strict_json
from attack_cli import pretrain_cli  # noqa: F401 (a fixture)


def sk_tpr(scores, labels, fpr):
  fpr_G, tpr_G, _ = skm.roc_curve(labels, scores, drop_intermediate=False)
  return tpr_G[fpr_G <= fpr].max()


def expected_scores(arrays, texts, k=0.2):
  """The score each table row must hold, from the attack functions on the arrays (tuned rows by their params)."""
  a = {n: np.asarray(v, np.float64) for n, v in arrays.items() if n not in ("ids", "mask", "labels")}
  return {
      "loss": lambda p: A.loss(a["lp"]), "zlib": lambda p: A.zlib(a["lp"], texts),
      "min_k": lambda p: A.min_k(a["lp"], k), "min_k_pp": lambda p: A.min_k_pp(a["lp"], a["mu"], a["sigma"], k),
      "reference": lambda p: A.reference(a["lp"], a["ref_lp"]),
      "neighbourhood": lambda p: A.neighbourhood(a["lp"], a["neighbour_lp"]),
      "recall": lambda p: A.recall(a["lp"], a["cond_lp_shots"][p["shots"] - 1]),
      "recall_shots": lambda p: A.recall(a["lp"], a["cond_lp_shots"][p["shots"] - 1]),
      "recall_ensemble": lambda p: A.recall_ensemble(a["lp"], a["cond_lp_ensemble"]),
      "con_recall": lambda p: A.con_recall(a["lp"], a["cond_lp_shots"][-1], a["cond_lp_member"], p["gamma"]),
      "em_mia": lambda p: A.em_mia(a["pair_lp"], a["lp"], A.min_k_pp(a["lp"], a["mu"], a["sigma"], k))[0],
      "blind": lambda p: blind.blind(texts, arrays["labels"], p["folds"], p["seed"])[0],
      "wbc": lambda p: wbc.wbc(a["lp"], a["ref_lp"], tuple(p["wbc_windows"])),
      "ez_mia": lambda p: ez_mia.ez_mia(a["lp"], a["ref_lp"], arrays["top1"]),
      "informia": lambda p: informia.texts(a["lp"], a["ref_lp"]),
      "informia_tokens": lambda p: informia.texts(a["lp"], a["ref_lp"], tokens=True, ref_kl_NxT=a["ref_kl"]),
  }


def check_rows(result, expected, labels, printed):
  """Every row's AUC and TPRs equal sklearn's on the scores its attack function gives."""
  for row in result["rows"]:
    scores = expected[row["attack"]](row["params"])
    summary = row["summary"]
    # The same scores through sklearn: AUC is a ratio of integer counts, equal to float64 rounding.
    assert summary["auc"] == pytest.approx(skm.roc_auc_score(labels, scores), abs=1e-12), row["name"]
    for fpr in (0.01, 0.05):
      assert summary["tpr"][f"{fpr:g}"]["tpr"] == sk_tpr(scores, labels, fpr), row["name"]
    assert summary["n_pos"] == N // 2 and summary["n_neg"] == N // 2
    lo, hi = summary["auc_ci"]
    assert lo <= summary["auc"] <= hi, row["name"]
    assert row["name"] in printed


def test_pretrain_attacks_rows_match_sklearn(tmp_path, pretrain_cli, capsys):
  arrays, texts = make_features(tmp_path)
  run_cli(pretrain_cli, f"--features={tmp_path}")
  printed = capsys.readouterr().out
  result = strict_json(tmp_path / "results.json")
  written = set(feature_folder.FILES.values()) - {"prefix.json"}
  assert sorted(os.listdir(tmp_path)) == sorted(written | {"results.json", "results.md", "roc.png"})
  # the fixture's reference model has a tokenizer of its own, so the attacks that compare the two models token by
  # token (WBC, EZ-MIA, token-level InfoRMIA) are skipped, each with its reason
  assert result["schema"]["name"] == "seqlira.pretrain_attacks"
  token_by_token = ["wbc", "ez_mia", "informia_tokens"]
  assert [(s["attack"], "same tokenizer" in s["reason"]) for s in result["skipped"]] == [
      (name, True) for name in token_by_token]
  every = [name for name in ATTACKS.names("texts") if name not in token_by_token]
  assert result["settings"]["attacks"] == every
  assert {r["attack"] for r in result["rows"]} == set(every)
  labels = arrays["labels"] == 1
  expected = expected_scores(arrays, texts)
  check_rows(result, expected, labels, printed)
  tuned = [r for r in result["rows"] if r["tuned"]]
  assert {r["attack"] for r in tuned} == {"con_recall", "recall_shots"}
  assert all("tuned on the evaluated set" in r["name"] for r in tuned)
  shots = [r for r in result["rows"] if r["attack"] == "recall_shots"]
  assert [r["params"]["shots"] for r in shots[:-1]] == [1, 2, 3]  # one row per shot count, then the best
  best = max(shots[:-1], key=lambda r: r["summary"]["auc"])
  assert shots[-1]["summary"]["auc"] == best["summary"]["auc"]
  con = next(r for r in tuned if r["attack"] == "con_recall")
  assert con["summary"]["auc"] == max(con["params"]["auc_by_gamma"].values())
  assert "tuned on the evaluated set" in (tmp_path / "results.md").read_text()


def test_a_reference_on_the_same_tokens_scores_the_token_by_token_attacks(tmp_path, pretrain_cli, capsys):
  """WBC, EZ-MIA and InfoRMIA (both forms) on a features folder whose reference shares the target's tokens: listed
  beside the others, each row equal to its function through sklearn."""
  arrays, texts = make_features(tmp_path, same_tokens=True)
  run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=reference,wbc,ez_mia,informia,informia_tokens")
  printed = capsys.readouterr().out
  result = strict_json(tmp_path / "results_attacks-reference+wbc+ez_mia+informia+informia_tokens.json")
  assert result["skipped"] == []
  assert [r["attack"] for r in result["rows"]] == ["reference", "wbc", "ez_mia", "informia", "informia_tokens"]
  check_rows(result, expected_scores(arrays, texts), arrays["labels"] == 1, printed)
  auc = {r["attack"]: r["summary"]["auc"] for r in result["rows"]}
  # one target and one reference model: the sequence form's correction is one constant, so it ranks as the Reference
  # attack; the token form's comes from ref_kl, position by position, so its ranking is its own
  assert auc["informia"] == auc["reference"] != auc["informia_tokens"]


def test_tpr_keeps_every_roc_point_where_the_official_readings_lose_one():
  # 40 members, 40 non-members; the top 5 scores each tie one member with one non-member, so the ROC rises
  # diagonally through (1, 1) ... (5, 5) in counts; 5% FPR is exactly 2 non-members.
  from attacks import report
  labels_N = np.array([1] * 40 + [0] * 40, bool)
  scores_N = np.r_[100 - np.arange(5), 50 - np.arange(35), 100 - np.arange(5), -np.arange(35)].astype(np.float64)
  summary = report.summarize_row({"name": "ties", "scores": scores_N}, labels_N, n_boot=0, seed=0)
  assert summary["tpr"]["0.05"]["tpr"] == 2 / 40  # the (2, 2) point: largest TPR with fpr <= 0.05
  fpr_G, tpr_G, _ = skm.roc_curve(labels_N, scores_N)  # drop_intermediate=True, as every official metric calls it
  assert 2 / 40 not in fpr_G  # (2, 2) lies on the diagonal between kept corners: dropped
  assert tpr_G[np.where(fpr_G <= 0.05)[0][-1]] == 1 / 40  # Min-K%++'s get_metrics
  assert tpr_G[np.where(fpr_G < 0.05)[0][-1]] == 1 / 40  # MIMIR, ReCaLL, Con-ReCall, EM-MIA, detect-pretrain-code
  fpr_G, tpr_G, _ = skm.roc_curve(labels_N, scores_N, drop_intermediate=False)
  assert tpr_G[np.where(fpr_G < 0.05)[0][-1]] == 1 / 40  # `<` alone also leaves out fpr == target


def test_pretrain_attacks_settings_in_names_gamma_and_shots(tmp_path, pretrain_cli):
  arrays, texts = make_features(tmp_path)
  out = tmp_path / "out"
  run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=recall,con_recall,min_k", "--k=0.5", "--gamma=0.3",
          "--shots=2", "--n_boot=0", f"--out_dir={out}")
  stem = "results_attacks-recall+con_recall+min_k_k-0.5_gamma-0.3_shots-2_nboot-0"
  assert sorted(os.listdir(out)) == sorted([f"{stem}.json", f"{stem}.md", f"roc{stem[7:]}.png"])
  result = strict_json(out / f"{stem}.json")
  assert [r["name"] for r in result["rows"]] == ["ReCaLL (2 shots)", "Con-ReCall (gamma=0.3)", "Min-K% (k=0.5)"]
  assert not any(r["tuned"] for r in result["rows"])
  assert result["rows"][0]["summary"]["auc_ci"] == [None, None]  # no bootstrap: null, never NaN
  labels = arrays["labels"] == 1
  expected = expected_scores(arrays, texts, k=0.5)
  for row in result["rows"]:
    assert row["summary"]["auc"] == pytest.approx(skm.roc_auc_score(labels, expected[row["attack"]](row["params"])),
                                                  abs=1e-12)  # float64 rounding of a count ratio


def test_auc_below_half_is_not_flipped(tmp_path, pretrain_cli):
  arrays, _ = make_features(tmp_path)
  feature_folder.write_array(tmp_path, "labels", 1 - arrays["labels"])  # members now score lower
  run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss", "--n_boot=20")
  auc = strict_json(tmp_path / "results_attacks-loss_nboot-20.json")["rows"][0]["summary"]["auc"]
  scores = A.loss(arrays["lp"])
  assert auc < 0.5
  assert auc == pytest.approx(skm.roc_auc_score(arrays["labels"] == 0, scores), abs=1e-12)  # count ratio
  assert auc == pytest.approx(1 - skm.roc_auc_score(arrays["labels"] == 1, scores), abs=1e-12)  # no ties: exact


def test_roc_legend_prints_n_r_where_the_table_does(tmp_path, pretrain_cli, monkeypatch):
  make_features(tmp_path)  # 20 non-members: TPR at 1% FPR (the legend's) needs 100, the table prints n/r
  figures = {}
  monkeypatch.setattr(run_folder, "save_figure", lambda path, fig: figures.setdefault(os.path.basename(path), fig))
  run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss,min_k", "--n_boot=0")
  result = strict_json(tmp_path / "results_attacks-loss+min_k_nboot-0.json")
  texts = [t.get_text() for t in figures["roc_attacks-loss+min_k_nboot-0.png"].legends[0].get_texts()]
  for row in result["rows"]:
    assert not row["summary"]["tpr"]["0.01"]["resolved"] and row["summary"]["tpr"]["0.05"]["resolved"]
    assert next(t for t in texts if t.startswith(row["name"] + ",")).endswith("TPR@1% n/r")
  assert "n/r = not resolved: TPR@1% FPR needs >= 100 negatives; available 20" in texts
  with open(tmp_path / "results_attacks-loss+min_k_nboot-0.md") as f:
    assert "| n/r |" in f.read()


def test_missing_array_names_attack_and_file(tmp_path, pretrain_cli, capsys):
  make_features(tmp_path)
  os.remove(tmp_path / "pair_lp.npy")  # a folder built without EM-MIA's pairs: features.json does not list them
  feature_folder.write_meta(tmp_path, {"model": "hand-made", "n_texts": N, "notes": []})
  with pytest.raises(MissingFileError, match=r"attack em_mia needs pair_lp\.npy, which .* lacks"):
    run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss,em_mia")
  assert not (tmp_path / "results_attacks-loss+em_mia.json").exists()
  pretrain_cli.FLAGS.unparse_flags()
  run_cli(pretrain_cli, f"--features={tmp_path}", "--n_boot=0")  # default: every attack that can run
  result = strict_json(tmp_path / "results_nboot-0.json")
  assert result["skipped"][0] == {"attack": "em_mia", "reason": "the folder has no pair_lp.npy"}
  # the fixture's reference has its own tokenizer
  assert [s["attack"] for s in result["skipped"]] == ["em_mia", "wbc", "ez_mia", "informia_tokens"]
  assert "skipped em_mia: the folder has no pair_lp.npy" in capsys.readouterr().out


def test_an_incomplete_or_changed_features_folder_is_refused_before_any_report(tmp_path):
  make_features(tmp_path)
  os.remove(tmp_path / "pair_lp.npy")  # features.json lists it: the folder changed after its extraction
  with pytest.raises(InputError, match=r"features\.json lists pair_lp\.npy, which .* lacks.*re-run "
                                       r"experiments\.extract_features"):
    report_run(tmp_path)
  # An interrupted extract_features --pairs: build.json, the first arrays, chunks in pairs/, no features.json.
  os.remove(tmp_path / "features.json")
  (tmp_path / "build.json").write_text("{}")
  os.makedirs(tmp_path / "pairs")
  np.save(tmp_path / "pairs" / "rows_000000_000032.npy", np.zeros((1, 1, 1), np.float32))
  with pytest.raises(InputError, match=r"is incomplete: it has no features\.json.*interrupted \(1 chunk\(s\) of "
                                       r"EM-MIA's pairs.*re-run the same extract_features command"):
    report_run(tmp_path)
  assert not [n for n in os.listdir(tmp_path) if n.startswith(("results", "roc"))]
  with pytest.raises(MissingFileError, match="is not a features folder"):
    feature_folder.load_features(str(tmp_path / "pairs"))


@pytest.mark.parametrize("name, bad, file", [
    ("mu", lambda a: a["mu"][:, :-1], "mu.npy"),
    ("cond_lp_shots", lambda a: a["cond_lp_shots"][:, :-1], "cond_lp_shots.npy"),
    ("cond_lp_shots", lambda a: a["cond_lp_shots"][..., :-1], "cond_lp_shots.npy"),
    ("pair_lp", lambda a: a["pair_lp"][:-1], "pair_lp.npy"),
    ("labels", lambda a: a["labels"][:-1], "labels.npy"),
    ("texts", lambda a: ["only one"], "texts.json"),
    ("neighbour_lp", lambda a: a["neighbour_lp"][:, :1], "neighbour_lp.npy"),
])
def test_shape_mismatch_is_refused_before_any_work(tmp_path, name, bad, file):
  from attacks import report
  arrays, _ = make_features(tmp_path)
  if name == "texts":
    feature_folder.write_json(tmp_path, "texts", bad(arrays))
  else:
    feature_folder.write_array(tmp_path, name, bad(arrays))
  with pytest.raises(InputError, match=file.replace(".", r"\.")):
    report.run_attacks(str(tmp_path), n_boot=0)
  assert not (tmp_path / "results_nboot-0.json").exists()


def test_all_nan_row_names_the_file(tmp_path):
  from attacks import report
  arrays, _ = make_features(tmp_path)
  ref = arrays["ref_lp"].copy()
  ref[4] = np.nan
  feature_folder.write_array(tmp_path, "ref_lp", ref)
  with pytest.raises(InputError, match=r"ref_lp\.npy: row 4 has no scored position"):
    report.run_attacks(str(tmp_path), ["loss", "reference"], n_boot=0)


@pytest.mark.parametrize("k", ["0", "-0.1", "1.5"])
def test_k_out_of_range(tmp_path, pretrain_cli, k):
  make_features(tmp_path)
  # the flag's range check, before any work (the command line shows it as `error: --k=...: must be in (0, 1]`)
  with pytest.raises(flags.IllegalFlagValueError, match=r"--k=\S+: must be in \(0, 1\]"):
    run_cli(pretrain_cli, f"--features={tmp_path}", f"--k={k}")
  assert not any(f.startswith("results") for f in os.listdir(tmp_path))


def test_unknown_labels_refused(tmp_path, pretrain_cli):
  arrays, _ = make_features(tmp_path)
  labels = arrays["labels"].copy()
  labels[[2, 5]] = -1
  feature_folder.write_array(tmp_path, "labels", labels)
  with pytest.raises(InputError, match=r"labels\.npy: 2 text\(s\) have label -1"):
    run_cli(pretrain_cli, f"--features={tmp_path}", "--attacks=loss")
  labels[[2, 5]] = 3
  feature_folder.write_array(tmp_path, "labels", labels)
  with pytest.raises(InputError, match=r"labels\.npy: text 2 has label 3"):
    report_run(tmp_path)


def report_run(folder):
  from attacks import report
  return report.run_attacks(str(folder), ["loss"], n_boot=0)


def test_writer_helpers_and_reader(tmp_path):
  arrays, texts = make_features(tmp_path)
  meta = json.loads((tmp_path / "features.json").read_text())
  assert meta["schema"] == feature_folder.SCHEMA and meta["arrays"]["pair_lp"] == [N, N, T]
  features = feature_folder.load_features(str(tmp_path))
  assert (features.N, features.T) == (N, T) and features["texts"] == texts
  np.testing.assert_array_equal(features.arrays_for(ATTACKS.attacks["min_k_pp"])["sigma"], arrays["sigma"])
  with pytest.raises(InputError, match="unknown features array"):
    feature_folder.write_array(tmp_path, "lp_typo", arrays["lp"])
  with pytest.raises(MissingFileError, match="does not exist"):
    feature_folder.load_features(str(tmp_path / "nope"))


def test_a_shadow_run_folder_given_as_features_is_named_as_such(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path), num_models=4, num_canaries=6, seq_len=3)
  with pytest.raises(InputError, match=r"is a shadow run folder \(losses.npy, keep.npy\), not a features folder: "
                                       r"score its canaries with python -m experiments.evaluate"):
    feature_folder.check_complete(str(tmp_path))
