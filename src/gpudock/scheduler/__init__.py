"""Placement: pure functions over a capacity snapshot (no I/O)."""
