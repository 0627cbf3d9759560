"""A data volume to or from another host, the agent's ends (`runtime.transfer`).

Sending: tar the volume's directory (sparse, sorted), hash all of it, and frame
what lies past the resume point. Receiving: check each frame, append it to a
spool under the agent's state directory (it survives a dropped link or a
restarted agent: the next receive resumes at its length, replaying the kept
part through tar first), and unpack it into the volume as it lands; once the
end frame's digest matches the whole stream's, tar is waited for and the spool
dropped. The volume's container is stopped while this runs (the server stops it
before it moves the data), so its contents do not change under the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

import asyncssh
from pydantic import ValidationError

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import Runtime
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.transfer import (
    CHUNK,
    FRAME,
    RECEIVE_COMMAND,
    SEND_COMMAND,
    ReceiveReport,
    StreamDigest,
    VolumeReceive,
    VolumeSend,
)

log = logging.getLogger(__name__)
TAR = ["tar", "--sparse", "--sort=name", "--numeric-owner", "--format=gnu"]
PROGRESS_EVERY = 8 * CHUNK  # bytes received between progress lines
FAILED = 1


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
        log.warning("volume transfer failed: %s", exc)
        if sending:  # stdout is the frames: the error goes on stderr
            process.stderr.write(str(exc).encode())
        else:
            await _report(process, ReceiveReport(error=str(exc)))
        process.exit(FAILED)


async def _send(
    runtime: VolumeDirectories, request: VolumeSend, process: asyncssh.SSHServerProcess[bytes]
) -> None:
    directory = await asyncio.to_thread(runtime.volume_directory, request.volume)
    tar = await asyncio.create_subprocess_exec(
        *TAR,
        "-C",
        str(directory),
        "-cf",
        "-",
        ".",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert tar.stdout is not None and tar.stderr is not None
    whole = StreamDigest()
    offset = 0
    try:
        while chunk := await _read_up_to(tar.stdout, CHUNK):
            digest = hashlib.sha256(chunk).digest()
            whole.add(chunk, digest)
            end = offset + len(chunk)
            if end > request.resume_at:
                start = max(offset, request.resume_at)
                piece = chunk[start - offset :]
                if start != offset:  # the first frame after a resume: part of a piece
                    digest = hashlib.sha256(piece).digest()
                process.stdout.write(FRAME.pack(start, len(piece), digest))
                process.stdout.write(piece)
                await process.stdout.drain()
            offset = end
    except (asyncssh.Error, OSError):
        return
    finally:
        if tar.returncode is None and not tar.stdout.at_eof():  # cut short, or the agent stops
            tar.kill()
            await tar.wait()
    errors = await tar.stderr.read()
    if await tar.wait() != 0:
        raise RuntimeFailure(f"tar of volume {request.volume} failed: {errors.decode()[-300:]}")
    process.stdout.write(FRAME.pack(offset, 0, whole.digest()))
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()
    process.exit(0)


async def _read_up_to(reader: asyncio.StreamReader, size: int) -> bytes:
    """Up to `size` bytes, fewer only at the end (full frames, not pipe-sized ones)."""
    parts: list[bytes] = []
    wanted = size
    while wanted:
        part = await reader.read(wanted)
        if not part:
            break
        parts.append(part)
        wanted -= len(part)
    return b"".join(parts)


async def _receive(
    runtime: VolumeDirectories,
    request: VolumeReceive,
    process: asyncssh.SSHServerProcess[bytes],
    spool_dir: Path,
) -> None:
    directory = await asyncio.to_thread(runtime.volume_directory, request.volume)
    spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    spool = spool_dir / f"{request.volume}.tar.part"
    held = spool.stat().st_size if spool.exists() else 0
    await _report(process, ReceiveReport(resume_at=held))
    unpacker = await _Unpacker.start(directory)
    whole = StreamDigest()
    try:
        if held:  # a resumed copy: what was kept goes through tar and the digest first
            await _replay(spool, whole, unpacker)
        with spool.open("ab") as out:
            ended = await _frames_into(process, out, held, whole, unpacker)
    except BaseException:
        await unpacker.abort()
        raise
    if ended is None:
        await unpacker.abort()
        return
    total, digest = ended
    if total != spool.stat().st_size or whole.digest() != digest:
        await unpacker.abort()
        spool.unlink()  # what was kept does not add up: from the start again
        message = f"volume {request.volume}: the stream's SHA-256 does not match what was kept"
        await _report(process, ReceiveReport(resume_at=0, message=message))
        process.exit(FAILED)
        return
    await unpacker.finish()
    spool.unlink()
    await _report(process, ReceiveReport(done=total, sha256=digest.hex()))
    process.exit(0)


async def _replay(spool: Path, whole: StreamDigest, unpacker: _Unpacker) -> None:
    with spool.open("rb") as kept:
        while block := await asyncio.to_thread(kept.read, CHUNK):
            whole.add(block)
            await unpacker.write(block)


async def _frames_into(
    process: asyncssh.SSHServerProcess[bytes],
    out: BinaryIO,
    held: int,
    whole: StreamDigest,
    unpacker: _Unpacker,
) -> tuple[int, bytes] | None:
    """Good frames appended to `out`, hashed into `whole` and unpacked as they
    land; the end frame's (length, digest), or None when the stream broke off
    or a frame failed (reported: resume point)."""
    reported = held
    while True:
        try:
            header = await process.stdin.readexactly(FRAME.size)
            offset, length, digest = FRAME.unpack(header)
            if length == 0:
                return offset, digest
            payload = await process.stdin.readexactly(length)
        except (asyncio.IncompleteReadError, asyncssh.Error, OSError):
            return None
        if offset != held or hashlib.sha256(payload).digest() != digest:
            message = f"the frame at {offset} failed its check; held {held}"
            await _report(process, ReceiveReport(resume_at=held, message=message))
            process.exit(FAILED)
            return None
        out.write(payload)
        out.flush()  # in the page cache: a killed agent keeps it
        whole.add(payload, digest)
        await unpacker.write(payload)
        held += length
        if held - reported >= PROGRESS_EVERY:
            reported = held
            await _report(process, ReceiveReport(received=held))


class _Unpacker:
    """`tar -x` into the volume, fed the stream as it lands, so the data is
    written once more at the destination but never read back. The volume is
    cleared first (what an earlier try left). If tar stops reading early (a
    kept spool that is not the stream's start), the writes are dropped: the
    whole-stream digest fails then and the copy starts again from 0."""

    def __init__(self, directory: Path, tar: asyncio.subprocess.Process) -> None:
        self._directory, self._tar = directory, tar
        self._gone = False

    @classmethod
    async def start(cls, directory: Path) -> _Unpacker:
        await asyncio.to_thread(_clear, directory)
        tar = await asyncio.create_subprocess_exec(
            *TAR,
            "-xpf",
            "-",
            "-C",
            str(directory),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(directory, tar)

    async def write(self, data: bytes) -> None:
        assert self._tar.stdin is not None
        if self._gone:
            return
        try:
            self._tar.stdin.write(data)
            await self._tar.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            self._gone = True

    async def finish(self) -> None:
        """Wait for tar; `RuntimeFailure` with its words if it failed."""
        assert self._tar.stdin is not None and self._tar.stderr is not None
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._tar.stdin.close()
            await self._tar.stdin.wait_closed()
        errors = await self._tar.stderr.read()
        # Stopping early with 0 is tar at the archive's end marker: the digest
        # matched, so this is the source's own stream, and all of it was unpacked.
        if await self._tar.wait() != 0:
            words = errors.decode(errors="replace")[-300:]
            raise RuntimeFailure(f"unpacking into {self._directory} failed: {words}")

    async def abort(self) -> None:
        if self._tar.returncode is None:
            self._tar.kill()
        await self._tar.wait()


def _clear(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


async def _report(process: asyncssh.SSHServerProcess[bytes], report: ReceiveReport) -> None:
    process.stdout.write(report.model_dump_json(exclude_none=True).encode() + b"\n")
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()
