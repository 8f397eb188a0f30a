"""models.gpt_neox imports no converter (checked in a fresh interpreter, a subprocess): Hugging Face I/O is one way,
models.hf_convert imports the model, and the model module offers no converter of its own."""

import os

import pytest

from models import gpt_neox
from models import hf_convert


@pytest.mark.slow
def test_hugging_face_io_is_one_way():
  """models.gpt_neox holds the model only: importing it loads no converter, and from_pretrained / save_pretrained are
  hf_convert's alone."""
  import subprocess
  import sys
  code = "import sys, models.gpt_neox; assert 'models.hf_convert' not in sys.modules, 'gpt_neox imports hf_convert'"
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert not hasattr(gpt_neox, "from_pretrained") and not hasattr(gpt_neox, "save_pretrained")
  assert callable(hf_convert.from_pretrained) and callable(hf_convert.save_pretrained)
