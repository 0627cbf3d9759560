"""gpudock.billing (placeholder until its issue lands)."""
