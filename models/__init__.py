"""models package (see README)."""
