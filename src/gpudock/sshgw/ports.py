"""What the gateway's parts need of each other, as Protocols.

A session or a forward needs its connection (the grant, the byte counters, a
way to refuse) and the gateway behind it (its thread pool, its tasks, the
audit); the connection needs the gateway. Typing against these shapes instead
of the classes keeps `server`, `session`, `forward` and `gateway` free of
import cycles: each imports this module, none imports the others' classes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from gpudock.services.context import ServiceContext
from gpudock.services.ssh.sessions import Grant
from gpudock.sshgw.ratelimit import SshGates

T = TypeVar("T")


class Gateway(Protocol):
    """The gateway as its connections and channels use it."""

    ctx: ServiceContext
    limits: SshGates

    def register(self, connection: Any) -> None: ...

    def unregister(self, connection: Any) -> None: ...

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    async def audit(self, function: Callable[..., T], *args: Any) -> T | None: ...

    async def best_effort(self, what: str, function: Callable[..., Any], *args: Any) -> None: ...

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]: ...

    async def exit_code(self, exec_id: str) -> int | None: ...


class Connection(Protocol):
    """One authenticated SSH connection, as its channels use it."""

    gateway: Gateway
    grant: Grant | None
    bytes_in: int
    bytes_out: int

    def refuse(self, reason: str) -> None: ...

    def peer_and_local(self) -> tuple[str, str]: ...
