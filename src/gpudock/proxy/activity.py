"""Service-URL use as activity for the idle rule: the proxy notes when an
instance was last used through it (a request, a chunk of a streamed response,
an open WebSocket), and the idle auto-stop counts from that time as it does
from the end of an SSH session.

At most one database write per instance per `every_s` (60 s) per server: the
throttle is decided on the event loop (a dict look-up), the write runs in a
thread, and a write that fails is logged and forgotten — a proxied request
never fails because its use could not be noted (the next one tries again)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from gpudock.services.context import ServiceContext
from gpudock.services.instances.auto_stop import SERVICE_USE_EVERY_S, note_service_use

log = logging.getLogger(__name__)
MAX_REMEMBERED = 10_000  # instances whose last write is remembered; then the stale are dropped


class UseRecorder:
    def __init__(self, ctx: ServiceContext, every_s: float = SERVICE_USE_EVERY_S) -> None:
        self._ctx = ctx
        self._clock: Callable[[], datetime] = ctx.clock
        self._every_s = every_s
        self._written: dict[str, datetime] = {}  # instance id -> when its use was last written

    async def touch(self, instance_id: str) -> None:
        """Note a use now, unless one was written within `every_s`."""
        now = self._clock()
        last = self._written.get(instance_id)
        if last is not None and (now - last).total_seconds() < self._every_s:
            return
        self._remember(instance_id, now)  # before the write: concurrent requests skip it
        try:
            await asyncio.to_thread(note_service_use, self._ctx, instance_id, now)
        except Exception as exc:  # never the request's failure
            self._written.pop(instance_id, None)  # so the next use tries again
            log.warning("could not note service use of %s: %s", instance_id, exc)

    async def while_open(self, instance_id: str, interval_s: float) -> None:
        """Touch every `interval_s` until cancelled: an open WebSocket is use
        (its opening was touched already)."""
        while True:
            await asyncio.sleep(interval_s)
            await self.touch(instance_id)

    def _remember(self, instance_id: str, at: datetime) -> None:
        if len(self._written) >= MAX_REMEMBERED:
            self._written = {
                i: t for i, t in self._written.items() if (at - t).total_seconds() < self._every_s
            }
        self._written[instance_id] = at
