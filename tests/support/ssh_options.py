"""OpenSSH client options for tests: no config, no known_hosts, keys only, no prompts."""

from __future__ import annotations

SSH_OPTIONS = [
    "-F",
    "/dev/null",
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "BatchMode=yes",
    "-o",
    "LogLevel=ERROR",
]
