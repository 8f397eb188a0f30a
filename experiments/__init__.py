"""Thin command-line entry points: `python -m experiments.X`. Nothing imports this package."""
