"""The project's attacks, registered (attacks/registry.py): reference-free (Loss, Zlib, Min-K%, Min-K%++), RMIA in
its four forms, the pretraining-data attacks on a features folder, the blind baseline, WBC (attacks/wbc.py), EZ-MIA
(attacks/ez_mia.py) and InfoRMIA (attacks/informia.py).

Each record says how the attack scores a shadow run's leave-one-out pairs and/or a features folder's texts; the
commands (evaluate, audit, shadow_sweep, pretrain_attacks) and their reports iterate over ATTACKS.
"""

import numpy as np

import attacks as A
from attacks import blind
from attacks import ez_mia
from attacks import informia
from attacks import wbc
from attacks.min_k import DEFAULT_K
from attacks.registry import Attack, Registry, Setting
from attacks.registry import text_row as row
from lira import metrics
from lira import rmia

# Con-ReCall's sweep: the official grid (run.py of Wang et al. 2024's code), which has no 0.4.
GAMMAS = (0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
TUNED = "tuned on the evaluated set"

SETTINGS = (
    Setting("k", DEFAULT_K, "Min-K% and Min-K%++ (and EM-MIA's Min-K%++ start): the fraction of each sequence's "
            "lowest-probability tokens averaged.", 0, 1, low_open=True),
    Setting.of_field("rmia_gamma", rmia.RMIA.__dataclass_fields__["gamma"]),
    Setting.of_field("rmia_a", rmia.RMIA.__dataclass_fields__["a"]),
    Setting("gamma", None, "Con-ReCall's gamma, the weight of the member prefix's likelihood; without it the "
            "official grid 0.1, 0.2, 0.3, 0.5, 0.6, ..., 1.0 (no 0.4) is swept and the best is reported, labelled "
            "'tuned on the evaluated set'.", 0, 1),
    Setting("shots", None, "ReCaLL: non-member shots in the prefix (default all stored); recall_shots sweeps "
            "1 .. all.", 1, kind="int"),
    Setting("folds", blind.DEFAULT_FOLDS, "blind: stratified cross-validation folds; each text is scored by the text "
            "classifier fitted on the other folds.", 2, kind="int"),
)


def _best(candidates, labels_N):
  """(index, AUCs) of the candidate scores with the highest AUC on the evaluated texts (first on ties)."""
  aucs = [metrics.auc(s, labels_N) for s in candidates]
  return int(np.argmax(aucs)), aucs


# ---- reference-free: each target model's own arrays ----

def _per_target(score_fn):
  """A leave-one-out scorer from a per-model scorer score_fn(run, m, settings) -> [N]."""
  def leave_one_out(run, settings, on_undefined="raise"):
    del on_undefined  # a reference-free score is defined for every pair
    return np.stack([score_fn(run, m, settings) for m in range(run.num_models)])
  return leave_one_out


def _rows(run, settings):
  del settings
  run.check_rows()


def _texts_simple(name, fn):
  def texts(a, labels_N, s):
    return [row(name, ATTACKS.attacks[name].label(s), fn(a, s), ATTACKS.attacks[name].params(s))]
  return texts


REFERENCE_FREE_NOTE = ("{names}: reference-free, each target model scored from its own losses (and mu, sigma) alone, "
                       "no shadow models; pooled over the same (model, canary) pairs.")

LOSS = Attack("loss", "Loss", "tab:red", needs=(), note=REFERENCE_FREE_NOTE, check=_rows,
              leave_one_out=_per_target(lambda run, m, s: A.loss(run.target_lp(m))),
              features=("lp",), texts=_texts_simple("loss", lambda a, s: A.loss(a["lp"])))
ZLIB = Attack("zlib", "Zlib", "tab:purple", needs=("texts",), note=REFERENCE_FREE_NOTE, check=_rows,
              leave_one_out=_per_target(lambda run, m, s: A.zlib(run.target_lp(m), run.texts())),
              features=("lp", "texts"), texts=_texts_simple("zlib", lambda a, s: A.zlib(a["lp"], a["texts"])))
MIN_K = Attack("min_k", "Min-K%", "tab:brown", uses=("k",), note=REFERENCE_FREE_NOTE, check=_rows,
               leave_one_out=_per_target(lambda run, m, s: A.min_k(run.target_lp(m), s["k"])),
               features=("lp",), texts=_texts_simple("min_k", lambda a, s: A.min_k(a["lp"], s["k"])))
MIN_K_PP = Attack(
    "min_k_pp", "Min-K%++", "tab:pink", uses=("k",), needs=("moments",), note=REFERENCE_FREE_NOTE, check=_rows,
    leave_one_out=_per_target(lambda run, m, s: A.min_k_pp(run.target_lp(m), *run.moments(m), s["k"])),
    features=("lp", "mu", "sigma"),
    texts=_texts_simple("min_k_pp", lambda a, s: A.min_k_pp(a["lp"], a["mu"], a["sigma"], s["k"])))


# ---- RMIA: the other models as references, against the run's population ----

RMIA_NOTE = ("RMIA: model m the target, the other M - 1 its reference models (as LiRA), scored against the run's "
             "population (population_losses.npy); score = fraction of population samples z with LR(x) / LR(z) >= "
             "gamma.")


def _rmia(name, color):
  def options(run, s):
    return rmia.RMIA.named(name, run.scoring, gamma=s["rmia_gamma"], a=s["rmia_a"])

  def check(run, s):
    run.check_defined(rmia.undefined_canaries(run.keep_MxN, options(run, s)), options(run, s).name,
                      "it needs an IN and an OUT reference model besides each target (offline: an OUT one)")

  def leave_one_out(run, s, on_undefined="raise"):
    pop_MxZxT, pop_mask_ZxT = run.population()
    return rmia.leave_one_out(run.loss_MxNxT, run.keep_MxN, pop_MxZxT, options(run, s), mask_NxT=run.mask_NxT,
                              pop_mask_ZxT=pop_mask_ZxT, on_undefined=on_undefined, model_ids=run.model_ids)

  def targets(run, target_loss_KxNxT, target_pop_KxZxT, s):
    pop_MxZxT, pop_mask_ZxT = run.population()
    return rmia.score_targets(run.loss_MxNxT, run.keep_MxN, pop_MxZxT, target_loss_KxNxT, target_pop_KxZxT,
                              options(run, s), mask_NxT=run.mask_NxT, pop_mask_ZxT=pop_mask_ZxT)

  online, _ = rmia.ATTACKS[name]
  return Attack(name, "RMIA", color, uses=("rmia_gamma", "rmia_a"), line="--", needs=("population",),
                leave_one_out=leave_one_out, check=check, note=RMIA_NOTE, targets=targets,
                uses_when=(lambda s: ("rmia_gamma",)) if online else None,
                label_of=lambda s: rmia.RMIA.named(name, gamma=s["rmia_gamma"], a=s["rmia_a"]).name)


# ---- pretraining-data attacks on a features folder ----

def _recall(a, labels_N, s):
  S = a["cond_lp_shots"].shape[0]
  n = s["shots"] or S
  return [row("recall", f"ReCaLL ({n} shot{'s' * (n > 1)})", A.recall(a["lp"], a["cond_lp_shots"][n - 1]),
              {"shots": n})]


def _recall_shots(a, labels_N, s):
  scores_SxN = A.recall_shots(a["lp"], a["cond_lp_shots"])
  S = len(scores_SxN)
  rows = [row("recall_shots", f"ReCaLL, {i + 1} shot{'s' * (i > 0)}", scores_SxN[i], {"shots": i + 1},
              plotted=S == 1) for i in range(S)]
  if S > 1:
    best, aucs = _best(scores_SxN, labels_N)
    rows.append(row("recall_shots", f"ReCaLL, best of 1..{S} shots ({best + 1}; {TUNED})", scores_SxN[best],
                    {"shots": best + 1, "auc_by_shots": {str(i + 1): v for i, v in enumerate(aucs)}}, tuned=True))
  return rows


def _con_recall(a, labels_N, s):
  nonmember, member = a["cond_lp_shots"][-1], a["cond_lp_member"]  # every non-member shot, as the member prefix
  S = int(a["cond_lp_shots"].shape[0])
  gamma = s["gamma"]
  if gamma is not None:
    return [row("con_recall", f"Con-ReCall (gamma={gamma:g})", A.con_recall(a["lp"], nonmember, member, gamma),
                {"gamma": gamma, "shots": S})]
  candidates = [A.con_recall(a["lp"], nonmember, member, g) for g in GAMMAS]
  best, aucs = _best(candidates, labels_N)
  return [row("con_recall", f"Con-ReCall (gamma={GAMMAS[best]:g}; {TUNED})", candidates[best],
              {"gamma": GAMMAS[best], "shots": S, "auc_by_gamma": dict(zip((f"{g:g}" for g in GAMMAS), aucs))},
              tuned=True)]


def _em_mia(a, labels_N, s):
  k = s["k"]
  init_N = A.min_k_pp(a["lp"], a["mu"], a["sigma"], k)
  membership_N, _ = A.em_mia(a["pair_lp"], a["lp"], init_N)
  return [row("em_mia", f"EM-MIA (init Min-K%++ k={k:g})", membership_N, {"init": "min_k_pp", "k": k,
                                                                        "iterations": 10})]


def _blind(a, labels_N, s):
  folds = s["folds"]
  scores_N, _ = blind.blind(a["texts"], labels_N, folds, s["seed"])
  return [row("blind", f"Blind (text n-grams, no model; {folds}-fold)", scores_N,
              {"folds": int(folds), "seed": int(s["seed"]), "features": "tf-idf of word 1-2-grams and char "
               "2-4-grams", "classifier": "logistic regression, out-of-fold decision function"})]


REFERENCE = Attack("reference", "Reference", "tab:gray", features=("lp", "ref_lp"),
                   texts=lambda a, labels_N, s: [row("reference", "Reference", A.reference(a["lp"], a["ref_lp"]))])
NEIGHBOURHOOD = Attack(
    "neighbourhood", "Neighbourhood", "tab:olive", features=("lp", "neighbour_lp"),
    texts=lambda a, labels_N, s: [row("neighbourhood", "Neighbourhood", A.neighbourhood(a["lp"], a["neighbour_lp"]),
                                      {"neighbours": int(a["neighbour_lp"].shape[1])})])
RECALL = Attack("recall", "ReCaLL", "tab:cyan", uses=("shots",), features=("lp", "cond_lp_shots"), texts=_recall)
RECALL_SHOTS = Attack("recall_shots", "ReCaLL", "darkcyan", features=("lp", "cond_lp_shots"), texts=_recall_shots)
RECALL_ENSEMBLE = Attack(
    "recall_ensemble", "ReCaLL ensemble", "navy", features=("lp", "cond_lp_ensemble"),
    texts=lambda a, labels_N, s: [row("recall_ensemble", f"ReCaLL ensemble ({a['cond_lp_ensemble'].shape[0]} "
                                      "prefixes)", A.recall_ensemble(a["lp"], a["cond_lp_ensemble"]),
                                      {"prefixes": int(a["cond_lp_ensemble"].shape[0])})])
CON_RECALL = Attack("con_recall", "Con-ReCall", "goldenrod", uses=("gamma",),
                    features=("lp", "cond_lp_shots", "cond_lp_member"), texts=_con_recall)
EM_MIA = Attack("em_mia", "EM-MIA", "black", uses=("k",), features=("lp", "pair_lp", "mu", "sigma"), texts=_em_mia)
# The blind baseline reads the texts (and labels) alone, never the model's lp; dotted, as it never sees a model.
BLIND = Attack("blind", "Blind", "magenta", uses=("folds",), line=":", features=("texts",), texts=_blind, baseline=True,
               check_texts=lambda a, labels_N, s: blind.check_inputs(a["texts"], labels_N, s["folds"]))

ATTACKS = Registry(
    [LOSS, ZLIB, MIN_K, MIN_K_PP, REFERENCE, NEIGHBOURHOOD, RECALL, RECALL_SHOTS, RECALL_ENSEMBLE, CON_RECALL,
     EM_MIA, BLIND,
     _rmia("rmia", "darkviolet"), _rmia("rmia_offline", "plum"), _rmia("rmia_tokens", "sienna"),
     _rmia("rmia_tokens_offline", "burlywood"),
     *wbc.ATTACKS, *ez_mia.ATTACKS, *informia.ATTACKS],
    SETTINGS)
