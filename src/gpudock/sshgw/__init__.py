"""gpudock.sshgw (placeholder until its issue lands)."""
