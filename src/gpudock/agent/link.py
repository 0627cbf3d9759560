"""The agent's end of the link: dial out, be the SSH server, report, redial.

`asyncssh.connect_reverse` opens the TCP connection to the server and runs an
SSH *server* on it, so the host needs no open port; the server, as the SSH
client, authenticates with its link key, which must match what this agent
pins (the fingerprint in its join token, then the key itself). Only then is
the session opened on which the agent says hello — with the join token's
secret the first time — and, once welcomed, sends a heartbeat every
`heartbeat_s` seconds.

A dropped link is dialled again after an exponential backoff (0.5 s doubling
to 30 s, with jitter, back to 0.5 s after a welcome). A refusal (bad, used or
expired token, a removed host) or a server key that does not match ends the
agent with a message saying what to do: retrying cannot change either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from gpudock.agent import image_copy, ports, streams, volume_copy
from gpudock.agent.commands import CommandServer, Generations
from gpudock.agent.fencing import Fence
from gpudock.agent.health import HealthWatcher
from gpudock.agent.inventory import HostInventory
from gpudock.agent.state import Enrollment, LinkAddress, agent_key, save_enrollment
from gpudock.link import keys, tuning, wire
from gpudock.link.tokens import JoinToken
from gpudock.runtime import calls
from gpudock.runtime.link_ports import PORT_COMMAND

log = logging.getLogger(__name__)
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
LOGIN_TIMEOUT_S = 15.0


class AgentStopped(Exception):
    """The server refused this agent, or proved another key: `message` says what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class _Pin:
    """The server key this agent accepts: a whole key once enrolled, else a fingerprint."""

    key: str | None = None
    fingerprint: str | None = None
    proven: str | None = None  # the key the server proved, in public_text form
    refused: str | None = None  # the fingerprint of one it offered that did not match

    def accepts(self, key: asyncssh.SSHKey) -> bool:
        text = keys.public_text(key)
        ok = text == self.key if self.key is not None else keys.fingerprint(key) == self.fingerprint
        if ok:
            self.proven = text
        else:
            self.refused = keys.fingerprint(key)
        return ok


class _AgentSshServer(asyncssh.SSHServer):
    def __init__(self, pin: _Pin, outcome: _Outcome) -> None:
        self._pin = pin
        self._outcome = outcome

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._outcome.conn = conn  # so that a stop during the handshake closes it too

    def begin_auth(self, username: str) -> bool:
        return True  # no one is let in without proving the pinned key

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == wire.LINK_USERNAME and self._pin.accepts(key)


