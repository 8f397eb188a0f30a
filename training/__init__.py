"""training package (see README)."""
