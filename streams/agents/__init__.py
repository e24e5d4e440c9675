"""Faust agents: pattern statistics (canonicalize role) and probing (probe role)."""
