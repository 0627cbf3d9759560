"""One SSH session channel (shell, exec or sftp) bridged to a process in the instance.

The container is looked up when the channel starts, so a session always lands
in whatever container backs the instance now (after a stop/start or a move).
A stopped instance gets a one-line explanation on stderr and exit status 1.
"""

from __future__ import annotations

import logging
import re
import secrets

import asyncssh

from gpudock.errors import GpudockError
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.sessions import SESSION_MARKER_ENV, STDERR, InstanceNotRunning
from gpudock.sshgw import commands
from gpudock.sshgw.bridge import BUFFER_HIGH, Bridge, open_bridge
from gpudock.sshgw.ports import Connection

log = logging.getLogger(__name__)
MAX_HELD_INPUT = 1 << 20
ACCEPTED_ENV = re.compile(r"LANG|LANGUAGE|LC_[A-Z]+|COLORTERM")  # sshd's usual AcceptEnv
EXIT_GATEWAY_FAILURE = 255  # what ssh itself returns when the session cannot start


def _unproven_notice(grant: ssh_sessions.Grant) -> str:
    return (
        f"gpudock: the key {grant.fingerprint} is registered to {grant.user_name} but was "
        "never proven to be theirs; prove it with `gpudock keys add PATH` (its private key) "
        "before the server stops accepting unproven keys.\r\n"
    )


