"""Exec streams over the link, the server's end: one SSH channel per exec.

`ExecChannels.open` asks the agent for an exec channel (`agent.streams`: the
request in the exec command, a pty request for a terminal), reads its first
line (the exec's id, or the engine's error raised as its class), and hands
the caller what every runtime hands out for an exec: an `ExecStream` on a
plain socket. The other end of that socket pair is relayed to the channel
here, on the gateway's loop: what the caller writes is the process's stdin
(its `shutdown(SHUT_WR)` the stdin's end), the channel's stdout comes back on
`sock` and its stderr on `err_sock` (one stream with a terminal). The exit
status the agent sends is the exec's exit code; a window change the caller
asks for (`resize`) goes as SSH's own window-change request.

Exec ids over the link are `link:<host id>:<the agent's exec id>`, so that
`HostRuntimes.for_exec` finds the host a resize or an exit code is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import OrderedDict
from dataclasses import dataclass, field

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import ExecStream, RawOutput
from gpudock.runtime.calls import EXEC_COMMAND, CallError, ExecOpened, ExecRequest, error_for
from gpudock.runtime.link import exec_id_on

log = logging.getLogger(__name__)
CHUNK = 1 << 18  # up to one link packet (link.tuning) per read
TERMINAL = "xterm-256color"
LOST = 255  # the exit code of an exec whose channel closed without one
ENDED_KEPT = 256  # exit codes kept after they were first read (a caller may ask again)


@dataclass
class _Exec:
    process: asyncssh.SSHClientProcess[bytes]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class ExecChannels:
    """The exec channels on one link (used on the gateway's loop, but for
    `exit_code`, which only reads)."""

    def __init__(self, conn: asyncssh.SSHClientConnection, host_id: str, host_name: str) -> None:
        self._conn = conn
        self._host_id = host_id
        self._host_name = host_name
        self._open: dict[str, _Exec] = {}
        self._ended: OrderedDict[str, int] = OrderedDict()

    @property
    def connection(self) -> asyncssh.SSHClientConnection:
        return self._conn

    async def open(self, request: ExecRequest, timeout_s: float) -> ExecStream:
        process = await self._conn.create_process(
            EXEC_COMMAND + request.model_dump_json(),
            term_type=TERMINAL if request.tty else None,
            term_size=(80, 24) if request.tty else None,
            encoding=None,
        )
        try:
            opened = ExecOpened.model_validate_json(
                await asyncio.wait_for(process.stdout.readuntil(b"\n"), timeout_s)
            )
        except (asyncio.IncompleteReadError, TimeoutError, ValidationError) as exc:
            process.close()
            raise RuntimeFailure(
                f"host {self._host_name}: the agent did not start the exec ({exc})"
            ) from exc
        if opened.exec_id is None:
            process.close()
            raise error_for(CallError(code=opened.code or "", message=opened.message))
        exec_id = exec_id_on(self._host_id, opened.exec_id)
        ours, pump = socket.socketpair()
        err_ours = err_pump = None
        if not request.tty:
            err_ours, err_pump = socket.socketpair()
            err_ours.setblocking(False)
            err_pump.setblocking(False)
        ours.setblocking(False)
        pump.setblocking(False)
        relay = _Exec(process)
        loop = asyncio.get_running_loop()
        relay.tasks = [
            loop.create_task(_to_socket(process.stdout, pump, shut=True)),
            loop.create_task(_to_process(pump, process)),
        ]
        if err_pump is not None:
            relay.tasks.append(loop.create_task(_to_socket(process.stderr, err_pump, shut=False)))
        self._open[exec_id] = relay
        return ExecStream(
            exec_id=exec_id,
            sock=ours,
            initial=b"",
            decoder=RawOutput(),
            tty=request.tty,
            err_sock=err_ours,
        )

    def resize(self, exec_id: str, width: int, height: int) -> None:
        relay = self._open.get(exec_id)
        if relay is not None:
            with contextlib.suppress(asyncssh.Error, OSError):
                relay.process.change_terminal_size(width, height)

    def exit_code(self, exec_id: str) -> int | None:
        if exec_id in self._ended:
            return self._ended[exec_id]
        relay = self._open.get(exec_id)
        if relay is None:
            return LOST
        status = relay.process.exit_status
        if status is None and relay.process.channel.is_closing():
            status = LOST  # the link or the agent went before the process ended
        if status is not None:
            self._open.pop(exec_id, None)
            self._ended[exec_id] = status
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
        return status

    def close(self) -> None:
        for relay in self._open.values():
            relay.process.close()


async def _to_socket(reader: asyncssh.SSHReader[bytes], sock: socket.socket, *, shut: bool) -> None:
    """A channel's output onto the caller's socket pair, then end of file on it."""
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(CHUNK):
            await loop.sock_sendall(sock, data)
    except (asyncssh.Error, OSError) as exc:
        log.debug("exec output relay ended: %s", exc)
    finally:
        if shut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        else:
            sock.close()


async def _to_process(sock: socket.socket, process: asyncssh.SSHClientProcess[bytes]) -> None:
    """What the caller writes, to the process's stdin; its EOF closes the stdin,
    its closing the socket detaches (the channel closes, the process may run on)."""
    loop = asyncio.get_running_loop()
    try:
        while data := await loop.sock_recv(sock, CHUNK):
            process.stdin.write(data)
            await process.stdin.drain()
        process.stdin.write_eof()
    except (asyncssh.Error, OSError) as exc:
        log.debug("exec input relay ended: %s", exc)
        process.close()
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await process.wait_closed()
        sock.close()
