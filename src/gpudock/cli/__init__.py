"""The `gpudock` command line: talks to the server over its REST API only."""
