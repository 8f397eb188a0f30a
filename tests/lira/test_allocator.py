"""lira.allocator: while scoring, large temporaries come from the heap and stay there; afterwards glibc's defaults."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# mallinfo2().hblks counts the blocks glibc serves by mmap, in the whole process: measured in a fresh process, where
# no thread left by another test (XLA's pools, a cache writer) maps or unmaps a block meanwhile
_MEASURE = r"""
import ctypes, ctypes.util, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from lira import allocator

class MallInfo2(ctypes.Structure):
  _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
try:
  info = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
except (OSError, AttributeError, TypeError):
  print("skip"); sys.exit()
if allocator._LIBC is None:
  print("skip"); sys.exit()
info.restype = MallInfo2
size = 48 * 2**20 // 8  # 48 MiB of float64: above the largest mmap threshold (32 MiB)
with allocator.reuse_freed_blocks():
  before = info().hblks
  inside = np.ones(size)
  grew_inside = info().hblks - before
  del inside
before = info().hblks
after = np.ones(size)
print(grew_inside, info().hblks - before)
"""


def test_large_blocks_come_from_the_heap_while_scoring_and_are_mapped_again_after():
  out = subprocess.run([sys.executable, "-c", _MEASURE, ROOT], capture_output=True, text=True, check=True,
                       timeout=120).stdout.split()
  if out == ["skip"]:
    pytest.skip("needs glibc's mallopt and mallinfo2")
  grew_inside, grew_after = map(int, out)
  assert grew_inside == 0  # from the heap, not a fresh mapping
  assert grew_after == 1  # glibc's default again: a block this large is mapped
