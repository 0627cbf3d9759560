"""Tenant networks cannot open connections to the host itself.

Docker's isolation rules keep bridges apart (FORWARD), but a packet from a
container to any of the host's own addresses — the bridge's gateway, the
host's LAN address — is delivered locally (INPUT), so every service listening
on all interfaces was reachable from every instance. gpudock serves tenants
nothing over their network, so it drops new connections arriving on tenant
bridges; replies to connections the host opened stay allowed.

Tenant bridges are named `gdt<12 hex>`, so one iptables rule (`-i gdt+`) covers
all of them; bridges made before that naming get a rule each (see
`cover_bridges`). Rules live in a chain of gpudock's own, `GPUDOCK-INPUT`,
jumped to first from INPUT. Needs root and iptables on the Docker host: with
a remote engine the rule is the host operator's job (docs/security.md).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from collections.abc import Iterable

log = logging.getLogger(__name__)

CHAIN = "GPUDOCK-INPUT"
BRIDGE_PREFIX = "gdt"
BRIDGE_OPTION = "com.docker.network.bridge.name"
_TIMEOUT_S = 15


def bridge_name(network: str) -> str:
    """The Linux bridge of a tenant network (at most 15 characters, as the kernel wants)."""
    return BRIDGE_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:12]


class HostFirewall:
    def __init__(self, binary: str = "iptables") -> None:
        self._binary = shutil.which(binary)

    @property
    def available(self) -> bool:
        return self._binary is not None

    def install(self) -> bool:
        """Make the chain, the jump and the rule for `gdt+` bridges (idempotent).
        False (and a warning) where iptables cannot be run."""
        if self._binary is None:
            log.warning("iptables not found: tenant networks can reach the host's services")
            return False
        try:
            if not self._ok("-n", "-L", CHAIN):
                self._run("-N", CHAIN)
            if not self._ok("-C", "INPUT", "-j", CHAIN):
                self._run("-I", "INPUT", "1", "-j", CHAIN)
            self._ensure_drop(f"{BRIDGE_PREFIX}+")
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("could not install the host firewall rule: %s", exc)
            return False
        return True

    def cover_bridges(self, bridges: Iterable[str]) -> None:
        """Rules for tenant bridges named before `gdt…` names were used."""
        if self._binary is None:
            return
        for bridge in bridges:
            if not bridge.startswith(BRIDGE_PREFIX):
                try:
                    self._ensure_drop(bridge)
                except (OSError, subprocess.SubprocessError) as exc:
                    log.warning("could not cover bridge %s: %s", bridge, exc)

    def _ensure_drop(self, interface: str) -> None:
        rule = ["-i", interface, "-m", "conntrack", "!", "--ctstate", "ESTABLISHED,RELATED"]
        rule += ["-j", "DROP"]
        if not self._ok("-C", CHAIN, *rule):
            self._run("-A", CHAIN, *rule)

    def _ok(self, *args: str) -> bool:
        assert self._binary is not None
        done = subprocess.run(
            [self._binary, "-w", *args], capture_output=True, timeout=_TIMEOUT_S, check=False
        )
        return done.returncode == 0

    def _run(self, *args: str) -> None:
        assert self._binary is not None
        done = subprocess.run(
            [self._binary, "-w", *args], capture_output=True, text=True, timeout=_TIMEOUT_S
        )
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip() or f"iptables {args} failed")
