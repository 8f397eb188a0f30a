"""The attack registry (attacks/registry.py, attacks/catalogue.py): lookups name only what a place can run, a
setting no chosen attack reads is refused, every record's leave-one-out scorer gives finite [M, N] scores on a
synthetic run, and labels carry the settings that act."""

import numpy as np
import pytest

from attacks import shadow
from attacks.catalogue import ATTACKS
from attacks.registry import Attack, Registry, Setting
from lira.errors import InputError
from lira.reports import synthetic_run


def test_lookups_list_only_the_attacks_of_that_place():
  loo, targets, texts = (ATTACKS.names(w) for w in ("leave_one_out", "targets", "texts"))
  assert set(targets) <= set(loo) and "wbc" in loo and "wbc" in texts and "blind" not in loo
  with pytest.raises(InputError, match=r"^--attacks: 'blind' is an attack that cannot score a shadow run's "
                                       r"leave-one-out pairs; choose from " + ", ".join(loo) + "$"):
    ATTACKS.chosen(["loss", "blind"], "leave_one_out")
  with pytest.raises(InputError, match=r"^--attacks: 'lost' is an unknown attack; choose from " + ", ".join(texts)):
    ATTACKS.chosen(["lost"], "texts")
  assert [a.name for a in ATTACKS.chosen(["rmia", "loss", "rmia"], "leave_one_out")] == ["rmia", "loss"]


def test_a_setting_no_chosen_attack_reads_is_refused():
  chosen = ATTACKS.chosen(["rmia", "loss"], "leave_one_out")
  with pytest.raises(InputError, match=r"--rmia_a acts on rmia_offline, rmia_tokens_offline only"):
    ATTACKS.checked_settings({"rmia_a": 0.5}, chosen, given=("rmia_a",))
  settings = ATTACKS.checked_settings({"rmia_gamma": 2}, chosen, given=("rmia_gamma",))
  assert settings["rmia_gamma"] == 2.0 and settings["wbc_windows"] == (2, 3, 4, 6, 9, 13)
  offline = ATTACKS.attacks["rmia_offline"]
  assert offline.params(settings) == {"rmia_gamma": 2.0, "rmia_a": 0.3}
  assert ATTACKS.attacks["rmia"].params(settings) == {"rmia_gamma": 2.0}  # online RMIA has no a
  assert ATTACKS.attacks["min_k"].label({"k": 0.25}) == "Min-K% (k=0.25)"
  with pytest.raises(InputError, match=r"wbc_windows must be >= 1, got 0"):
    ATTACKS.checked_settings({"wbc_windows": (2, 0)}, chosen)
  with pytest.raises(InputError, match=r"k must be a finite number"):
    ATTACKS.checked_settings({"k": float("inf")}, chosen)


def test_registering_twice_or_an_unregistered_setting_is_a_programming_error():
  a = Attack("a", "A", "red", leave_one_out=lambda run, s, on_undefined="raise": None)
  with pytest.raises(ValueError, match="registered twice"):
    Registry([a, a], [])
  with pytest.raises(ValueError, match="unregistered settings"):
    Registry([Attack("b", "B", "red", uses=("x",))], [])
  with pytest.raises(ValueError, match="setting 'x' of attack 'c' is registered twice"):
    Registry([Attack("c", "C", "red", new_settings=(Setting("x", 1.0, "x"),))], [Setting("x", 1.0, "x")])


def test_every_leave_one_out_attack_scores_a_synthetic_run(tmp_path):
  synthetic_run.write_synthetic_run(str(tmp_path), num_models=8, num_canaries=30, seq_len=5, seed=1,
                                    population_size=12)
  # a synthetic run has no texts, moments, top-1 correctness or base model: base_losses.npy and top1.npy of our own
  # stand in for the last two
  base_NxT = np.random.default_rng(0).exponential(1.0, size=(30, 5)).astype(np.float32)
  np.save(tmp_path / "base_losses.npy", base_NxT)
  np.save(tmp_path / "top1.npy", np.random.default_rng(1).random((8, 30, 5)) < 0.3)
  names = [n for n in ATTACKS.names("leave_one_out") if not {"texts", "moments"} & set(ATTACKS.attacks[n].needs)]
  chosen = shadow.choose(str(tmp_path), names)
  for attack in chosen.attacks:
    scores_MxN = attack.leave_one_out(chosen.run, chosen.settings)
    assert scores_MxN.shape == (8, 30) and np.isfinite(scores_MxN).all(), attack.name
    sub = attack.leave_one_out(chosen.run.subset(np.arange(6)), chosen.settings, on_undefined="nan")
    assert sub.shape == (6, 30), attack.name


def test_wbc_base_scores_every_model_against_the_base_losses(tmp_path):
  from attacks import wbc
  synthetic_run.write_synthetic_run(str(tmp_path), num_models=6, num_canaries=20, seq_len=7, seed=2, ragged=True)
  base_NxT = np.random.default_rng(1).exponential(1.0, size=(20, 7)).astype(np.float32)
  np.save(tmp_path / "base_losses.npy", base_NxT)
  chosen = shadow.choose(str(tmp_path), ["wbc_base"], {"wbc_windows": (2, 3)}, given=("wbc_windows",))
  scores_MxN = chosen.attacks[0].leave_one_out(chosen.run, chosen.settings)
  run = chosen.run
  ref_NxT = np.where(run.mask_NxT, -base_NxT.astype(np.float64), np.nan)
  for m in range(6):
    np.testing.assert_array_equal(scores_MxN[m], wbc.wbc(run.target_lp(m), ref_NxT, (2, 3)))
  target_KxNxT = np.asarray(run.loss_MxNxT)[:2]
  np.testing.assert_array_equal(chosen.attacks[0].targets(run, target_KxNxT, None, chosen.settings), scores_MxN[:2])
  np.save(tmp_path / "base_losses.npy", base_NxT[:, :5])
  with pytest.raises(InputError, match=r"base_losses.npy: shape \[20, 5\] does not match the canaries' \[N, T\]"):
    shadow.choose(str(tmp_path), ["wbc_base"])