class ExecSession(asyncssh.SSHServerSession[bytes]):
    def __init__(self, conn: Connection, channel: asyncssh.SSHServerChannel[bytes]) -> None:
        self._conn = conn
        self._chan = channel
        self._argv: list[str] | None = None
        self._term: tuple[str, int, int] | None = None
        self._bridge: Bridge | None = None
        # Input waits while the process starts and while a window change is
        # applied, so that the process sees both in the order the client sent them.
        self._held: list[bytes] = []
        self._held_eof = False
        self._holds = 1
        self._closed = False
        self.marker = secrets.token_hex(8)
        _audit_refused_requests(channel, conn)

    # -- what the client asks for ---------------------------------------------------------
    def pty_requested(
        self, term_type: str, term_size: tuple[int, int, int, int], term_modes: object
    ) -> bool:
        self._term = (term_type or "xterm", term_size[0] or 80, term_size[1] or 24)
        return True

    def shell_requested(self) -> bool:
        self._argv = commands.login_shell()
        return True

    def exec_requested(self, command: str) -> bool:
        self._argv = commands.run_command(command)
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        if subsystem != "sftp":
            self._conn.refuse(f"subsystem {subsystem[:64]!r} refused (only sftp)")
            return False
        self._argv = commands.sftp_server()
        return True

    def session_started(self) -> None:
        self._chan.set_write_buffer_limits(high=BUFFER_HIGH)
        self._conn.gateway.spawn(self._start())

    # -- starting the process ----------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in self._chan.get_environment().items() if ACCEPTED_ENV.fullmatch(k)}
        peer, local = self._conn.peer_and_local()
        env["SSH_CLIENT"] = f"{peer} {local.split()[1]}"
        env["SSH_CONNECTION"] = f"{peer} {local}"
        env[SESSION_MARKER_ENV] = self.marker
        if self._term is not None:
            env["TERM"] = self._term[0]
        return env

    async def _start(self) -> None:
        assert self._argv is not None and self._conn.grant is not None
        gateway = self._conn.gateway
        if self._term is not None and not self._conn.grant.key_verified:
            # Only on terminals: a script's stderr stays the instance's own. The
            # reader holds the private key (it just authenticated), so naming
            # the account tells them nothing they may not know.
            self._chan.write_stderr(_unproven_notice(self._conn.grant).encode())
        try:
            stream = await gateway.call(
                ssh_sessions.open_stream,
                gateway.ctx,
                self._conn.grant.instance_id,
                self._argv,
                tty=self._term is not None,
                env=self._env(),
            )
        except InstanceNotRunning as exc:
            self._fail(exc.message, 1)
            return
        except GpudockError as exc:
            log.warning("ssh session into %s failed: %s", self._conn.grant.instance_id, exc)
            self._fail(f"gpudock: cannot start the session: {exc.message}", EXIT_GATEWAY_FAILURE)
            return
        if self._term is not None:  # before any input: the shell reads its size at once
            await self._resize(stream.exec_id, self._term[1], self._term[2])
        self._bridge = await open_bridge(stream, self)
        if self._closed:  # the client went away while the process started
            self._hang_up()
            return
        self._release_input()

    def _release_input(self) -> None:
        self._holds -= 1
        if self._holds or self._bridge is None:
            return
        for data in self._held:
            self._bridge.write(data)
        self._held.clear()
        if self._held_eof:
            self._held_eof = False
            self._bridge.write_eof()
        self._chan.resume_reading()

    def _fail(self, message: str, status: int) -> None:
        if self._closed:
            return
        newline = b"\r\n" if self._term is not None else b"\n"
        self._chan.write_stderr(message.encode() + newline)
        self._chan.exit(status)

    # -- client → process ------------------------------------------------------------------
    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._conn.bytes_in += len(data)
        if not self._holds and self._bridge is not None:
            self._bridge.write(data)
            return
        self._held.append(data)
        if sum(map(len, self._held)) > MAX_HELD_INPUT:
            self._chan.pause_reading()

    def eof_received(self) -> bool:
        if not self._holds and self._bridge is not None:
            self._bridge.write_eof()
        else:
            self._held_eof = True
        return True  # keep the channel open for the process's output

    def terminal_size_changed(self, width: int, height: int, pixwidth: int, pixheight: int) -> None:
        if self._term is not None:
            self._term = (self._term[0], width, height)
            if self._bridge is not None:
                self._holds += 1
                self._conn.gateway.spawn(self._resize_then_release(width, height))

    def signal_received(self, signal: str) -> None:
        if self._conn.grant is not None and signal.isalnum():
            self._conn.gateway.spawn(self._signal(signal.upper()))

    def break_received(self, msec: int) -> bool:
        return False

    def pause_writing(self) -> None:
        if self._bridge is not None:
            self._bridge.pause_reading()

    def resume_writing(self) -> None:
        if self._bridge is not None:
            self._bridge.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._bridge is not None and not self._bridge.ended:
            self._hang_up()

    def _hang_up(self) -> None:
        """The client left while the process runs: detach and send SIGHUP, like
        sshd closing the terminal."""
        assert self._bridge is not None
        self._bridge.close()
        self._conn.gateway.spawn(self._signal("HUP"))

    async def _resize_then_release(self, width: int, height: int) -> None:
        assert self._bridge is not None
        try:
            await self._resize(self._bridge.stream.exec_id, width, height)
        finally:
            self._release_input()

    async def _resize(self, exec_id: str, width: int, height: int) -> None:
        gateway = self._conn.gateway
        try:
            await gateway.call(ssh_sessions.resize, gateway.ctx, exec_id, width, height)
        except GpudockError as exc:  # a wrong size is no reason to end the session
            log.warning("could not resize the terminal of exec %s: %s", exec_id, exc.message)

    async def _signal(self, name: str) -> None:
        assert self._conn.grant is not None
        await self._conn.gateway.best_effort(
            f"send SIG{name} to a session",
            ssh_sessions.signal,
            self._conn.grant.instance_id,
            self.marker,
            name,
        )

    # -- process → client (Sink) -----------------------------------------------------------
    def output(self, stream: int, data: bytes) -> None:
        if self._closed:
            return
        self._conn.bytes_out += len(data)
        if stream == STDERR:
            self._chan.write_stderr(data)
        else:
            self._chan.write(data)

    def output_ended(self) -> None:
        if not self._closed:
            self._conn.gateway.spawn(self._exit())

    def pause_input(self) -> None:
        self._chan.pause_reading()

    def resume_input(self) -> None:
        self._chan.resume_reading()

    async def _exit(self) -> None:
        assert self._bridge is not None
        status = await self._conn.gateway.exit_code(self._bridge.stream.exec_id)
        if not self._closed:
            self._chan.exit(EXIT_GATEWAY_FAILURE if status is None else status)


def _audit_refused_requests(channel: asyncssh.SSHServerChannel[bytes], conn: Connection) -> None:
    """Refuse agent and X11 forwarding *and audit them*.

    asyncssh refuses both when the server disables them, but tells the
    application nothing. Its channel dispatches requests to
    `_process_<name>_request` methods looked up on the instance, so these
    replace two of them for this channel only (tests/sshgw cover both).
    """

    def agent(_packet: object) -> bool:
        conn.refuse("agent forwarding refused: the gateway never forwards ssh-agent")
        return False

    def x11(_packet: object) -> bool:
        conn.refuse("X11 forwarding refused")
        return False

    setattr(channel, "_process_auth_agent_req_at_openssh_dot_com_request", agent)  # noqa: B010
    setattr(channel, "_process_x11_req_request", x11)  # noqa: B010
