"""A data volume to or from another host, the agent's ends (`runtime.transfer`),
over the framed, resumable stream of `agent.framed`.

Sending: tar the volume's directory (sparse, sorted: an untouched volume gives
the same bytes each time, so a resumed send skips what the destination holds).
Receiving: unpack into the volume as the frames land. The volume's container is
stopped while this runs (the server stops it before it moves the data), so its
contents do not change under the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

import asyncssh
from pydantic import ValidationError

from gpudock.agent import framed
from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import Runtime
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.transfer import (
    RECEIVE_COMMAND,
    SEND_COMMAND,
    VolumeReceive,
    VolumeSend,
)

log = logging.getLogger(__name__)
TAR = ["tar", "--sparse", "--sort=name", "--numeric-owner", "--format=gnu"]


@runtime_checkable
class VolumeDirectories(Protocol):
    def volume_directory(self, name: str) -> Path:
        """Where the volume's contents lie on this host (`RuntimeFailure` if none)."""
        ...


def handles(command: str) -> bool:
    return command.startswith((SEND_COMMAND, RECEIVE_COMMAND))


async def serve(
    runtime: Runtime,
    process: asyncssh.SSHServerProcess[bytes],
    admit: Callable[[InstanceScope], None],
    spool_dir: Path,
) -> None:
    command = str(process.command)
    sending = command.startswith(SEND_COMMAND)
    try:
        if not isinstance(runtime, VolumeDirectories):
            raise RuntimeFailure("this agent's engine cannot hand out volume directories")
        if sending:
            send = VolumeSend.model_validate_json(command[len(SEND_COMMAND) :])
            if send.scope is not None:
                admit(send.scope)
            await _send(runtime, send, process)
        else:
            receive = VolumeReceive.model_validate_json(command[len(RECEIVE_COMMAND) :])
            if receive.scope is not None:
                admit(receive.scope)
            await _receive(runtime, receive, process, spool_dir)
    except (RuntimeFailure, ValidationError, OSError) as exc:
        await framed.failed(process, sending, "volume", exc)


async def _send(
    runtime: VolumeDirectories, request: VolumeSend, process: asyncssh.SSHServerProcess[bytes]
) -> None:
    directory = await asyncio.to_thread(runtime.volume_directory, request.volume)
    tar = subprocess.Popen(
        [*TAR, "-C", str(directory), "-cf", "-", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tar.stdout is not None and tar.stderr is not None
    try:
        sent = await framed.send_stream(process, tar.stdout, request.resume_at, tar.kill)
    finally:
        await asyncio.to_thread(tar.wait)
    if sent is None:
        return
    errors = tar.stderr.read()
    if tar.returncode != 0:
        raise RuntimeFailure(f"tar of volume {request.volume} failed: {errors.decode()[-300:]}")
    await framed.end_stream(process, *sent)


async def _receive(
    runtime: VolumeDirectories,
    request: VolumeReceive,
    process: asyncssh.SSHServerProcess[bytes],
    spool_dir: Path,
) -> None:
    directory = await asyncio.to_thread(runtime.volume_directory, request.volume)
    await framed.receive_stream(
        process,
        spool_dir / f"{request.volume}.tar.part",
        lambda: _Unpacker(directory),
        f"volume {request.volume}",
    )


class _Unpacker:
    """`tar -x` into the volume, fed the stream as it lands, so the data is
    written once more at the destination but never read back. The volume is
    cleared first (what an earlier try left). If tar stops reading early (a
    kept spool that is not the stream's start), the writes are dropped: the
    whole-stream digest fails then and the copy starts again from 0.
    Its calls block: the receiver makes them in a thread."""

    def __init__(self, directory: Path) -> None:
        _clear(directory)
        self._directory = directory
        self._tar = subprocess.Popen(
            [*TAR, "-xpf", "-", "-C", str(directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._gone = False

    def write(self, data: bytes) -> None:
        assert self._tar.stdin is not None
        if self._gone:
            return
        try:
            self._tar.stdin.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self._gone = True

    def finish(self) -> None:
        """Wait for tar; `RuntimeFailure` with its words if it failed."""
        assert self._tar.stdin is not None and self._tar.stderr is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._tar.stdin.close()
        errors = self._tar.stderr.read()
        # Stopping early with 0 is tar at the archive's end marker: the digest
        # matched, so this is the source's own stream, and all of it was unpacked.
        if self._tar.wait() != 0:
            words = errors.decode(errors="replace")[-300:]
            raise RuntimeFailure(f"unpacking into {self._directory} failed: {words}")
        self._tar.stderr.close()

    def abort(self) -> None:
        if self._tar.poll() is None:
            self._tar.kill()
        self._tar.wait()
        for pipe in (self._tar.stdin, self._tar.stderr):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


def _clear(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
