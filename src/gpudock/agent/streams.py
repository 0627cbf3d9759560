"""Exec streams over the link, the agent's end: one SSH channel per exec.

The server opens a session channel on the link whose exec request is
`gpudock-exec <JSON>` (`runtime.calls.ExecRequest`: the container, the
command, its env, whether it has a terminal, and the instance's scope) and,
for a terminal, a pty request with its size. The agent starts the process
through its engine (`Runtime.open_exec_stream`) and answers one JSON line on
stdout (`ExecOpened`: its exec id, or the error); after that line the
channel's stdout and stderr are the process's own, its stdin the process's
stdin (EOF closes it), a window change resizes the terminal, and the exit
status is the process's exit code. SSH's per-channel flow control carries
the bytes; nothing else is framed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import STDERR, ExecStream, Runtime
from gpudock.runtime.calls import EXEC_COMMAND, ExecOpened, ExecRequest, InstanceScope

log = logging.getLogger(__name__)
CHUNK = 1 << 18  # up to one link packet (link.tuning) per read
EXIT_CODE_DEADLINE_S = 10.0  # after the output ended, for the engine to say the exit code
LOST = 255  # the exit status when the engine cannot tell


async def serve_exec(
    runtime: Runtime,
    process: asyncssh.SSHServerProcess[bytes],
    admit: Callable[[InstanceScope], None],
) -> None:
    """One exec, from its request to its exit status."""
    try:
        request = ExecRequest.model_validate_json(str(process.command)[len(EXEC_COMMAND) :])
        if request.scope is not None:
            admit(request.scope)
        stream = await asyncio.to_thread(
            runtime.open_exec_stream,
            request.container_id,
            request.command,
            tty=request.tty,
            env=request.env,
        )
    except RuntimeFailure as exc:
        await _answer(process, ExecOpened(code=exc.code, message=exc.message))
        process.exit(LOST)
        return
    except ValidationError as exc:
        await _answer(process, ExecOpened(code="runtime_failure", message=str(exc)))
        process.exit(LOST)
        return
    await _answer(process, ExecOpened(exec_id=stream.exec_id))
    size = process.term_size
    if request.tty and size[0] and size[1]:
        await asyncio.to_thread(runtime.resize_exec, stream.exec_id, size[0], size[1])
    await _relay(runtime, process, stream)


async def _answer(process: asyncssh.SSHServerProcess[bytes], opened: ExecOpened) -> None:
    process.stdout.write(opened.model_dump_json().encode() + b"\n")
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()


async def _relay(
    runtime: Runtime, process: asyncssh.SSHServerProcess[bytes], stream: ExecStream
) -> None:
    inbound = asyncio.ensure_future(_stdin_to_process(runtime, process, stream))
    try:
        outputs = [_output(process, stream.sock, stream)]
        if stream.err_sock is not None:
            outputs.append(_output(process, stream.err_sock, None))
        await asyncio.gather(*outputs)
    finally:
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await inbound
        stream.sock.close()
        if stream.err_sock is not None:
            stream.err_sock.close()
    code = await asyncio.to_thread(_exit_code, runtime, stream.exec_id)
    process.exit(code)


async def _output(
    process: asyncssh.SSHServerProcess[bytes], sock: socket.socket, framed: ExecStream | None
) -> None:
    """One output socket to the channel: `framed` decodes the engine's framing
    (stdout and stderr on one socket); without it, all of it is stderr."""
    loop = asyncio.get_running_loop()
    pending = framed.initial if framed is not None else b""
    while True:
        data = pending or await loop.sock_recv(sock, CHUNK)
        pending = b""
        if not data:
            return
        pieces = framed.decoder.feed(data) if framed is not None else [(STDERR, data)]
        for kind, payload in pieces:
            (process.stderr if kind == STDERR else process.stdout).write(payload)
        try:
            await process.stdout.drain()
        except (asyncssh.Error, OSError):
            return


async def _stdin_to_process(
    runtime: Runtime, process: asyncssh.SSHServerProcess[bytes], stream: ExecStream
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            data = await process.stdin.read(CHUNK)
        except asyncssh.TerminalSizeChanged as change:
            await asyncio.to_thread(
                runtime.resize_exec, stream.exec_id, change.width, change.height
            )
            continue
        except (asyncssh.Error, OSError):
            return
        if not data:
            with contextlib.suppress(OSError):
                stream.sock.shutdown(socket.SHUT_WR)
            return
        await loop.sock_sendall(stream.sock, data)


def _exit_code(runtime: Runtime, exec_id: str) -> int:
    """Blocking: the engine records the code a moment after the output ends."""
    deadline = time.monotonic() + EXIT_CODE_DEADLINE_S
    delay = 0.01
    while True:
        try:
            code = runtime.exec_exit_code(exec_id)
        except RuntimeFailure:
            return LOST
        if code is not None:
            return code
        if time.monotonic() > deadline:
            return LOST
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
