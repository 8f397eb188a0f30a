"""Every command's flags take their defaults from the one place the library keeps them (no copy can drift)."""

import json
import os
import subprocess
import sys

import pytest

from lira import metrics
from lira import scoring

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def flag_defaults(module):
  """{flag: default} of the flags `python -m experiments.<module>` defines (imported in a fresh process)."""
  code = ("import json\nfrom absl import flags\nimport experiments.%s\n"
          "print(json.dumps({name: flags.FLAGS[name].default for name in flags.FLAGS}, default=str))") % module
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


SCORING_COMMANDS = {
    "evaluate": ("reduction", "statistic", "offline", "offline_shift", "fix_variance", "balance_counts", "backend",
                 "precision"),
    "score_targets": ("reduction", "statistic", "offline", "offline_shift", "fix_variance"),
    "length_grid": ("shared", "statistic", "balance_counts", "backend", "precision"),
    "shadow_sweep": ("reduction", "statistic", "balance_counts", "backend", "precision"),
}


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(SCORING_COMMANDS))
def test_scoring_flags_are_the_scoring_defaults(module):
  got = flag_defaults(module)
  want = scoring.defaults()
  for name in SCORING_COMMANDS[module]:
    assert got[name] == want[name], (module, name)
  for name in ("n_boot",):
    if name in got:
      assert got[name] == metrics.N_BOOT


@pytest.mark.slow
def test_report_option_flags_are_their_reports_defaults():
  from attacks import report as attack_report
  from attacks.catalogue import ATTACKS
  from lira.reports import (compare_runs_report, cov_structure_report, false_positives_report, image_report,
                            membership_structure_report, paper_table_report)
  for module, defaults in (("image_maps", image_report.ImageMapsOptions.defaults()),
                           ("cov_structure", cov_structure_report.CovStructureOptions.defaults()),
                           ("membership_structure", membership_structure_report.MembershipStructureOptions.defaults()),
                           ("paper_table", paper_table_report.PaperTableOptions.defaults()),
                           ("false_positives", false_positives_report.FalsePositivesOptions.defaults()),
                           ("compare_runs", compare_runs_report.CompareRunsOptions.defaults()),
                           ("pretrain_attacks", attack_report.DEFAULTS)):
    got = flag_defaults(module)
    if module != "pretrain_attacks":  # an options class: every field is a flag
      assert set(defaults) <= set(got), (module, set(defaults) - set(got))
    for name, value in defaults.items():
      if name in got:  # a list flag's default holds strings: "2,3,4" is (2, 3, 4), "1,1.25" is (1.0, 1.25)
        flag = tuple(type(value[0])(v) for v in got[name]) if isinstance(value, tuple) else got[name]
        assert flag == value, (module, name)
  for module, where in (("evaluate", "leave_one_out"), ("score_targets", "targets"), ("pretrain_attacks", "texts")):
    got = flag_defaults(module)
    for setting in ATTACKS.settings_for(where):  # every attack setting a command has is the registry's default
      flag = got[setting.name]
      assert (tuple(int(v) for v in flag) if setting.kind == "ints" else flag) == setting.default, (module, setting)