@dataclass
class Agent:
    state_dir: Path
    inventory: HostInventory
    link: LinkAddress
    pin: _Pin
    join: JoinToken | None = None
    host_name: str = ""
    on_welcome: Callable[[str], None] = field(default=lambda _name: None)
    fence: Fence | None = None  # stops the tenants when the server's lease runs out
    commands: CommandServer | None = None
    health: HealthWatcher | None = None  # journals NVML's faults; heartbeats deliver them
    generations: Generations = field(init=False)
    _health_news: asyncio.Event = field(init=False, default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.generations = Generations(self.state_dir)
        if self.commands is None:
            self.commands = CommandServer(self.inventory.runtime, self.generations)

    def _admit(self, scope: calls.InstanceScope) -> None:
        self.generations.admit(scope)

    @classmethod
    def joining(cls, state_dir: Path, inventory: HostInventory, url: str, token: str) -> Agent:
        parsed = JoinToken.parse(token)
        pin = _Pin(fingerprint=parsed.server_fingerprint)
        return cls(state_dir, inventory, LinkAddress.parse(url), pin, join=parsed)

    @classmethod
    def enrolled(cls, state_dir: Path, inventory: HostInventory, enrollment: Enrollment) -> Agent:
        pin = _Pin(key=enrollment.server_key)
        return cls(state_dir, inventory, enrollment.link, pin, host_name=enrollment.host_name)

    async def run(self) -> None:
        """Keep the link up until stopped; raises `AgentStopped` when retrying is useless."""
        watching = [asyncio.ensure_future(self.fence.watch())] if self.fence else []
        if self.health is not None:
            watching.append(asyncio.ensure_future(self.health.watch(self._health_news.set)))
        try:
            await self._keep_linked()
        finally:
            for watch in watching:
                watch.cancel()

    async def _keep_linked(self) -> None:
        delay = BACKOFF_FIRST_S
        while True:
            welcomed = await self._one_link()
            if welcomed:
                delay = BACKOFF_FIRST_S
            pause = delay * random.uniform(0.8, 1.2)  # noqa: S311 (jitter, not a secret)
            log.info("redialling %s in %.1f s", self.link, pause)
            await asyncio.sleep(pause)
            delay = min(delay * 2, BACKOFF_MAX_S)

    async def _one_link(self) -> bool:
        """One connection, from dial to drop; True if the server welcomed us on it."""
        outcome = _Outcome()
        try:
            conn = await asyncssh.connect_reverse(
                self.link.host,
                self.link.port,
                server_factory=lambda: _AgentSshServer(self.pin, outcome),
                server_host_keys=[agent_key(self.state_dir)],
                process_factory=lambda process: self._converse(process, outcome),
                encoding=None,
                config=None,
                password_auth=False,
                kbdint_auth=False,
                gss_host=None,
                allow_pty=True,  # exec channels' terminals: a size, no local pty
                line_editor=False,
                agent_forwarding=False,
                x11_forwarding=False,
                login_timeout=LOGIN_TIMEOUT_S,
                keepalive_interval=LOGIN_TIMEOUT_S,
                keepalive_count_max=3,
                **tuning.connection_options(),
            )
            with contextlib.suppress(asyncssh.Error, OSError):
                await conn.wait_closed()
        except (OSError, asyncssh.Error) as exc:
            self._check_pin()
            log.warning("cannot reach the server at %s: %s", self.link, exc)
            return False
        finally:
            if outcome.conn is not None:  # stopped (SIGTERM): the server sees the link go now
                outcome.conn.close()
        self._check_pin()
        if outcome.refused is not None:
            raise AgentStopped(f"the server refused this agent: {outcome.refused}")
        log.warning("the link to %s dropped", self.link)
        return outcome.welcomed

    def _check_pin(self) -> None:
        if self.pin.refused is not None and self.pin.proven is None:
            raise AgentStopped(
                f"the server at {self.link} proved key SHA256 {self.pin.refused}, not the one "
                "this agent pins: check the URL, or ask for a new join command"
            )

    async def _converse(self, process: asyncssh.SSHServerProcess[bytes], outcome: _Outcome) -> None:
        # Only the server, which proved the pinned key, can open a channel at all.
        if process.subsystem == wire.SUBSYSTEM:
            await self._link_session(process, outcome)
            return
        what = (process.command or process.subsystem or "")[:80]
        try:
            await self._serve_channel(process)
        # asyncssh closes the whole connection on an error a channel's handler lets
        # out: one failed copy or exec must not take the host's link (every other
        # session on it, and its heartbeats) down with it.
        except (asyncssh.Error, OSError) as exc:
            log.warning("a link channel ended early (%s): %s", what, exc)
        except Exception:
            log.exception("a link channel failed (%s)", what)
        else:
            return
        with contextlib.suppress(Exception):
            process.exit(1)

    async def _serve_channel(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        if process.subsystem == calls.SUBSYSTEM and self.commands is not None:
            await self.commands.serve(process)
            return
        if (process.command or "").startswith(calls.EXEC_COMMAND):
            await streams.serve_exec(self.inventory.runtime, process, self._admit)
            return
        if (process.command or "").startswith(PORT_COMMAND):
            await ports.serve_port(self.inventory.runtime, process, self._admit)
            return
        spool = self.state_dir / "transfers"  # what a copy holds on this host's disk
        if image_copy.handles(process.command or ""):
            await image_copy.serve(self.inventory.runtime, process, self._admit, spool)
            return
        if volume_copy.handles(process.command or ""):
            await volume_copy.serve(self.inventory.runtime, process, self._admit, spool)
            return
        process.exit(1)

    async def _link_session(
        self, process: asyncssh.SSHServerProcess[bytes], outcome: _Outcome
    ) -> None:
        conn = process.channel.get_connection()  # gone from the channel once it closed
        try:
            hello = wire.Hello(report=await self._report(), join=self._join_request())
            await wire.send(process.stdout, hello)
            answer = await wire.receive(process.stdin, LOGIN_TIMEOUT_S)
            if isinstance(answer, wire.Refused):
                outcome.refused = answer.message
                return
            if not isinstance(answer, wire.Welcome):
                raise wire.LinkClosed(f"expected welcome, got {answer.type}")
            self._welcomed(answer)
            outcome.welcomed = True
            await self._beat(process, answer.heartbeat_s, outcome)
        except wire.LinkClosed as exc:
            log.warning("link session ended: %s", exc)
        finally:
            process.close()
            conn.close()

    def _join_request(self) -> wire.JoinRequest | None:
        if self.join is None:
            return None
        return wire.JoinRequest(token_id=self.join.token_id, secret=self.join.secret)

    def _welcomed(self, welcome: wire.Welcome) -> None:
        if self.join is not None:
            assert self.pin.proven is not None, "welcomed over a link that proved no key"
            save_enrollment(
                self.state_dir, Enrollment(self.link, self.pin.proven, welcome.host_name)
            )
            self.pin = _Pin(key=self.pin.proven, proven=self.pin.proven)
            self.join = None
        self.host_name = welcome.host_name
        if self.fence is not None:
            self.fence.renew(welcome.lease_s)
        log.info("linked to %s as host %s", self.link, welcome.host_name)
        self.on_welcome(welcome.host_name)

    async def _beat(
        self, process: asyncssh.SSHServerProcess[bytes], every_s: float, outcome: _Outcome
    ) -> None:
        """Heartbeats out and their acknowledgements in (each renews the lease), until
        the link ends or the server refuses us. A fault NVML reported goes out at
        once, in a heartbeat of its own, rather than at the next beat."""
        listening = asyncio.ensure_future(wire.receive(process.stdin))
        if self.health is not None and self.health.journal.pending():
            self._health_news.set()  # journaled while the link was down
        try:
            while True:
                news = asyncio.ensure_future(self._health_news.wait())
                done, _ = await asyncio.wait(
                    {listening, news}, timeout=every_s, return_when=asyncio.FIRST_COMPLETED
                )
                news.cancel()
                if listening not in done:
                    self._health_news.clear()
                    await wire.send(process.stdout, await self._heartbeat())
                    continue
                answer = listening.result()
                if not isinstance(answer, wire.Ack):
                    if isinstance(answer, wire.Refused):
                        outcome.refused = answer.message
                    return
                if self.fence is not None:
                    self.fence.renew(answer.lease_s)
                if self.health is not None and await asyncio.to_thread(
                    self.health.journal.acknowledge, answer.health_through
                ):
                    self._health_news.set()
                listening = asyncio.ensure_future(wire.receive(process.stdin))
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError, wire.LinkClosed):
                await listening

    async def _heartbeat(self) -> wire.Heartbeat:
        health = self.health.journal.pending() if self.health is not None else []
        return wire.Heartbeat(report=await self._report(), health=health)

    async def _report(self) -> wire.HostReport:
        return await asyncio.to_thread(self.inventory.report)


@dataclass
class _Outcome:
    welcomed: bool = False
    refused: str | None = None
    conn: asyncssh.SSHServerConnection | None = None
