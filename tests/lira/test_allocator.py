"""lira.allocator: while scoring, large temporaries come from the heap and stay there; afterwards glibc's defaults."""

import ctypes
import ctypes.util

import numpy as np
import pytest

from lira import allocator


class _MallInfo2(ctypes.Structure):
  _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mapped_blocks():
  """glibc's count of blocks served by mmap (mallinfo2().hblks), or None without glibc 2.33+."""
  name = ctypes.util.find_library("c")
  try:
    libc = ctypes.CDLL(name)
    info = libc.mallinfo2
  except (OSError, AttributeError, TypeError):
    return None
  info.restype = _MallInfo2
  return lambda: info().hblks


def test_large_blocks_come_from_the_heap_while_scoring_and_are_mapped_again_after():
  count = _mapped_blocks()
  if count is None or allocator._LIBC is None:
    pytest.skip("needs glibc's mallopt and mallinfo2")
  size = 48 * 2**20 // 8  # 48 MiB of float64: above the largest mmap threshold (32 MiB)
  with allocator.reuse_freed_blocks():
    before = count()
    inside = np.ones(size)
    assert count() == before  # from the heap, not a fresh mapping
    del inside
  before = count()
  after = np.ones(size)
  assert count() == before + 1  # glibc's default again: a block this large is mapped
  del after
