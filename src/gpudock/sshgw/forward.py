"""`ssh -L LOCAL:localhost:PORT`: forwards to ports inside the instance only.

The gateway has no route into an instance's network namespace, and services
like TensorBoard or Jupyter listen on the instance's loopback anyway, so each
forwarded connection runs a small relay inside the instance
(`commands.port_relay`). The channel is confirmed only once the relay has
connected, so a closed port fails the client's `-L` connection with the reason.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

import asyncssh

from gpudock.errors import GpudockError
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.sessions import SESSION_MARKER_ENV, STDERR, Grant
from gpudock.sshgw import commands
from gpudock.sshgw.bridge import Bridge, open_bridge
from gpudock.sshgw.ports import Connection

log = logging.getLogger(__name__)
CONNECT_DEADLINE_S = 20.0
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})
READY = b"\0"


def target_inside(grant: Grant, dest_host: str) -> str | None:
    """The host to connect to inside the instance, or None if DEST_HOST is elsewhere."""
    host = dest_host.strip().lower().strip("[]")
    if host in LOOPBACK_NAMES:
        return "::1" if host == "::1" else "127.0.0.1"
    if host in (grant.instance_name.lower(), grant.instance_id.lower()):
        return "127.0.0.1"
    return None


async def open_forward(conn: Connection, host: str, port: int) -> ForwardSession:
    """Start the relay and wait until it has connected; ChannelOpenError if it cannot."""
    assert conn.grant is not None
    gateway = conn.gateway
    session = ForwardSession(conn)
    try:
        stream = await gateway.call(
            ssh_sessions.open_stream,
            gateway.ctx,
            conn.grant.instance_id,
            commands.port_relay(host, port),
            tty=False,
            env={SESSION_MARKER_ENV: session.marker},
        )
    except GpudockError as exc:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, exc.message) from exc
    session.bridge = await open_bridge(stream, session)
    try:
        connected = await asyncio.wait_for(asyncio.shield(session.ready), CONNECT_DEADLINE_S)
    except TimeoutError:
        connected = False
    if not connected:
        session.bridge.close()
        gateway.spawn(session.terminate())
        why = session.errors.decode(errors="replace").strip() or "no answer"
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_CONNECT_FAILED,
            f"cannot connect to {host}:{port} inside {conn.grant.instance_name}: {why}",
        )
    return session


class ForwardSession(asyncssh.SSHTCPSession[bytes]):
    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._chan: asyncssh.SSHTCPChannel[bytes] | None = None
        self.bridge: Bridge | None = None
        self.ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.errors = b""
        self.marker = secrets.token_hex(8)
        self._closed = False
        self._held: list[bytes] = []  # output that came before the channel was confirmed
        self._ended = False

    # -- SSH side ------------------------------------------------------------------------
    def connection_made(self, chan: asyncssh.SSHTCPChannel[bytes]) -> None:
        self._chan = chan
        for data in self._held:
            chan.write(data)
        self._held.clear()
        if self._ended:
            chan.close()

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._conn.bytes_in += len(data)
        assert self.bridge is not None
        self.bridge.write(data)

    def eof_received(self) -> bool:
        assert self.bridge is not None
        self.bridge.write_eof()
        return True

    def pause_writing(self) -> None:
        if self.bridge is not None:
            self.bridge.pause_reading()

    def resume_writing(self) -> None:
        if self.bridge is not None:
            self.bridge.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self.bridge is not None and not self.bridge.ended:
            self.bridge.close()
            self._conn.gateway.spawn(self.terminate())

    async def terminate(self) -> None:
        """Stop a relay whose client has gone (its target may never close)."""
        assert self._conn.grant is not None
        await self._conn.gateway.best_effort(
            "stop a port-forward relay",
            ssh_sessions.signal,
            self._conn.grant.instance_id,
            self.marker,
            "TERM",
        )

    # -- relay side (Sink) ---------------------------------------------------------------
    def output(self, stream: int, data: bytes) -> None:
        if stream == STDERR:
            self.errors = (self.errors + data)[-2048:]
            return
        if not self.ready.done():
            if not data.startswith(READY):
                self.errors += data[:2048]
                self.ready.set_result(False)
                return
            self.ready.set_result(True)
            data = data[len(READY) :]
        if not data or self._closed:
            return
        self._conn.bytes_out += len(data)
        if self._chan is None:
            self._held.append(data)
        else:
            self._chan.write(data)

    def output_ended(self) -> None:
        self._ended = True
        if not self.ready.done():
            self.ready.set_result(False)
        elif self._chan is not None and not self._closed:
            self._chan.close()

    def pause_input(self) -> None:
        if self._chan is not None:
            self._chan.pause_reading()

    def resume_input(self) -> None:
        if self._chan is not None:
            self._chan.resume_reading()
