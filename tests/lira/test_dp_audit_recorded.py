"""lira.dp_audit's bounds against those recorded before it moved to jax-privacy's public API, and against the public
auditor on the same score sets (the threshold it reports included); no private jax-privacy name is used."""

import numpy as np
import pytest
import scipy.stats
from jax_privacy import auditing

from lira import dp_audit
from test_dp_audit import GDP_TOL, gaussian_scores, gdp_epsilon, held_out_half


# Bounds recorded before lira.dp_audit moved to jax-privacy's public API. The score sets are fixed and seeded: ties
# (integer and rounded scores), 1 to 5000 scores per class, unequal classes, no signal and a strong one; each under
# two (delta, confidence) settings and every method and threshold strategy the module supports (split at two seeds).
def recorded_score_sets():
  sets = {"single": ([1.0], [0.0]), "tiny": ([3.0, 1.0, 2.0, 2.0], [0.0, 1.0, 2.0])}
  rng = np.random.default_rng(11)
  sets["ties"] = (rng.integers(0, 6, 40).astype(float) + 1.0, rng.integers(0, 6, 40).astype(float))
  rng = np.random.default_rng(12)
  sets["rounded"] = (np.round(rng.normal(1.0, 1.0, 300), 1), np.round(rng.normal(0.0, 1.0, 300), 1))
  rng = np.random.default_rng(13)
  sets["unequal"] = (rng.normal(1.5, 1.0, 200), rng.normal(0.0, 1.0, 50))
  rng = np.random.default_rng(14)
  sets["no_signal"] = (rng.normal(0.0, 1.0, 100), rng.normal(0.0, 1.0, 100))
  rng = np.random.default_rng(15)
  sets["strong"] = (rng.normal(3.0, 1.0, 1000), rng.normal(0.0, 1.0, 1000))
  rng = np.random.default_rng(16)
  sets["large"] = (np.round(rng.normal(0.5, 1.0, 5000), 2), np.round(rng.normal(0.0, 1.0, 5000), 2))
  return {name: (np.array(i, dtype=np.float64), np.array(o, dtype=np.float64)) for name, (i, o) in sets.items()}


RECORDED_CASES = [("one_run", "bonferroni", 0), ("one_run", "split", 0), ("one_run", "split", 5),
                  ("clopper_pearson", "bonferroni", 0), ("clopper_pearson", "split", 0),
                  ("clopper_pearson", "split", 5), ("gdp", "bonferroni", 0)]
RECORDED_SETTINGS = [(1e-5, 0.95), (1e-3, 0.9)]


def recorded_runs():
  """(set name, method, strategy, seed, delta, confidence) of every recorded bound ("single" has one score per class:
  bonferroni only, and a delta at which gdp finds no threshold)."""
  for name in recorded_score_sets():
    if name == "single":
      for method in ("one_run", "clopper_pearson", "gdp"):
        yield name, method, "bonferroni", 0, 0.1, 0.95
      continue
    for delta, confidence in RECORDED_SETTINGS:
      for method, strategy, seed in RECORDED_CASES:
        yield name, method, strategy, seed, delta, confidence


