"""The server's end of the agent link: where the agents of other hosts dial in."""
