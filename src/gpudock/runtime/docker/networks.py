"""Tenant networks: one bridge per tenant, and a host firewall so that tenant
networks cannot open connections to the host itself.

Each tenant's containers share a bridge of its own: they reach each other and
the internet (NAT), and the engine's isolation rules drop traffic to other
bridges (FORWARD). But a packet from a container to any of the host's own
addresses — the bridge's gateway, the host's LAN address — is delivered
locally (INPUT), so every service listening on all interfaces would be
reachable from every instance. gpudock serves tenants nothing over their
network, so it drops new connections arriving on tenant bridges; replies to
connections the host opened stay allowed.

Tenant bridges are named `gdt<12 hex>`, so one iptables rule (`-i gdt+`) covers
all of them; bridges made before that naming get a rule each (see
`HostFirewall.cover_bridges`). Rules live in a chain of gpudock's own,
`GPUDOCK-INPUT`, jumped to first from INPUT. Needs root and iptables on the
Docker host: with a remote engine the rule is the host operator's job
(docs/security.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
import subprocess
import threading
from collections.abc import Iterable, Iterator

import docker
import docker.errors

from gpudock.runtime.base import LABEL_MANAGED, NetworkState
from gpudock.runtime.docker.translate import explain, label_filter, translated

log = logging.getLogger(__name__)

CHAIN = "GPUDOCK-INPUT"
BRIDGE_PREFIX = "gdt"
BRIDGE_OPTION = "com.docker.network.bridge.name"
ENGINE_NETWORKS = frozenset({"", "default", "bridge", "host", "none"})
IPTABLES_TIMEOUT_S = 15


def bridge_name(network: str) -> str:
    """The Linux bridge of a tenant network (at most 15 characters, as the kernel wants)."""
    return BRIDGE_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:12]


def is_tenant_network(network: str) -> bool:
    """False for the engine's own networks, which gpudock never removes."""
    return network not in ENGINE_NETWORKS


class DockerNetworks:
    """The tenant networks of one engine. Creating a container on a network and
    removing that network never interleave (one lock per network). Networks
    this process saw exist are not asked about again until it removes them,
    or `forget`s one a container create could not find."""

    def __init__(self, api: docker.APIClient) -> None:
        self._api = api
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._known: set[str] = set()

    @contextlib.contextmanager
    def joining(self, name: str, labels: dict[str, str]) -> Iterator[None]:
        """Hold the network `name` (created unless it exists) while a container
        is created on it; nothing for the engine's default network ("")."""
        if not name:
            yield
            return
        with self._lock_of(name):
            with translated(f"create network {name}"):
                self._ensure(name, labels)
            yield

    def ensure(self, name: str, labels: dict[str, str]) -> None:
        with self._lock_of(name), translated(f"create network {name}"):
            self._ensure(name, labels)

    def forget(self, name: str) -> None:
        """Ask the engine about `name` again next time."""
        self._known.discard(name)

    def remove(self, name: str) -> None:
        with self._lock_of(name), translated(f"remove network {name}"):
            # Stopped containers keep their network by id: never pull it from under them.
            if self._api.containers(all=True, filters={"network": name}):
                return
            self._known.discard(name)
            try:
                self._api.remove_network(name)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if exc.status_code in (403, 409):  # an endpoint appeared: still in use
                    return
                raise

    def with_labels(self, labels: dict[str, str]) -> list[NetworkState]:
        with translated("list networks"):
            found = self._api.networks(filters={"label": label_filter(labels)})
        return [NetworkState(name=n["Name"], labels=dict(n.get("Labels") or {})) for n in found]

    def tenant_bridges(self) -> list[str]:
        """The Linux bridges of gpudock's networks (Docker names unnamed ones br-<id>)."""
        with translated("list networks"):
            found = self._api.networks(filters={"label": f"{LABEL_MANAGED}=true"})
        return [(n.get("Options") or {}).get(BRIDGE_OPTION) or f"br-{n['Id'][:12]}" for n in found]

    def _ensure(self, name: str, labels: dict[str, str]) -> None:
        if name in self._known:
            return
        try:
            self._api.inspect_network(name)
        except docker.errors.NotFound:
            self._create(name, labels)
        self._known.add(name)

    def _create(self, name: str, labels: dict[str, str]) -> None:
        options = {BRIDGE_OPTION: bridge_name(name)}
        try:
            self._api.create_network(
                name, driver="bridge", labels=labels, options=options, check_duplicate=True
            )
        except docker.errors.APIError as exc:
            if "address pool" not in explain(exc):
                raise
            # The engine's address pools are full (its defaults hold ~30 bridges):
            # free the ones gpudock left unused (crashes, any cluster), then retry once.
            self._remove_unused()
            self._api.create_network(
                name, driver="bridge", labels=labels, options=options, check_duplicate=True
            )

    def _remove_unused(self) -> None:
        """gpudock networks that no container, running or not, is on. Not the
        engine's `network prune`: it would take those of stopped containers."""
        for network in self._api.networks(filters={"label": f"{LABEL_MANAGED}=true"}):
            if not self._api.containers(all=True, filters={"network": network["Name"]}):
                self._known.discard(network["Name"])
                with contextlib.suppress(docker.errors.APIError):
                    self._api.remove_network(network["Id"])

    def _lock_of(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())


class HostFirewall:
    """The `GPUDOCK-INPUT` chain (see the module's docstring)."""

    def __init__(self, binary: str = "iptables") -> None:
        self._binary = shutil.which(binary)

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
            [self._binary, "-w", *args],
            capture_output=True,
            timeout=IPTABLES_TIMEOUT_S,
            check=False,
        )
        return done.returncode == 0

    def _run(self, *args: str) -> None:
        assert self._binary is not None
        done = subprocess.run(
            [self._binary, "-w", *args], capture_output=True, text=True, timeout=IPTABLES_TIMEOUT_S
        )
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip() or f"iptables {args} failed")
