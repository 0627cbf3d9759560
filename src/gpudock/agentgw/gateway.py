"""Agents dial in here; the server runs the SSH *client* on each connection.

asyncssh's reverse direction (`listen_reverse`): the agent opened the TCP
connection, so a host behind NAT needs no inbound port, yet the server keeps
the client's role, the one that opens channels — commands, exec sessions and
port forwards are then ordinary SSH channels the server asks the agent for.

Both ends pin keys. The server proves the link key (`client_keys`) to the
agent, which checks it against the fingerprint in its join token or the key it
recorded then. The agent's host key is accepted at the SSH layer and judged
after authentication, off the event loop, by the database: a key an enrolled
host holds, or an unknown key with a valid join token in its hello. Anything
else is answered `refused` (with what to do) and disconnected, so a removed
host's agent stays out, and its live link closes at its next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncssh

from gpudock.agentgw.commands import CommandChannel, ThreadBridge
from gpudock.agentgw.ports import PortChannels
from gpudock.agentgw.streams import ExecChannels
from gpudock.errors import GpudockError
from gpudock.link import keys, tuning, wire
from gpudock.services.agents import enrollment, links, server_key
from gpudock.services.agents.hosts import AgentHost
from gpudock.services.context import ServiceContext
from gpudock.services.fleet.agent_health import record_agent_health

log = logging.getLogger(__name__)
T = TypeVar("T")
WORKERS = 4
STOP_DEADLINE_S = 5.0


@dataclass
class _Attached:
    channel: CommandChannel
    execs: ExecChannels
    ports: PortChannels
    bridge: ThreadBridge

    def close(self) -> None:
        self.channel.close()
        self.execs.close()
        self.ports.close()


class _LinkClient(asyncssh.SSHClient):
    def validate_host_public_key(self, host: str, addr: str, port: int, key: Any) -> bool:
        """Every agent key passes here; `AgentGateway._identify` decides once the
        agent has authenticated the server and said who it is."""
        return True


class AgentGateway:
    """A platform Sidecar: listens for agents on `agent_link_host:agent_link_port`."""

    def __init__(self, ctx: ServiceContext, *, sock: socket.socket | None = None) -> None:
        self.ctx = ctx
        self._sock = sock
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._links: dict[str, asyncssh.SSHClientConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._acceptor is not None, "the agent gateway is not started"
        return int(self._acceptor.get_port())

    @property
    def _lease_s(self) -> float:
        """How long an agent keeps its tenants running without hearing us."""
        settings = self.ctx.settings
        return settings.agent_lease_s or settings.host_lost_after_s

    def connected_hosts(self) -> set[str]:
        """Ids of the hosts whose agents hold a link to this server now."""
        return set(self._links)

    async def start(self) -> None:
        settings = self.ctx.settings
        assert settings.agent_link_port is not None, "started without GPUDOCK_AGENT_LINK_PORT"
        self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpudock-agentgw")
        key = await self.call(server_key.server_link_key, settings)
        where: dict[str, Any] = (
            {"sock": self._sock}
            if self._sock is not None
            else {"host": settings.agent_link_host, "port": settings.agent_link_port}
        )
        self._acceptor = await asyncssh.listen_reverse(
            **where,
            reuse_address=True,
            client_factory=_LinkClient,
            acceptor=self._accept,
            error_handler=self._refused_at_handshake,
            username=wire.LINK_USERNAME,
            client_keys=[key],
            known_hosts=([], [], []),  # not None: so that _LinkClient is asked
            server_host_key_algs=["ssh-ed25519"],
            agent_path=None,
            config=None,
            password=None,
            kbdint_auth=False,
            gss_host=None,
            encoding=None,
            connect_timeout=settings.agent_link_timeout_s,
            login_timeout=settings.agent_link_timeout_s,
            keepalive_interval=settings.agent_link_timeout_s,
            keepalive_count_max=3,
            **tuning.connection_options(),
        )
        if settings.agent_link_port != self.port:
            settings.agent_link_port = self.port  # so that join commands name the real port
        log.info("agent link listening on %s:%d", settings.agent_link_host, self.port)

    async def stop(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        for conn in list(self._links.values()):
            conn.close()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=STOP_DEADLINE_S)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """Run a blocking service call (a transaction, a key file) off the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, function, *args)

    def _accept(self, conn: asyncssh.SSHClientConnection) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refused_at_handshake(self, _conn: object, exc: Exception) -> None:
        # Most often an agent that pins another server key: it says so on its side.
        log.info("agent link handshake failed: %s", exc)

    async def _serve(self, conn: asyncssh.SSHClientConnection) -> None:
        host: AgentHost | None = None
        channel: _Attached | None = None
        peer = str((conn.get_extra_info("peername") or ("?",))[0])
        try:
            writer, reader, _ = await conn.open_session(subsystem=wire.SUBSYSTEM, encoding=None)
            host = await self._welcome(conn, writer, reader, peer)
            if host is not None:
                channel = await self._attach_commands(conn, host)
                await self._heartbeats(host, writer, reader)
        except (wire.LinkClosed, asyncssh.Error, OSError) as exc:
            log.info("agent link from %s closed: %s", peer, exc)
        finally:
            conn.close()
            if channel is not None:
                channel.close()
                self._detach_commands(host, channel)
            if host is not None and self._links.get(host.id) is conn:
                del self._links[host.id]
                await self.call(links.record_link_down, self.ctx, host.id, host.link_changed_at)
                log.info("agent link of host %s is down", host.name)

    async def _attach_commands(
        self, conn: asyncssh.SSHClientConnection, host: AgentHost
    ) -> _Attached:
        """The host's runtime calls go over a command session on this link from now on."""
        channel = await CommandChannel.open(conn, host.name)
        execs = ExecChannels(conn, host.id, host.name)
        ports = PortChannels(conn, host.name)
        bridge = ThreadBridge(channel, execs, ports, asyncio.get_running_loop())
        if self.ctx.hosts is not None:
            self.ctx.hosts.attach(host.id, host.name, bridge)
        return _Attached(channel, execs, ports, bridge)

    def _detach_commands(self, host: AgentHost | None, attached: _Attached) -> None:
        if host is not None and self.ctx.hosts is not None:
            self.ctx.hosts.detach(host.id, attached.bridge)

    async def _welcome(
        self,
        conn: asyncssh.SSHClientConnection,
        writer: asyncssh.SSHWriter[bytes],
        reader: asyncssh.SSHReader[bytes],
        peer: str,
    ) -> AgentHost | None:
        hello = await wire.receive(reader, self.ctx.settings.agent_link_timeout_s)
        if not isinstance(hello, wire.Hello):
            raise wire.LinkClosed(f"expected hello, got {hello.type}")
        host_key = conn.get_server_host_key()
        assert host_key is not None, "an authenticated reverse link has the agent's key"
        try:
            if hello.protocol != wire.PROTOCOL_VERSION:
                raise GpudockError(
                    f"this agent speaks link protocol {hello.protocol}, the server "
                    f"{wire.PROTOCOL_VERSION}: install the server's gpudock version on the host"
                )
            host = await self.call(self._identify, keys.public_text(host_key), hello, peer)
        except GpudockError as exc:
            log.warning("refused an agent from %s: %s", peer, exc.message)
            await self._refuse(writer, reader, wire.Refused(code=exc.code, message=exc.message))
            return None
        previous = self._links.get(host.id)
        self._links[host.id] = conn
        if previous is not None:
            previous.close()  # the agent restarted before its old connection timed out
        welcome = wire.Welcome(
            host_name=host.name,
            heartbeat_s=self.ctx.settings.agent_heartbeat_s,
            lease_s=self._lease_s,
        )
        await wire.send(writer, welcome)
        log.info("agent link of host %s is up (from %s)", host.name, peer)
        return host

    async def _refuse(
        self,
        writer: asyncssh.SSHWriter[bytes],
        reader: asyncssh.SSHReader[bytes],
        refusal: wire.Refused,
    ) -> None:
        """Say why, then let the agent hang up: closing the connection at once could
        discard the refusal before the agent has read it."""
        await wire.send(writer, refusal)
        writer.write_eof()
        with contextlib.suppress(TimeoutError, asyncssh.Error, OSError):
            await asyncio.wait_for(reader.read(), self.ctx.settings.agent_link_timeout_s)

    def _identify(self, agent_key: str, hello: wire.Hello, peer: str) -> AgentHost:
        known = links.enrolled_host(self.ctx, agent_key)
        if known is None and hello.join is not None:
            return enrollment.redeem(self.ctx, hello.join, agent_key, hello.report, peer)
        host = links.require_enrolled(self.ctx, agent_key)
        linked = links.record_link_up(self.ctx, host.id, hello.report, peer)
        return linked or links.require_enrolled(self.ctx, agent_key)  # removed meanwhile: raises

    async def _heartbeats(
        self,
        host: AgentHost,
        writer: asyncssh.SSHWriter[bytes],
        reader: asyncssh.SSHReader[bytes],
    ) -> None:
        """Until the link ends: record and acknowledge each heartbeat (which renews the
        agent's lease); three missed ones end it."""
        settings = self.ctx.settings
        patience = 3 * settings.agent_heartbeat_s + settings.agent_link_timeout_s
        while True:
            message = await wire.receive(reader, patience)
            if not isinstance(message, wire.Heartbeat):
                raise wire.LinkClosed(f"expected a heartbeat, got {message.type}")
            if not await self.call(links.record_heartbeat, self.ctx, host.id, message.report):
                refusal = wire.Refused(
                    code=links.AgentNotEnrolled.code,
                    message=f"host {host.name!r} was removed from the server, which revoked "
                    "this agent; to enroll the host again, run `gpudock hosts add "
                    f"{host.name}` on the server and the join command it prints here",
                )
                await self._refuse(writer, reader, refusal)
                return
            through = 0
            if message.health:
                through = await self.call(record_agent_health, self.ctx, host.id, message.health)
            ack = wire.Ack(lease_s=self._lease_s, health_through=through)
            await wire.send(writer, ack)  # the lease runs again
