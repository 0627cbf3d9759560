"""Where users reach the SSH gateway: its host key, address and ssh commands.

The host key is generated once into `<data-dir>/ssh_host_ed25519_key` (0600,
with the public half beside it) and kept, so clients see one host key for the
life of the installation; the API hands the public half out, so that the CLI
can pin it instead of trusting on first use.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from gpudock.errors import NotFound
from gpudock.link.keys import ensure_private_key
from gpudock.settings import Settings

HOST_KEY_FILE = "ssh_host_ed25519_key"
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 (names, not a bind)


@dataclass(frozen=True)
class SshEndpoint:
    host: str
    port: int
    host_key: str  # "ssh-ed25519 AAAA…"
    host_key_fingerprint: str


def host_key_path(settings: Settings) -> Path:
    return settings.data_dir / HOST_KEY_FILE


def ensure_host_key(settings: Settings) -> Path:
    """Generate the gateway's host key unless it exists; return its path."""
    path = host_key_path(settings)
    ensure_private_key(path, comment="gpudock-gateway")
    return path


def host_public_key(settings: Settings) -> asyncssh.SSHKey:
    key = asyncssh.read_private_key(ensure_host_key(settings))
    return key.convert_to_public()


def advertised_host(settings: Settings) -> str:
    if settings.ssh_public_host:
        return settings.ssh_public_host
    if settings.ssh_host in _WILDCARDS:
        return socket.getfqdn()
    return settings.ssh_host


def endpoint(settings: Settings) -> SshEndpoint:
    if not settings.ssh_enabled:
        raise NotFound("this server runs no SSH gateway (GPUDOCK_SSH_ENABLED is false)")
    key = host_public_key(settings)
    return SshEndpoint(
        host=advertised_host(settings),
        port=settings.ssh_port,
        host_key=" ".join(key.export_public_key("openssh").decode().split()[:2]),
        host_key_fingerprint=key.get_fingerprint("sha256"),
    )


def ssh_command(settings: Settings, instance_id: str) -> str | None:
    """`ssh -p PORT <instance-id>@HOST`, or None when the gateway is off."""
    if not settings.ssh_enabled:
        return None
    port = "" if settings.ssh_port == 22 else f"-p {settings.ssh_port} "
    return f"ssh {port}{instance_id}@{advertised_host(settings)}"
