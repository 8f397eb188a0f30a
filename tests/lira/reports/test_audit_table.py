"""The audit table's "TPR at FPR" column: '-' wherever no threshold gives a bound above 0, for every method (the
rates at a bound of 0, e.g. guessing every score a member, say nothing), the rates where one does."""

import numpy as np
import pytest

from lira import dp_audit
from lira.reports import audit_report


@pytest.mark.parametrize("method", dp_audit.METHODS)
def test_rates_only_where_the_bound_is_above_zero(method):
  rng = np.random.default_rng(0)
  keep_MxN = rng.random((4, 60)) < 0.5
  null_MxN = rng.normal(size=(4, 60))  # scores unrelated to membership: no bound above 0
  strong_MxN = np.where(keep_MxN, 8.0, -8.0) + rng.normal(size=(4, 60))
  options = dp_audit.AuditOptions(method=method)
  rows = [audit_report.audit_row(name, s, keep_MxN, options) for name, s in (("null", null_MxN),
                                                                             ("strong", strong_MxN))]
  assert rows[0]["pooled"].epsilon == 0 and rows[1]["pooled"].epsilon > 0
  _, body = audit_report._cells(rows, method)
  assert body[0][2] == "-"
  p = rows[1]["pooled"]
  assert body[1][2] == f"{100 * p.tpr:.2f}% at {100 * p.fpr:.2f}%"
