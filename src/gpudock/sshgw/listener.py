"""The gateway's TCP listener: asyncssh over a transport that sends once per loop turn.

asyncssh writes each SSH packet to its transport as soon as it has built it,
and sends an SSH_MSG_IGNORE before every encrypted packet, so a 1 GiB download
(32 KiB packets, the OpenSSH client's maximum) would be 65,536 `send()` calls
on the client's socket, each paying the kernel's whole TCP path; profiling
the gateway put a third of its CPU there (docs/benchmarks.md). Here the
packets one event-loop turn produces leave in one `send()`: the turn that
builds them ends before the flush runs, so nothing waits for a timer and a
keystroke's echo is not delayed.

`asyncssh.listen(tunnel=...)` accepts any object with `create_server(factory,
host, port)` (asyncssh's tunnel-listener protocol) and builds its connections
with the factory it passes; `TcpListener` is such an object that listens on
plain TCP itself and gives each connection a `CoalescingTransport`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any


class CoalescingTransport(asyncio.Transport):
    """Wraps a connection's transport: writes are queued and sent together at
    the end of the loop turn; everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(bytes(data) if not isinstance(data, bytes) else data)

    def _flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)


class _Coalesced(asyncio.Protocol):
    """The socket's protocol: hands asyncssh's connection the coalescing transport."""

    def __init__(self, inner: asyncio.Protocol) -> None:
        self._inner = inner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._inner.connection_made(CoalescingTransport(transport))

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class TcpListener:
    """asyncssh's tunnel-listener protocol, over plain TCP on this host.

    `sock`: an already bound listening socket (tests); else `create_server`
    listens on the host and port asyncssh passes on from `listen()`."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self._sock = sock

    async def create_server(
        self, session_factory: Callable[[str, int], Any], listen_host: str, listen_port: int
    ) -> asyncio.Server:
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:
            return _Coalesced(session_factory("", 0))

        if self._sock is not None:
            return await loop.create_server(protocol, sock=self._sock)
        return await loop.create_server(protocol, listen_host, listen_port, reuse_address=True)

    def close(self) -> None:
        """Nothing to close: the server that `create_server` returned is asyncssh's."""

    async def wait_closed(self) -> None:
        return None
