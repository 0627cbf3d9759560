"""gpudock.doctor (placeholder until its issue lands)."""
