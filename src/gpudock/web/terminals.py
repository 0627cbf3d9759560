"""The console's browser terminals: a login shell in an instance, over a WebSocket.

The shell runs through the exec path the SSH gateway uses (a `tty` exec stream,
resized through the runtime, audited in `ssh_sessions` with origin web), so it
behaves like `ssh <instance>`: a PTY, ^C is the terminal's own interrupt
character, and bytes pass unchanged both ways (UTF-8 is the browser's and the
shell's business; the shell gets `LANG=C.UTF-8` so that `ls` prints names as
they are).

A dropped socket does not end the shell. The shell outlives its socket for a
grace period (`GPUDOCK_TERMINAL_REATTACH_GRACE_S`), keeping its output flowing
into a bounded backlog; a page that reconnects with the session's token within
it reattaches to the same shell and gets the output it missed (from the byte
offset it says it has). Why reattach rather than start afresh: a browser link
drops for reasons nobody chose (Wi-Fi, a laptop lid, a proxy's idle cut), and a
training run started in the foreground must not die of it. The token is random,
known only to the tab that opened the shell, and only good for the same user
and instance; a second socket with it takes the shell over (the first is closed,
like `tmux attach -d`). Past the grace period the shell gets SIGHUP, as sshd
does when a connection drops. Shells live in this server process: behind a load
balancer, a reconnect that lands on another server starts a new shell.

Wire format: binary frames are terminal bytes both ways; text frames are JSON
control messages — from the page `{"type": "resize", "cols": C, "rows": R}` and
`{"type": "hangup"}` (its Close button: end the shell now);
to the page `attached` (its token, the offset replay starts at, whether it is
the same shell), `exit` (the shell's status) and `error` (a message to show).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocket, WebSocketDisconnect

from gpudock.db.models import SshSessionOrigin
from gpudock.errors import GpudockError
from gpudock.services.context import ServiceContext
from gpudock.services.rate_limits import RateGate
from gpudock.services.ssh import sessions as ssh_sessions
from gpudock.services.ssh.sessions import SESSION_MARKER_ENV, ExecStream, WebTerminalGrant

log = logging.getLogger(__name__)
T = TypeVar("T")

# The same login shell `ssh <instance>` gets (sshgw/commands.py): $HOME, bash if any.
LOGIN_SHELL = [
    "/bin/sh",
    "-c",
    'cd "$HOME" 2>/dev/null || cd /; if [ -x /bin/bash ]; then exec /bin/bash -l; fi; '
    "exec /bin/sh -l",
]
BACKLOG_BYTES = 256 * 1024  # output kept for a page that reconnects
READ_CHUNK = 64 * 1024
MAX_COLS, MAX_ROWS = 1000, 500
EXIT_POLL_DEADLINE_S = 5.0
CLOSE_REPLACED = 4001  # another socket took this shell over
CLOSE_ENDED = 4002  # the shell could not start, or it ended while nobody watched
SOCKET_ERRORS = (WebSocketDisconnect, RuntimeError, OSError)


@dataclass(frozen=True)
class TerminalSize:
    cols: int
    rows: int

    @classmethod
    def clamped(cls, cols: int, rows: int) -> TerminalSize:
        return cls(min(max(cols, 1), MAX_COLS), min(max(rows, 1), MAX_ROWS))


class TerminalSession:
    """One shell in an instance, with at most one socket attached at a time."""

    def __init__(
        self,
        hub: TerminalHub,
        grant: WebTerminalGrant,
        stream: ExecStream,
        marker: str,
        audit_id: int,
    ) -> None:
        self.token = secrets.token_urlsafe(24)
        self.grant = grant
        self.stream = stream
        self._hub = hub
        self._marker = marker
        self._audit_id = audit_id
        self._socket: WebSocket | None = None
        self._lock = asyncio.Lock()  # orders output and (re)attaching
        self._backlog = bytearray()
        self._sent = 0  # output bytes so far; the backlog holds the last of them
        self.bytes_in = 0
        self._writer: asyncio.StreamWriter | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self.ended = False

    async def start(self) -> None:
        reader, self._writer = await asyncio.open_connection(sock=self.stream.sock)
        if self.stream.initial:
            await self._output(self.stream.initial)
        self._hub.spawn(self._pump(reader))

    # -- process → page ------------------------------------------------------------------
    async def _pump(self, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(READ_CHUNK):
                await self._output(data)
        except OSError as exc:
            log.info("terminal %s: the exec stream failed: %s", self.grant.instance_id, exc)
        if not self.ended:
            status = await self._exit_status()
            await self.end("", exit_status=status)

    async def _output(self, data: bytes) -> None:
        for _stream, payload in self.stream.decoder.feed(data):
            async with self._lock:
                self._backlog += payload
                del self._backlog[:-BACKLOG_BYTES]
                self._sent += len(payload)
                socket = self._socket
                if socket is not None:
                    try:
                        await socket.send_bytes(payload)
                    except SOCKET_ERRORS:
                        self.detach(socket)

    async def _exit_status(self) -> int | None:
        """The shell's exit status, polled (with a deadline) until the engine has it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXIT_POLL_DEADLINE_S
        delay = 0.005
        while True:
            try:
                status = await self._hub.call(ssh_sessions.exit_code, self.stream.exec_id)
            except GpudockError as exc:
                log.warning("no exit status for exec %s: %s", self.stream.exec_id, exc.message)
                return None
            if status is not None or loop.time() > deadline:
                return status
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)

    # -- sockets ---------------------------------------------------------------------------
    async def attach(self, socket: WebSocket, offset: int, *, resumed: bool) -> None:
        """Make `socket` the one this shell talks to, replaying the output after `offset`
        (or all the backlog has, when the page has less or claims more)."""
        async with self._lock:
            previous, self._socket = self._socket, None
            if self._expiry is not None:
                self._expiry.cancel()
                self._expiry = None
            if previous is not None:
                with contextlib.suppress(*SOCKET_ERRORS):
                    await previous.close(CLOSE_REPLACED, "the terminal was opened elsewhere")
            oldest = self._sent - len(self._backlog)
            start = offset if oldest <= offset <= self._sent else oldest
            message = {"type": "attached", "session": self.token, "offset": start}
            await socket.send_text(json.dumps(message | {"resumed": resumed}))
            if start < self._sent:
                await socket.send_bytes(bytes(self._backlog[start - oldest :]))
            self._socket = socket

    def detach(self, socket: WebSocket) -> None:
        """`socket` went away (or never got attached): without a socket the shell
        waits for another one for the grace period."""
        if self._socket is socket:
            self._socket = None
        self._expire_later()

    def _expire_later(self) -> None:
        if self.ended or self._socket is not None or self._expiry is not None:
            return
        grace = self._hub.grace_s
        reason = f"the browser did not reconnect within {grace:g} s"
        self._expiry = asyncio.get_running_loop().call_later(
            grace, lambda: self._hub.spawn(self._expire(reason))
        )

    async def _expire(self, reason: str) -> None:
        self._expiry = None
        if self._socket is None:
            await self.end(reason, hang_up=True)

    # -- page → process --------------------------------------------------------------------
    async def write(self, data: bytes) -> None:
        writer = self._writer
        if self.ended or writer is None or writer.is_closing():
            return
        self.bytes_in += len(data)
        writer.write(data)
        await writer.drain()

    async def resize(self, size: TerminalSize) -> None:
        try:
            await self._hub.call(ssh_sessions.resize, self.stream.exec_id, size.cols, size.rows)
        except GpudockError as exc:  # a wrong size is no reason to end the session
            log.warning("could not resize terminal exec %s: %s", self.stream.exec_id, exc.message)

    # -- the end ---------------------------------------------------------------------------
    async def end(
        self, reason: str, *, exit_status: int | None = None, hang_up: bool = False
    ) -> None:
        """Close the shell's audit row and its socket; SIGHUP the shell if `hang_up`."""
        if self.ended:
            return
        self.ended = True
        self._hub.forget(self)
        if self._expiry is not None:
            self._expiry.cancel()
        if hang_up:
            await self._hub.best_effort(
                "hang up a terminal",
                ssh_sessions.signal,
                self.grant.instance_id,
                self._marker,
                "HUP",
            )
        if self._writer is not None:
            self._writer.close()
        await self._hub.best_effort(
            "close a terminal's audit row",
            ssh_sessions.close_session,
            self._audit_id,
            self.bytes_in,
            self._sent,
            reason,
        )
        async with self._lock:
            socket, self._socket = self._socket, None
        if socket is not None:
            with contextlib.suppress(*SOCKET_ERRORS):
                await socket.send_text(json.dumps({"type": "exit", "status": exit_status}))
                await socket.close(1000 if reason == "" else CLOSE_ENDED, reason[:120])


