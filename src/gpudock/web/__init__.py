"""gpudock.web (placeholder until its issue lands)."""
