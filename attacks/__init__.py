"""attacks package (see README)."""
