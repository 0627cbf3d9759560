"""Self-fencing: an agent cut off from its server longer than its lease stops
its tenants' containers itself.

The server renews the lease each time it hears the agent: the welcome, then
an acknowledgement of every heartbeat, each saying how long it runs
(`GPUDOCK_AGENT_LEASE_S`, by default `GPUDOCK_HOST_LOST_AFTER_S`, so the
agent stops its tenants when the server stops billing them and may restart
them elsewhere). `--lease-s` on the host overrides what the server says.
When the lease runs out — the network cut, the server gone — every running
container labelled as a gpudock instance is stopped: stopped, never removed
(the server decides what happens to it, and its data and writable layer stay).
Until the server renews the lease again the agent fences nothing more; it
restarts nothing by itself either: the server does, as it does any container
that exited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpudock.errors import GpudockError
from gpudock.runtime.base import LABEL_INSTANCE, LABEL_MANAGED, Runtime

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 10
CHECK_EVERY_S = 1.0


@dataclass
class Fence:
    runtime: Runtime
    lease_s: float | None = None  # --lease-s: this, not what the server says
    clock: Callable[[], float] = time.monotonic
    _expires_at: float | None = field(default=None, init=False)
    _check_s: float = field(default=CHECK_EVERY_S, init=False)
    _fenced: bool = field(default=False, init=False)

    def renew(self, server_lease_s: float | None) -> None:
        """The server heard us: the lease runs again from now."""
        lease = self.lease_s if self.lease_s is not None else server_lease_s
        if lease is None:
            return  # a server that grants no lease: nothing to fence by
        if self._fenced:
            log.info("the server hears this agent again: the lease is renewed")
        self._expires_at, self._fenced = self.clock() + lease, False
        self._check_s = min(CHECK_EVERY_S, lease / 4)

    @property
    def fenced(self) -> bool:
        return self._fenced

    async def watch(self) -> None:
        """Until cancelled: `check` a few times per lease."""
        while True:
            await asyncio.sleep(self._check_s)
            await asyncio.to_thread(self.check)

    def check(self) -> bool:
        """Fence if the lease ran out and this outage was not fenced yet; True if it
        fenced now. Blocking (the engine is asked)."""
        expired = self._expires_at is not None and self.clock() > self._expires_at
        if not expired or self._fenced:
            return False
        self._fenced = True
        self.stop_tenants()
        return True

    def stop_tenants(self) -> int:
        """Stop every running instance container on this host; how many. Blocking."""
        try:
            containers = self.runtime.list_containers({LABEL_MANAGED: "true"})
        except GpudockError as exc:
            log.error("lease expired, but the engine cannot list containers: %s", exc.message)
            return 0
        tenants = [c for c in containers if c.running and LABEL_INSTANCE in c.labels]
        log.warning(
            "cut off from the server longer than the lease: stopping %d tenant container(s) "
            "(kept, not removed)",
            len(tenants),
        )
        stopped = 0
        for container in tenants:
            try:
                self.runtime.stop_container(container.id, STOP_TIMEOUT_S)
            except GpudockError as exc:
                log.error("could not stop %s: %s", container.name, exc.message)
                continue
            stopped += 1
            log.warning(
                "stopped %s (instance %s)", container.name, container.labels[LABEL_INSTANCE]
            )
        return stopped
