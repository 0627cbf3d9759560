"""The server's side of the link: its key (pinned by every agent) and its address.

The key is made once into `<data-dir>/agent_link_ed25519_key` and kept: every
agent enrolled with this server expects it, so replacing it means enrolling
every host again. Servers sharing a database must share this file.
"""

from __future__ import annotations

import asyncssh

from gpudock.errors import Conflict
from gpudock.link import keys
from gpudock.settings import Settings

LINK_KEY_FILE = "agent_link_ed25519_key"
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 (names, not a bind)


def server_link_key(settings: Settings) -> asyncssh.SSHKey:
    return keys.ensure_private_key(settings.data_dir / LINK_KEY_FILE, "gpudock-agent-link")


def server_fingerprint(settings: Settings) -> str:
    return keys.fingerprint(server_link_key(settings))


def link_url(settings: Settings) -> str:
    """Where agents dial: `ssh://HOST:PORT`, as printed in join commands."""
    if settings.agent_link_port is None:
        raise Conflict(
            "this server takes no agents: start it with GPUDOCK_AGENT_LINK_PORT (e.g. 7443) "
            "and GPUDOCK_AGENT_LINK_HOST set to an address the hosts can reach"
        )
    if settings.agent_link_public_address:
        return f"ssh://{settings.agent_link_public_address}"
    if settings.agent_link_host in _WILDCARDS:
        raise Conflict(
            f"the agent link listens on {settings.agent_link_host!r}, which agents cannot dial: "
            "set GPUDOCK_AGENT_LINK_PUBLIC_ADDRESS to HOST:PORT of this server as hosts reach it"
        )
    return f"ssh://{settings.agent_link_host}:{settings.agent_link_port}"
