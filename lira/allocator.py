"""Keep freed block temporaries in the process while leave-one-out runs (glibc's malloc; elsewhere nothing changes).

A block of canaries allocates float64 temporaries of a few to a few tens of MB. glibc maps such blocks afresh and
returns them to the system when freed (or trims the heap top back), so every block faults its pages in again: at
M = 484 that was about half of the scoring's CPU time, spent in the kernel (BENCHMARKS.md). While scoring, the mmap
threshold goes to its maximum (32 MiB on 64-bit), mmap is off for larger blocks too (the device pipeline's compiled
programs on a CPU take one arena of tens of MB per block: 55 MiB of pages faulted in per six-variant block at the
first 448 of 512 models, 6-12 MiB without) and the trim threshold is 1 GiB, so freed blocks are reused as they are;
afterwards mmap and the trim threshold go back to glibc's defaults and the heap is trimmed once.
"""

import contextlib
import ctypes
import ctypes.util
import threading

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_MMAP_MAX_DEFAULT = 65536
_MMAP_THRESHOLD = 32 * 2**20  # glibc's upper limit on 64-bit (HEAP_MAX_SIZE / 2)
_TRIM_WHILE_SCORING = 2**30
_TRIM_DEFAULT = 128 * 2**10
_lock = threading.Lock()
_active = 0


def _libc():
  name = ctypes.util.find_library("c")
  if name is None:
    return None
  try:
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
  except OSError:
    return None


_LIBC = _libc()


@contextlib.contextmanager
def reuse_freed_blocks():
  """While inside: freed temporaries stay in the process for the next block (nestable, thread-safe)."""
  global _active
  if _LIBC is None:
    yield
    return
  with _lock:
    if _active == 0:
      _LIBC.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
      _LIBC.mallopt(_M_TRIM_THRESHOLD, _TRIM_WHILE_SCORING)
      _LIBC.mallopt(_M_MMAP_MAX, 0)
    _active += 1
  try:
    yield
  finally:
    with _lock:
      _active -= 1
      if _active == 0:
        _LIBC.mallopt(_M_TRIM_THRESHOLD, _TRIM_DEFAULT)
        _LIBC.mallopt(_M_MMAP_MAX, _MMAP_MAX_DEFAULT)
        _LIBC.malloc_trim(0)
