"""HTTP to a port inside an instance: httpcore (httpx's own transport) over
sockets the runtime makes in the container's network namespace.

httpcore rather than httpx's client: the proxy needs a network backend of its
own (`PortBackend`: the socket comes from `Runtime.port_socket`, not from a
DNS name), which httpx does not expose, and wants the bytes as they are (no
cookie jar, no decoding, no redirects). Connections are pooled per container
and port, so a page's hundred requests share a few keep-alive connections.

Timeouts: connecting gets `CONNECT_TIMEOUT_S`; reading and writing get the
idle timeout, so a response that goes silent for that long is closed and one
that keeps moving (a download, an event stream) is never cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import Any

import httpcore

from gpudock.runtime.base import Runtime

CONNECT_TIMEOUT_S = 10.0
SOCKET_BUFFER = 1 << 20
# httpcore asks for 64 KiB a read; h11 takes any amount, and on a download each
# read is a turn through httpcore, h11, the ASGI server and the event loop, so
# a read takes whatever has arrived, up to this.
READ_SIZE = 1 << 20
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


class SocketStream(httpcore.AsyncNetworkStream):
    """A connected non-blocking socket driven by the event loop."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self._loop.sock_recv(self._sock, max(max_bytes, READ_SIZE))
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(f"nothing from the instance for {timeout} s") from exc
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._loop.sock_sendall(self._sock, buffer)
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(f"the instance took nothing for {timeout} s") from exc
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from exc

    async def aclose(self) -> None:
        self._sock.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("services inside instances are reached without TLS")

    def get_extra_info(self, info: str) -> Any:
        return self._sock if info == "socket" else None


async def open_port(runtime: Runtime, container_id: str, port: int) -> socket.socket:
    """A socket connected to `port` inside the container (non-blocking)."""
    made = await asyncio.to_thread(runtime.port_socket, container_id, port)
    sock = made.sock
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        sock.setblocking(False)
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await asyncio.get_running_loop().sock_connect(sock, made.address)
    except BaseException:
        sock.close()
        raise
    return sock


class PortBackend(httpcore.AsyncNetworkBackend):
    """Connects 'hosts' that are keys of `routes` (container id and port)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self.routes: dict[str, str] = {}

    def host_for(self, container_id: str) -> str:
        key = "c" + container_id[:24]
        self.routes[key] = container_id
        return key

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        container_id = self.routes.get(host)
        if container_id is None:
            raise httpcore.ConnectError(f"no route to {host}")
        try:
            return SocketStream(await open_port(self._runtime, container_id, port))
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class Upstream:
    """The proxy's one connection pool into instances."""

    def __init__(self, runtime: Runtime, idle_timeout_s: float) -> None:
        self.backend = PortBackend(runtime)
        self._pool = httpcore.AsyncConnectionPool(
            network_backend=self.backend, max_connections=1000, keepalive_expiry=30.0
        )
        self._timeouts = {
            "connect": CONNECT_TIMEOUT_S,
            "read": idle_timeout_s,
            "write": idle_timeout_s,
            "pool": CONNECT_TIMEOUT_S,
        }

    @contextlib.asynccontextmanager
    async def request(
        self,
        container_id: str,
        port: int,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterable[bytes],
    ) -> AsyncIterator[httpcore.Response]:
        """Send one request; the response streams while the block runs."""
        url = httpcore.URL(
            scheme=b"http",
            host=self.backend.host_for(container_id).encode(),
            port=port,
            target=target.encode("latin-1"),
        )
        request = httpcore.Request(
            method.encode(),
            url,
            headers=headers,
            content=body,
            extensions={"timeout": self._timeouts},
        )
        response = await self._pool.handle_async_request(request)
        try:
            yield response
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._pool.aclose()
