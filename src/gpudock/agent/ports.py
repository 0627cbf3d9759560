"""Port connections over the link, the agent's end: one SSH channel per TCP
connection into an instance's container (`runtime.link_ports` has the wire).

The agent reaches only what the server could reach on a local engine, and
only for instances: the container must carry the `gpudock.instance` label
(the scope's instance, when the request has one, whose generation must be
current), and the socket is made in that container's network namespace and
connected to 127.0.0.1:port there (`Runtime.port_socket`, which is
`runtime.docker.ports` on this host's engine). Neither the host's own
network, nor another container, nor an address the request names can be
reached: the request names a container and a port, nothing else.

After the `PortOpened` line, the channel's stdin is written to the socket
(its EOF a half-close) and what the socket reads goes to the channel's
stdout, with SSH's per-channel window as the flow control both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import LABEL_INSTANCE, Runtime
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.link_ports import PORT_COMMAND, PortOpened, PortRequest

log = logging.getLogger(__name__)
CHUNK = 1 << 18
CONNECT_TIMEOUT_S = 10.0
REFUSED = 1  # the exit status of a channel that did not connect


class NotAnInstance(RuntimeFailure):
    """The container named is not one of this installation's instances."""


def _socket_for(runtime: Runtime, request: PortRequest) -> socket.socket:
    """Blocking: the socket into the instance's container, connected."""
    container = runtime.inspect_container(request.container_id)
    owner = container.labels.get(LABEL_INSTANCE) if container is not None else None
    if owner is None or (request.scope is not None and owner != request.scope.instance):
        raise NotAnInstance(f"container {request.container_id} is not an instance's")
    made = runtime.port_socket(request.container_id, request.port)
    try:
        made.sock.settimeout(CONNECT_TIMEOUT_S)
        if made.address is not None:
            made.sock.connect(made.address)
        made.sock.setblocking(False)
    except OSError as exc:
        made.sock.close()
        raise RuntimeFailure(
            f"nothing answers on port {request.port} inside the instance ({exc})"
        ) from exc
    return made.sock


async def serve_port(
    runtime: Runtime,
    process: asyncssh.SSHServerProcess[bytes],
    admit: Callable[[InstanceScope], None],
) -> None:
    """One port connection, from its request to either side's close."""
    try:
        request = PortRequest.model_validate_json(str(process.command)[len(PORT_COMMAND) :])
        if request.scope is not None:
            admit(request.scope)
        sock = await asyncio.to_thread(_socket_for, runtime, request)
    except RuntimeFailure as exc:
        await _answer(process, PortOpened(ok=False, code=exc.code, message=exc.message))
        process.exit(REFUSED)
        return
    except ValidationError as exc:
        await _answer(process, PortOpened(ok=False, code="runtime_failure", message=str(exc)))
        process.exit(REFUSED)
        return
    with sock:
        await _answer(process, PortOpened(ok=True))
        await _relay(process, sock)
    process.exit(0)


async def _answer(process: asyncssh.SSHServerProcess[bytes], opened: PortOpened) -> None:
    process.stdout.write(opened.model_dump_json().encode() + b"\n")
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()


async def _relay(process: asyncssh.SSHServerProcess[bytes], sock: socket.socket) -> None:
    inbound = asyncio.ensure_future(_channel_to_socket(process, sock))
    try:
        await _socket_to_channel(process, sock)
        await inbound  # the server's side may still be sending (a half-closed upload)
    finally:
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await inbound


async def _socket_to_channel(
    process: asyncssh.SSHServerProcess[bytes], sock: socket.socket
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await loop.sock_recv(sock, CHUNK):
            process.stdout.write(data)
            await process.stdout.drain()
        process.stdout.write_eof()
    except (asyncssh.Error, OSError) as exc:
        log.debug("port relay to the server ended: %s", exc)


async def _channel_to_socket(
    process: asyncssh.SSHServerProcess[bytes], sock: socket.socket
) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await process.stdin.read(CHUNK):
            await loop.sock_sendall(sock, data)
        sock.shutdown(socket.SHUT_WR)
    except (asyncssh.Error, OSError) as exc:
        log.debug("port relay into the instance ended: %s", exc)
