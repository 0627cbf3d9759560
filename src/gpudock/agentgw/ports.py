"""Port connections over the link, the server's end: one SSH channel per TCP
connection into an instance on the agent's host (`runtime.link_ports`).

`PortChannels.open` asks the agent for a port channel and reads its first
line (connected, or the agent's error raised as its class). The caller gets
one end of a socket pair, already connected: what it writes reaches the port
inside the instance (its `shutdown(SHUT_WR)` a half-close there), what the
instance sends comes back on it. The other end is relayed to the channel on
the gateway's loop; closing either side closes the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure
from gpudock.runtime.calls import CallError, error_for
from gpudock.runtime.link_ports import PORT_COMMAND, PortOpened, PortRequest

log = logging.getLogger(__name__)
CHUNK = 1 << 18


class PortChannels:
    """The port channels on one link (used on the gateway's loop)."""

    def __init__(self, conn: asyncssh.SSHClientConnection, host_name: str) -> None:
        self._conn = conn
        self._host_name = host_name
        self._open: set[asyncssh.SSHClientProcess[bytes]] = set()

    async def open(self, request: PortRequest, timeout_s: float) -> socket.socket:
        """A blocking socket connected to the port (see the module's docstring)."""
        process = await self._conn.create_process(
            PORT_COMMAND + request.model_dump_json(), encoding=None
        )
        try:
            opened = PortOpened.model_validate_json(
                await asyncio.wait_for(process.stdout.readuntil(b"\n"), timeout_s)
            )
        except (asyncio.IncompleteReadError, TimeoutError, ValidationError) as exc:
            process.close()
            raise RuntimeFailure(
                f"host {self._host_name}: the agent did not connect to port {request.port} ({exc})"
            ) from exc
        except BaseException:  # cancelled: the caller gave up waiting
            process.close()
            raise
        if not opened.ok:
            process.close()
            raise error_for(CallError(code=opened.code or "", message=opened.message))
        ours, pump = socket.socketpair()
        pump.setblocking(False)
        self._open.add(process)
        asyncio.get_running_loop().create_task(self._relay(process, pump))
        return ours

    async def _relay(self, process: asyncssh.SSHClientProcess[bytes], pump: socket.socket) -> None:
        inbound = asyncio.ensure_future(_socket_to_channel(pump, process))
        try:
            await _channel_to_socket(process, pump)
            await inbound
        finally:
            inbound.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await inbound
            process.close()
            pump.close()
            self._open.discard(process)

    def close(self) -> None:
        for process in list(self._open):
            process.close()


async def _channel_to_socket(
    process: asyncssh.SSHClientProcess[bytes], pump: socket.socket
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await process.stdout.read(CHUNK):
            await loop.sock_sendall(pump, data)
        pump.shutdown(socket.SHUT_WR)
    except (asyncssh.Error, OSError) as exc:
        log.debug("port relay from the agent ended: %s", exc)


async def _socket_to_channel(
    pump: socket.socket, process: asyncssh.SSHClientProcess[bytes]
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await loop.sock_recv(pump, CHUNK):
            process.stdin.write(data)
            await process.stdin.drain()
        process.stdin.write_eof()
    except (asyncssh.Error, OSError) as exc:
        log.debug("port relay to the agent ended: %s", exc)
