"""docs/notebook.md's Python blocks run, in order, as a user pastes them into a notebook (in a temporary folder)."""

import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_block_of_the_notebook_page_runs(tmp_path, monkeypatch, capsys):
  with open(os.path.join(ROOT, "docs", "notebook.md")) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
  assert len(blocks) >= 6
  monkeypatch.chdir(tmp_path)
  namespace = {}
  for block in blocks:
    exec(compile(block, "docs/notebook.md", "exec"), namespace)  # noqa: S102 - the page's own code
  out = capsys.readouterr()
  assert "Univariate Class-Wise" in out.out and "OAS shared: TPR" in out.out and "vulnerable canaries" in out.out
  assert out.err == ""  # no progress bars from a library call
  # the numbers it prints are the library's: the table's row for OAS shared holds the TPR the page reads
  rows, oas = namespace["rows"], namespace["oas"]
  assert np.isclose(namespace["tpr"], oas["summary"]["tpr"]["0.01"]["tpr"]) and len(rows) == 6
  assert "WBC" in out.out and "Loss" in out.out