class TerminalHub:
    """Every browser terminal of this server process, by token."""

    def __init__(self, ctx: ServiceContext, grace_s: float, gate: RateGate | None) -> None:
        self.ctx = ctx
        self.grace_s = grace_s
        self.gate = gate
        self._sessions: dict[str, TerminalSession] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def open(
        self, grant: WebTerminalGrant, size: TerminalSize, client_address: str
    ) -> TerminalSession:
        """A new login shell of `size` in the instance; InstanceNotRunning (with what to
        do) when no container backs it now."""
        marker = secrets.token_hex(8)
        env = {
            "TERM": "xterm-256color",
            "COLORTERM": "truecolor",
            "LANG": "C.UTF-8",
            SESSION_MARKER_ENV: marker,
        }
        stream = await self.call(
            ssh_sessions.open_stream, grant.instance_id, LOGIN_SHELL, tty=True, env=env
        )
        try:  # before any input: the shell reads its size at once
            await self.call(ssh_sessions.resize, stream.exec_id, size.cols, size.rows)
            audit_id = await self.call(ssh_sessions.open_web_session, grant, client_address)
        except BaseException:
            stream.sock.close()
            await self.best_effort(
                "hang up a terminal", ssh_sessions.signal, grant.instance_id, marker, "HUP"
            )
            raise
        session = TerminalSession(self, grant, stream, marker, audit_id)
        self._sessions[session.token] = session
        await session.start()
        return session

    def find(self, token: str, grant: WebTerminalGrant) -> TerminalSession | None:
        """The live shell `token` names, if the same user opened it on the same instance."""
        found = self._sessions.get(token) if token else None
        if found is None or found.ended:
            return None
        if (found.grant.user_id, found.grant.instance_id) != (grant.user_id, grant.instance_id):
            return None
        return found

    def forget(self, session: TerminalSession) -> None:
        self._sessions.pop(session.token, None)

    @property
    def live(self) -> int:
        return len(self._sessions)

    async def start(self) -> None:
        closed = await self.call(ssh_sessions.close_abandoned_sessions, SshSessionOrigin.WEB)
        if closed:
            log.warning("closed %d console terminal records left open by a stopped server", closed)

    async def stop(self) -> None:
        """Hang up every shell (the server is stopping: nobody can reconnect to them)."""
        for session in list(self._sessions.values()):
            await session.end("the server stopped", hang_up=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- plumbing --------------------------------------------------------------------------
    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking service call, off the event loop."""
        return await run_in_threadpool(function, self.ctx, *args, **kwargs)

    async def best_effort(self, what: str, function: Callable[..., Any], *args: Any) -> None:
        try:
            await self.call(function, *args)
        except GpudockError as exc:
            log.warning("could not %s: %s", what, exc.message)

    def spawn(self, coroutine: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("console terminal task failed", exc_info=task.exception())


@dataclass(frozen=True)
class TerminalRequest:
    """What the page asks for when its socket opens: a size, and the shell to
    reattach to (its token and how many output bytes the page already has)."""

    size: TerminalSize
    token: str
    offset: int


async def serve(
    hub: TerminalHub,
    socket: WebSocket,
    grant: WebTerminalGrant,
    request: TerminalRequest,
    client_address: str,
) -> None:
    """Run an accepted socket: reattach to its shell or open one, then relay the page's
    input until the socket closes (the shell outlives it for the grace period)."""
    session = hub.find(request.token, grant)
    resumed = session is not None
    if session is None:
        try:
            session = await hub.open(grant, request.size, client_address)
        except GpudockError as exc:
            with contextlib.suppress(*SOCKET_ERRORS):
                await socket.send_text(json.dumps({"type": "error", "message": exc.message}))
                await socket.close(CLOSE_ENDED, exc.message[:120])
            return
    try:
        await session.attach(socket, request.offset, resumed=resumed)
        if resumed:  # the page may have changed size while it was away
            await session.resize(request.size)
        await _relay(socket, session)
    except SOCKET_ERRORS:
        pass
    finally:
        session.detach(socket)


async def _relay(socket: WebSocket, session: TerminalSession) -> None:
    while True:
        message = await socket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes"):
            await session.write(message["bytes"])
        elif message.get("text"):
            await _control(session, message["text"])


async def _control(session: TerminalSession, text: str) -> None:
    try:
        message = json.loads(text)
    except ValueError:
        return  # not ours: ignored, like an unknown escape sequence
    if not isinstance(message, dict):
        return
    if message.get("type") == "resize":
        cols, rows = message.get("cols"), message.get("rows")
        if isinstance(cols, int) and isinstance(rows, int):
            await session.resize(TerminalSize.clamped(cols, rows))
    elif message.get("type") == "hangup":  # the page's Close button: no grace period
        await session.end("closed from the console", hang_up=True)
