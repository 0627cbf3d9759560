"""Real hosts and their agents: enrollment, the operator's actions, what the link records."""
