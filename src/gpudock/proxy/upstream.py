"""HTTP to a port inside an instance over sockets the runtime makes in the
container's network namespace (`Runtime.port_socket`), pooled per container
and port so that a page's hundred requests share a few keep-alive
connections. The protocol on each connection is `exchange`'s. A pooled
connection the instance closed while idle is not reused; one it drops just as
a request goes out gets a safe, bodyless request once more on a new one.

A pool of our own rather than httpcore's: the sockets come from the runtime,
not from a host name, and a download's body is read off the socket without
h11 (see `exchange`), which httpcore's connections do not allow.

Timeouts: connecting gets `CONNECT_TIMEOUT_S`; every read and write after
that gets the idle timeout, so a response that goes silent for that long is
closed and one that keeps moving (a download, an event stream) is never cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable

from gpudock.proxy.exchange import PortConnection, UpstreamFailure, UpstreamResponse
from gpudock.runtime.base import Runtime

__all__ = ["Upstream", "UpstreamFailure", "UpstreamResponse", "open_port"]

CONNECT_TIMEOUT_S = 10.0
KEEPALIVE_S = 30.0  # an idle pooled connection older than this is closed, not reused
MAX_IDLE_PER_PORT = 32
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Port = tuple[str | None, str, int]  # host id, container id, port inside it
RuntimeOf = Callable[[str | None], Runtime]


async def open_port(runtime: Runtime, container_id: str, port: int) -> socket.socket:
    """A socket connected to `port` inside the container (non-blocking)."""
    made = await asyncio.to_thread(runtime.port_socket, container_id, port)
    sock = made.sock
    try:
        sock.setblocking(False)
        if made.address is None:
            return sock  # relayed over an agent's link: connected already
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await asyncio.get_running_loop().sock_connect(sock, made.address)
    except BaseException:
        sock.close()
        raise
    return sock


class Upstream:
    """The proxy's one connection pool into instances (used on one event loop)."""

    def __init__(self, runtime_for: RuntimeOf, idle_timeout_s: float) -> None:
        """`runtime_for(host_id)`: the runtime of the host a container runs on."""
        self._runtime_for = runtime_for
        self._idle_timeout_s = idle_timeout_s
        self._idle: dict[Port, list[tuple[float, PortConnection]]] = {}
        self._swept = time.monotonic()

    @contextlib.asynccontextmanager
    async def request(
        self,
        host_id: str | None,
        container_id: str,
        port: int,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes],
    ) -> AsyncIterator[UpstreamResponse]:
        """Send one request; the response's body streams while the block runs.
        `UpstreamFailure` when the instance's side fails; `RuntimeFailure`
        (from the runtime) when the container is not running."""
        key = (host_id, container_id, port)
        pooled = self._checkout(key)
        connection = pooled or await self._connect(key)
        try:
            response = await connection.exchange(method, target, headers, body)
        except UpstreamFailure as exc:
            connection.close()
            silent = isinstance(exc.__cause__, TimeoutError)  # it may have been acted on
            if pooled is None or silent or not _repeatable(method, headers):
                raise
            # The instance closed the pooled connection as the request went out
            # (its keep-alive ran out): once more on a new one, as browsers do.
            connection = await self._connect(key)
            response = await _exchange_or_close(connection, method, target, headers, body)
        except BaseException:
            connection.close()
            raise
        try:
            yield response
        finally:
            if response.reusable():
                self._checkin(key, connection)
            else:
                connection.close()

    async def _connect(self, key: Port) -> PortConnection:
        try:
            host_id, container_id, port = key
            sock = await open_port(self._runtime_for(host_id), container_id, port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamFailure(str(exc) or type(exc).__name__) from exc
        return PortConnection(sock, self._idle_timeout_s)

    def _checkout(self, key: Port) -> PortConnection | None:
        """The most recently used live connection to `key`; stale ones are closed."""
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            since, connection = idle.pop()
            if now - since < KEEPALIVE_S and connection.still_open():
                return connection
            connection.close()
        self._idle.pop(key, None)
        return None

    def _checkin(self, key: Port, connection: PortConnection) -> None:
        now = time.monotonic()
        self._sweep(now)
        idle = self._idle.setdefault(key, [])
        if len(idle) >= MAX_IDLE_PER_PORT:
            _since, oldest = idle.pop(0)
            oldest.close()
        idle.append((now, connection))

    def _sweep(self, now: float) -> None:
        """Close expired connections of every port, once per keep-alive period
        (a port nobody asks for again would otherwise hold them)."""
        if now - self._swept < KEEPALIVE_S:
            return
        self._swept = now
        for key, idle in list(self._idle.items()):
            for since, connection in idle:
                if now - since >= KEEPALIVE_S:
                    connection.close()
            kept = [(since, c) for since, c in idle if now - since < KEEPALIVE_S]
            if kept:
                self._idle[key] = kept
            else:
                del self._idle[key]


def _repeatable(method: str, headers: list[tuple[bytes, bytes]]) -> bool:
    """A safe method without a body: it can be sent again as it was."""
    framing = (b"content-length", b"transfer-encoding")
    return method in SAFE_METHODS and not any(name in framing for name, _v in headers)


async def _exchange_or_close(
    connection: PortConnection,
    method: str,
    target: str,
    headers: list[tuple[bytes, bytes]],
    body: AsyncIterable[bytes],
) -> UpstreamResponse:
    try:
        return await connection.exchange(method, target, headers, body)
    except BaseException:
        connection.close()
        raise
