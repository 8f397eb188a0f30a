"""Sequence-aware LiRA: statistics, leave-one-out evaluation and covariance analysis (Rossi et al. 2025)."""

from lira.covariance import VAR_FLOOR, mle_covariance, oas
from lira.loo import COVARIANCES, leave_one_out
from lira.targets import score_targets
from lira.transforms import LOSS_FLOOR, logit_scale, parse_reduction, reduce_length, to_statistic
from lira.metrics import auc, summarize, tpr_at_fpr
