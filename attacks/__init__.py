"""Pretraining-data membership attacks on stored per-token arrays (no model needed); every score: higher = member."""

from attacks.em_mia import em_mia, prefix_scores, recall_matrix
from attacks.likelihood import loss, neighbourhood, reference, zlib
from attacks.min_k import SIGMA_FLOOR, min_k, min_k_pp
from attacks.recall import con_recall, recall, recall_ensemble, recall_shots