RECORDED_FIELDS = ("epsilon", "threshold", "tp", "fp", "tpr", "fpr", "bound_in", "bound_out", "n_thresholds", "mu")
# Recorded from lira.dp_audit on jax-privacy 2.0.0 when it called the auditor's PRIVATE methods
# (_audit_with_threshold_strategy with _epsilon_one_run_all_thresholds / _epsilon_clopper_pearson_all_thresholds, and
# _thresholds, _fn_counts, _tn_counts, _clopper_pearson_upper for gdp), git HEAD 920be95, numpy 2.4.6, scipy 1.17.1;
# floats as repr (round-trip exact).
RECORDED = {  # (set, method, strategy, seed, delta, confidence): RECORDED_FIELDS
    ('single', 'one_run', 'bonferroni', 0, 0.1, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 1, 1, 3, None),
    ('single', 'clopper_pearson', 'bonferroni', 0, 0.1, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 1, 1, 3, None),
    ('single', 'gdp', 'bonferroni', 0, 0.1, 0.95):
        (0.0, np.nan, 0, 0, 0.0, 0.0, 1, 1, 3, 0.0),
    ('tiny', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 4, 3, 5, None),
    ('tiny', 'one_run', 'split', 0, 1e-05, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 2, 2, 5, None),
    ('tiny', 'one_run', 'split', 5, 1e-05, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 2, 2, 5, None),
    ('tiny', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, 1.0, 4, 2, 1.0, 0.6666666666666666, 4, 3, 5, None),
    ('tiny', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (0.0, 2.0, 1, 0, 0.5, 0.0, 2, 2, 5, None),
    ('tiny', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (0.0, 1.0, 2, 1, 1.0, 0.5, 2, 2, 5, None),
    ('tiny', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, 2.0, 3, 1, 0.75, 0.3333333333333333, 4, 3, 5, 0.0),
    ('tiny', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 4, 3, 5, None),
    ('tiny', 'one_run', 'split', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 2, 2, 5, None),
    ('tiny', 'one_run', 'split', 5, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 2, 2, 5, None),
    ('tiny', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (0.0, 1.0, 4, 2, 1.0, 0.6666666666666666, 4, 3, 5, None),
    ('tiny', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (0.0, 2.0, 1, 0, 0.5, 0.0, 2, 2, 5, None),
    ('tiny', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (0.0, 1.0, 2, 1, 1.0, 0.5, 2, 2, 5, None),
    ('tiny', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (0.0, 2.0, 3, 1, 0.75, 0.3333333333333333, 4, 3, 5, 0.0),
    ('ties', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (0.24200227703133517, 6.0, 8, 0, 0.2, 0.0, 40, 40, 5, None),
    ('ties', 'one_run', 'split', 0, 1e-05, 0.95):
        (0.0, 6.0, 1, 0, 0.05, 0.0, 20, 20, 5, None),
    ('ties', 'one_run', 'split', 5, 1e-05, 0.95):
        (0.0, 6.0, 2, 0, 0.1, 0.0, 20, 20, 5, None),
    ('ties', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, 1.0, 40, 34, 1.0, 0.85, 40, 40, 5, None),
    ('ties', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (0.0, 6.0, 1, 0, 0.05, 0.0, 20, 20, 5, None),
    ('ties', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (0.0, 1.0, 20, 18, 1.0, 0.9, 20, 20, 5, None),
    ('ties', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, 6.0, 8, 0, 0.2, 0.0, 40, 40, 5, 0.0),
    ('ties', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 40, 40, 5, None),
    ('ties', 'one_run', 'split', 0, 0.001, 0.9):
        (0.0, 6.0, 1, 0, 0.05, 0.0, 20, 20, 5, None),
    ('ties', 'one_run', 'split', 5, 0.001, 0.9):
        (0.0, 6.0, 2, 0, 0.1, 0.0, 20, 20, 5, None),
    ('ties', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (0.0, 1.0, 40, 34, 1.0, 0.85, 40, 40, 5, None),
    ('ties', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (0.0, 6.0, 1, 0, 0.05, 0.0, 20, 20, 5, None),
    ('ties', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (0.0, 6.0, 2, 0, 0.1, 0.0, 20, 20, 5, None),
    ('ties', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (0.0, 6.0, 8, 0, 0.2, 0.0, 40, 40, 5, 0.0),
    ('rounded', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (1.103567540368874, 1.7, 82, 12, 0.2733333333333333, 0.04, 300, 300, 14, None),
    ('rounded', 'one_run', 'split', 0, 1e-05, 0.95):
        (1.3673194705169498, 1.7, 44, 5, 0.29333333333333333, 0.03333333333333333, 150, 150, 14, None),
    ('rounded', 'one_run', 'split', 5, 1e-05, 0.95):
        (1.184926360826508, 1.7, 46, 7, 0.30666666666666664, 0.04666666666666667, 150, 150, 14, None),
    ('rounded', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (0.8684076350811536, 1.7, 82, 12, 0.2733333333333333, 0.04, 300, 300, 14, None),
    ('rounded', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (1.070525727704528, 1.7, 44, 5, 0.29333333333333333, 0.03333333333333333, 150, 150, 14, None),
    ('rounded', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (0.9144864613557, 1.7, 46, 7, 0.30666666666666664, 0.04666666666666667, 150, 150, 14, None),
    ('rounded', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (2.897520661594998, 0.7, 204, 74, 0.68, 0.24666666666666667, 300, 300, 14, 0.6974104522372275),
    ('rounded', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 300, 300, 14, None),
    ('rounded', 'one_run', 'split', 0, 0.001, 0.9):
        (1.3148273252845863, 1.7, 44, 5, 0.29333333333333333, 0.03333333333333333, 150, 150, 14, None),
    ('rounded', 'one_run', 'split', 5, 0.001, 0.9):
        (1.15602063378417, 1.7, 46, 7, 0.30666666666666664, 0.04666666666666667, 150, 150, 14, None),
    ('rounded', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (0.9351979271249102, 1.7, 82, 12, 0.2733333333333333, 0.04, 300, 300, 14, None),
    ('rounded', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (1.2126715675583009, 1.7, 44, 5, 0.29333333333333333, 0.03333333333333333, 150, 150, 14, None),
    ('rounded', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (1.0432346759322417, 1.7, 46, 7, 0.30666666666666664, 0.04666666666666667, 150, 150, 14, None),
    ('rounded', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (2.138554033990139, 0.7, 204, 74, 0.68, 0.24666666666666667, 300, 300, 14, 0.7311882058509818),
    ('unequal', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (2.4322943205182326, 2.035475983047878, 68, 0, 0.34, 0.0, 200, 50, 13, None),
    ('unequal', 'one_run', 'split', 0, 1e-05, 0.95):
        (2.2142979681862114, 2.0680313489899387, 29, 0, 0.29, 0.0, 100, 25, 13, None),
    ('unequal', 'one_run', 'split', 5, 1e-05, 0.95):
        (1.9512597898603414, 1.132862502761012, 67, 4, 0.67, 0.16, 100, 25, 13, None),
    ('unequal', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (0.8657507699542348, 1.1322862759800036, 140, 4, 0.7, 0.08, 200, 50, 13, None),
    ('unequal', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (0.7998305336265236, 1.1322862759800036, 68, 2, 0.68, 0.08, 100, 25, 13, None),
    ('unequal', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (0.4551565536783281, 1.132862502761012, 67, 4, 0.67, 0.16, 100, 25, 13, None),
    ('unequal', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (3.9691998746075257, 1.1322862759800036, 140, 4, 0.7, 0.08, 200, 50, 13, 0.918742677752145),
    ('unequal', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.6075876816922822, 0.16106104138135646, 183, 21, 0.915, 0.42, 200, 50, 13, None),
    ('unequal', 'one_run', 'split', 0, 0.001, 0.9):
        (1.9750750538308168, 1.5977793108443563, 45, 2, 0.45, 0.08, 100, 25, 13, None),
    ('unequal', 'one_run', 'split', 5, 0.001, 0.9):
        (2.0171532523412496, 1.132862502761012, 67, 4, 0.67, 0.16, 100, 25, 13, None),
    ('unequal', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (0.9387875758310965, 1.1322862759800036, 140, 4, 0.7, 0.08, 200, 50, 13, None),
    ('unequal', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (0.45500905059778507, 1.5977793108443563, 45, 2, 0.45, 0.08, 100, 25, 13, None),
    ('unequal', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (0.5712178517789759, 1.132862502761012, 67, 4, 0.67, 0.16, 100, 25, 13, None),
    ('unequal', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (3.088982130204548, 1.1322862759800036, 140, 4, 0.7, 0.08, 200, 50, 13, 0.9871766348738023),
    ('no_signal', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 100, 100, 5, None),
    ('no_signal', 'one_run', 'split', 0, 1e-05, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 50, 50, 5, None),
    ('no_signal', 'one_run', 'split', 5, 1e-05, 0.95):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 50, 50, 5, None),
    ('no_signal', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, -2.924970571840865, 100, 100, 1.0, 1.0, 100, 100, 5, None),
    ('no_signal', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (0.0, -2.1266836963811473, 49, 50, 0.98, 1.0, 50, 50, 5, None),
    ('no_signal', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (0.0, -2.924970571840865, 50, 50, 1.0, 1.0, 50, 50, 5, None),
    ('no_signal', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (0.0, 0.32315448516353407, 39, 36, 0.39, 0.36, 100, 100, 5, 0.0),
    ('no_signal', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 100, 100, 5, None),
    ('no_signal', 'one_run', 'split', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 50, 50, 5, None),
    ('no_signal', 'one_run', 'split', 5, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 50, 50, 5, None),
    ('no_signal', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (0.0, -2.924970571840865, 100, 100, 1.0, 1.0, 100, 100, 5, None),
    ('no_signal', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (0.0, -2.1266836963811473, 49, 50, 0.98, 1.0, 50, 50, 5, None),
    ('no_signal', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (0.0, -2.924970571840865, 50, 50, 1.0, 1.0, 50, 50, 5, None),
    ('no_signal', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (0.0, 0.32315448516353407, 39, 36, 0.39, 0.36, 100, 100, 5, 0.0),
    ('strong', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (3.787719557894663, 2.991728170424252, 518, 1, 0.518, 0.001, 1000, 1000, 19, None),
    ('strong', 'one_run', 'split', 0, 1e-05, 0.95):
        (4.2440404056582555, 3.1653352192581554, 216, 0, 0.432, 0.0, 500, 500, 19, None),
    ('strong', 'one_run', 'split', 5, 1e-05, 0.95):
        (4.215659087816761, 3.160671412701643, 210, 0, 0.42, 0.0, 500, 500, 19, None),
    ('strong', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (4.121341077037692, 3.160671412701643, 455, 0, 0.455, 0.0, 1000, 1000, 19, None),
    ('strong', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (3.9664412041858803, 3.1653352192581554, 216, 0, 0.432, 0.0, 500, 500, 19, None),
    ('strong', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (3.9356381314309736, 3.160671412701643, 210, 0, 0.42, 0.0, 500, 500, 19, None),
    ('strong', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (15.088775391339986, 1.0446814495070282, 986, 152, 0.986, 0.152, 1000, 1000, 19, 2.7758805723275652),
    ('strong', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 1000, 1000, 19, None),
    ('strong', 'one_run', 'split', 0, 0.001, 0.9):
        (3.123766537966548, 2.544954579257637, 346, 1, 0.692, 0.002, 500, 500, 19, None),
    ('strong', 'one_run', 'split', 5, 0.001, 0.9):
        (2.8680290057695683, 2.5366462178584346, 334, 5, 0.668, 0.01, 500, 500, 19, None),
    ('strong', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (4.237164450809831, 3.160671412701643, 455, 0, 0.455, 0.0, 1000, 1000, 19, None),
    ('strong', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (4.188838342972603, 3.1653352192581554, 216, 0, 0.432, 0.0, 500, 500, 19, None),
    ('strong', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (4.158385790852381, 3.160671412701643, 210, 0, 0.42, 0.0, 500, 500, 19, None),
    ('strong', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (11.935198582108065, 1.0446814495070282, 986, 152, 0.986, 0.152, 1000, 1000, 19, 2.8053862197196633),
    ('large', 'one_run', 'bonferroni', 0, 1e-05, 0.95):
        (0.5604183333606344, 1.27, 1099, 505, 0.2198, 0.101, 5000, 5000, 28, None),
    ('large', 'one_run', 'split', 0, 1e-05, 0.95):
        (0.743868846188865, 2.46, 56, 16, 0.0224, 0.0064, 2500, 2500, 28, None),
    ('large', 'one_run', 'split', 5, 1e-05, 0.95):
        (0.7370482412303172, 1.65, 304, 121, 0.1216, 0.0484, 2500, 2500, 28, None),
    ('large', 'clopper_pearson', 'bonferroni', 0, 1e-05, 0.95):
        (0.6470070298466428, 1.65, 609, 232, 0.1218, 0.0464, 5000, 5000, 28, None),
    ('large', 'clopper_pearson', 'split', 0, 1e-05, 0.95):
        (0.6418588525947104, 1.95, 177, 63, 0.0708, 0.0252, 2500, 2500, 28, None),
    ('large', 'clopper_pearson', 'split', 5, 1e-05, 0.95):
        (0.6388304599220107, 1.65, 304, 121, 0.1216, 0.0484, 2500, 2500, 28, None),
    ('large', 'gdp', 'bonferroni', 0, 1e-05, 0.95):
        (1.571826200413955, 0.63, 2249, 1296, 0.4498, 0.2592, 5000, 5000, 28, 0.40390647901473453),
    ('large', 'one_run', 'bonferroni', 0, 0.001, 0.9):
        (0.0, np.inf, 0, 0, 0.0, 0.0, 5000, 5000, 28, None),
    ('large', 'one_run', 'split', 0, 0.001, 0.9):
        (0.3917230235267084, 0.63, 1143, 664, 0.4572, 0.2656, 2500, 2500, 28, None),
    ('large', 'one_run', 'split', 5, 0.001, 0.9):
        (0.3456342292675596, 1.03, 735, 402, 0.294, 0.1608, 2500, 2500, 28, None),
    ('large', 'clopper_pearson', 'bonferroni', 0, 0.001, 0.9):
        (0.6587675226727314, 1.65, 609, 232, 0.1218, 0.0464, 5000, 5000, 28, None),
    ('large', 'clopper_pearson', 'split', 0, 0.001, 0.9):
        (0.6860206203120796, 1.95, 177, 63, 0.0708, 0.0252, 2500, 2500, 28, None),
    ('large', 'clopper_pearson', 'split', 5, 0.001, 0.9):
        (0.6738206576355754, 1.65, 304, 121, 0.1216, 0.0484, 2500, 2500, 28, None),
    ('large', 'gdp', 'bonferroni', 0, 0.001, 0.9):
        (1.071753603774568, 0.63, 2249, 1296, 0.4498, 0.2592, 5000, 5000, 28, 0.41163786168038313),
}


def same_run_values(bound, expected):
  """Bound's RECORDED_FIELDS against `expected`: counts, thresholds (scores, inf or nan) and rates exactly; epsilon
  and mu to 1e-12 relative. They are exactly equal where they were recorded (numpy 2.4.6, scipy 1.17.1); the 1e-12
  admits last-bit differences of scipy's beta and binomial quantiles in another scipy build, far below the auditor's
  own 1e-6 tolerance on epsilon."""
  got = dict(zip(RECORDED_FIELDS, (getattr(bound, f) for f in RECORDED_FIELDS)))
  expected = dict(zip(RECORDED_FIELDS, expected))
  for field in ("tp", "fp", "tpr", "fpr", "bound_in", "bound_out", "n_thresholds"):
    assert got[field] == expected[field], field
  assert got["threshold"] == expected["threshold"] or np.isnan(got["threshold"]) and np.isnan(expected["threshold"])
  assert got["epsilon"] == pytest.approx(expected["epsilon"], rel=1e-12, abs=0)
  assert (got["mu"] is None) == (expected["mu"] is None)
  if expected["mu"] is not None:
    assert got["mu"] == pytest.approx(expected["mu"], rel=1e-12, abs=0)


def test_every_recorded_run_is_checked():
  assert set(recorded_runs()) == set(RECORDED) and len(RECORDED) == 101


@pytest.mark.parametrize("name", list(recorded_score_sets()))
def test_bounds_equal_those_recorded_from_the_private_api(name):
  in_scores, out_scores = recorded_score_sets()[name]
  for run in recorded_runs():
    if run[0] == name:
      _, method, strategy, seed, delta, confidence = run
      bound = dp_audit.epsilon_bound(in_scores, out_scores, method=method, threshold_strategy=strategy, seed=seed,
                                     delta=delta, confidence=confidence)
      same_run_values(bound, RECORDED[run])


def public_method(auditor, method):
  return auditor.epsilon_one_run if method == "one_run" else auditor.epsilon_clopper_pearson


@pytest.mark.parametrize("name", list(recorded_score_sets()))
def test_recorded_bounds_are_the_public_auditors(name):
  # The same runs against jax-privacy's public API called here: the epsilon is the auditor's exactly, and the
  # auditor's Explicit strategy at the reported threshold, on the scores the bound was computed on and at the
  # significance the strategy gave it, returns the bound again (split: exactly, as Split's own second step;
  # bonferroni: one_run to the auditor's brentq tolerance, its search having started that root finding at the best
  # bound so far rather than at 0; clopper_pearson exactly).
  in_scores, out_scores = recorded_score_sets()[name]
  for run in recorded_runs():
    if run[0] != name:
      continue
    _, method, strategy, seed, delta, confidence = run
    significance = 1 - confidence
    bound = dp_audit.epsilon_bound(in_scores, out_scores, method=method, threshold_strategy=strategy, seed=seed,
                                   delta=delta, confidence=confidence)
    auditor = auditing.CanaryScoreAuditor(in_scores, out_scores)
    if method == "gdp":
      # The auditor's |mu| is at least the one-sided mu (equal where its largest |mu| is positive, not always so
      # here: "unequal" has a larger reverse |mu|), so its epsilon is at least ours; ours is mu's exact epsilon, mu
      # from brute-force counts at the threshold and scipy's beta quantiles at the Bonferroni level.
      assert auditor.epsilon_from_gdp(significance, delta) >= bound.epsilon - GDP_TOL, run
      if bound.mu > 0:
        assert bound.epsilon == pytest.approx(gdp_epsilon(bound.mu, delta), abs=1e-8), run
        tp, fp = np.sum(in_scores >= bound.threshold), np.sum(out_scores >= bound.threshold)
        alpha = significance / (2 * bound.n_thresholds)
        fpr_hi = scipy.stats.beta.ppf(1 - alpha, fp + 1, len(out_scores) - fp)
        fnr_hi = scipy.stats.beta.ppf(1 - alpha, len(in_scores) - tp + 1, tp)
        assert bound.mu == pytest.approx(scipy.stats.norm.isf(fpr_hi) - scipy.stats.norm.ppf(fnr_hi), rel=1e-9), run
      continue
    chosen = auditing.Bonferroni() if strategy == "bonferroni" else auditing.Split(seed=seed)
    assert bound.epsilon == public_method(auditor, method)(significance, delta, threshold_strategy=chosen), run
    if strategy == "bonferroni":
      used_in, used_out, at = in_scores, out_scores, significance / bound.n_thresholds
    else:
      rng = np.random.default_rng(seed)
      used_in, used_out, at = held_out_half(in_scores, rng), held_out_half(out_scores, rng), significance
    again = public_method(auditing.CanaryScoreAuditor(used_in, used_out), method)(
        at, delta, threshold_strategy=auditing.Explicit(bound.threshold))
    if method == "one_run" and strategy == "bonferroni":
      assert again == pytest.approx(bound.epsilon, abs=GDP_TOL), run
    else:
      assert again == bound.epsilon, run


def test_no_private_jax_privacy_name_is_used():
  # Public API only: no attribute or import of a _name anywhere in the module (dunders aside).
  import ast
  import inspect
  tree = ast.parse(inspect.getsource(dp_audit))
  private = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr.startswith("_")
             and not node.attr.startswith("__")]
  private += [alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
              if alias.name.startswith("_")]
  assert private == []


@pytest.mark.parametrize("strategy", ["bonferroni", "split"])
def test_a_threshold_search_unlike_the_auditors_is_an_error(monkeypatch, strategy):
  # If a jax-privacy release chose thresholds differently, the rebuilt search could name a threshold the bound was
  # not taken at: the auditor's public number must be reached (bonferroni) or recomputed (split) from it.
  public = auditing.CanaryScoreAuditor.epsilon_one_run

  def shifted(self, significance, delta, one_sided=True, *, threshold_strategy=auditing.Bonferroni()):
    epsilon = public(self, significance, delta, one_sided, threshold_strategy=threshold_strategy)
    return epsilon + 0.01 if not isinstance(threshold_strategy, auditing.Explicit) else epsilon

  in_scores, out_scores = gaussian_scores(1.0, 200, seed=4)
  dp_audit.epsilon_bound(in_scores, out_scores, threshold_strategy=strategy)
  monkeypatch.setattr(auditing.CanaryScoreAuditor, "epsilon_one_run", shifted)
  with pytest.raises(RuntimeError, match="cannot be named"):
    dp_audit.epsilon_bound(in_scores, out_scores, threshold_strategy=strategy)
