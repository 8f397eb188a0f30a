"""Sequence-aware LiRA: statistics, leave-one-out evaluation and covariance analysis (Rossi et al. 2025).

`Scoring` holds every scoring option, with the commands' defaults; `leave_one_out`, `score_targets` and
`evaluate_variants` take one (or its fields as keywords). Reports, tables, plots and run-folder files live in
lira.reports, which these statistics never import.
"""

from lira.covariance import VAR_FLOOR, mle_covariance, oas
from lira.evaluation import evaluate_variants
from lira.loo import leave_one_out, leave_one_out_variants
from lira.metrics import auc, resolved_tpr, summarize, tpr_at_fpr
from lira.scoring import COVARIANCES, VARIANTS, Scoring
from lira.targets import score_targets
from lira.transforms import LOSS_FLOOR, logit_scale, parse_reduction, reduce_length, to_statistic
