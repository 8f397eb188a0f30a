"""Test setup: the brute-force reference in tests/ is importable as `bruteforce`."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
