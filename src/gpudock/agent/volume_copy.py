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
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO, Protocol, runtime_checkable

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
_RECEIVING: dict[Path, asyncio.Lock] = {}  # per spool (volume): the receiver holding it


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
    tar = subprocess.Popen(
        [*TAR, "-C", str(directory), "-cf", "-", "."],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert tar.stdout is not None and tar.stderr is not None
    whole = StreamDigest()
    offset = 0
    # Reading and hashing the next piece (a thread: both let go of the GIL) runs
    # while this one goes out over the link.
    ahead = asyncio.ensure_future(asyncio.to_thread(_next_piece, tar.stdout))
    try:
        while (piece := await ahead)[0]:
            chunk, digest = piece
            ahead = asyncio.ensure_future(asyncio.to_thread(_next_piece, tar.stdout))
            whole.add(chunk, digest)
            end = offset + len(chunk)
            if end > request.resume_at:
                await _send_frame(process, chunk, offset, digest, request.resume_at)
            offset = end
    except (asyncssh.Error, OSError):
        return
    finally:
        if not ahead.done():  # cut short, or the agent stops: tar goes, and its reader
            tar.kill()
            await asyncio.wait([ahead])
        await asyncio.to_thread(tar.wait)
    errors = tar.stderr.read()
    if tar.returncode != 0:
        raise RuntimeFailure(f"tar of volume {request.volume} failed: {errors.decode()[-300:]}")
    process.stdout.write(FRAME.pack(offset, 0, whole.digest()))
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()
    process.exit(0)


def _next_piece(stream: IO[bytes]) -> tuple[bytes, bytes]:
    """The next `CHUNK` of the stream (less only at its end) and its SHA-256."""
    chunk = stream.read(CHUNK)
    return chunk, hashlib.sha256(chunk).digest() if chunk else b""


async def _send_frame(
    process: asyncssh.SSHServerProcess[bytes],
    chunk: bytes,
    offset: int,
    digest: bytes,
    resume_at: int,
) -> None:
    start = max(offset, resume_at)
    piece = chunk[start - offset :]
    if start != offset:  # the first frame after a resume: part of a piece
        digest = hashlib.sha256(piece).digest()
    process.stdout.write(FRAME.pack(start, len(piece), digest))
    process.stdout.write(piece)
    await process.stdout.drain()


async def _receive(
    runtime: VolumeDirectories,
    request: VolumeReceive,
    process: asyncssh.SSHServerProcess[bytes],
    spool_dir: Path,
) -> None:
    spool = spool_dir / f"{request.volume}.tar.part"
    # A receiver the server gave up on may still be unwinding (aborting its unpack
    # into the same directory) when the resumed one arrives: one at a time.
    async with _RECEIVING.setdefault(spool, asyncio.Lock()):
        await _receive_alone(runtime, request, process, spool)


async def _receive_alone(
    runtime: VolumeDirectories,
    request: VolumeReceive,
    process: asyncssh.SSHServerProcess[bytes],
    spool: Path,
) -> None:
    directory = await asyncio.to_thread(runtime.volume_directory, request.volume)
    spool.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    held = spool.stat().st_size if spool.exists() else 0
    await _report(process, ReceiveReport(resume_at=held))
    unpacker = await asyncio.to_thread(_Unpacker, directory)
    try:
        with spool.open("ab") as out:
            sink = _Sink(out, unpacker)
            if held:  # a resumed copy: what was kept goes through tar and the digest first
                await asyncio.to_thread(sink.replay, spool)
            ended = await _frames_into(process, sink, held)
    except BaseException:
        await asyncio.to_thread(unpacker.abort)
        raise
    if ended is None:
        await asyncio.to_thread(unpacker.abort)
        return
    total, digest = ended
    if total != spool.stat().st_size or sink.whole.digest() != digest:
        await asyncio.to_thread(unpacker.abort)
        spool.unlink()  # what was kept does not add up: from the start again
        message = f"volume {request.volume}: the stream's SHA-256 does not match what was kept"
        await _report(process, ReceiveReport(resume_at=0, message=message))
        process.exit(FAILED)
        return
    await asyncio.to_thread(unpacker.finish)
    spool.unlink()
    await _report(process, ReceiveReport(done=total, sha256=digest.hex()))
    process.exit(0)


Frame = tuple[int, int, bytes, bytes]  # offset, length, digest, payload


async def _next_frame(process: asyncssh.SSHServerProcess[bytes]) -> Frame | None:
    """The next frame off the link; None when the stream broke off."""
    try:
        header = await process.stdin.readexactly(FRAME.size)
        offset, length, digest = FRAME.unpack(header)
        payload = await process.stdin.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, asyncssh.Error, OSError):
        return None
    return offset, length, digest, payload


async def _frames_into(
    process: asyncssh.SSHServerProcess[bytes], sink: _Sink, held: int
) -> tuple[int, bytes] | None:
    """Good frames into `sink` (checked, spooled, hashed and unpacked in a thread
    while the next one comes off the link); the end frame's (length, digest), or
    None when the stream broke off or a frame failed (reported: resume point)."""
    reported = expected = held
    landing: tuple[int, asyncio.Future[bool]] | None = None
    try:
        while True:
            frame = await _next_frame(process)
            if landing is not None:
                at, landed = landing
                landing = None
                if not await landed:
                    await _frame_failed(process, at)
                    return None
                if expected - reported >= PROGRESS_EVERY:
                    reported = expected
                    await _report(process, ReceiveReport(received=expected))
            if frame is None:
                await _broke_off(process, expected)
                return None
            offset, length, digest, payload = frame
            if length == 0:
                return offset, digest
            if offset != expected:
                await _frame_failed(process, expected)
                return None
            landing = offset, asyncio.ensure_future(asyncio.to_thread(sink.land, payload, digest))
            expected = offset + length
    finally:
        if landing is not None:  # cancelled: the thread still holds the spool
            await asyncio.wait([landing[1]])


async def _broke_off(process: asyncssh.SSHServerProcess[bytes], held: int) -> None:
    """The stream ended before its end frame (its source or the relay went away):
    say where to resume, so that the server's next try need not wait out a stall.
    When the relay is what went away, nobody reads this."""
    message = f"the stream broke off; held {held}"
    with contextlib.suppress(asyncssh.Error, OSError):
        await _report(process, ReceiveReport(resume_at=held, message=message))
        process.exit(FAILED)


async def _frame_failed(process: asyncssh.SSHServerProcess[bytes], held: int) -> None:
    message = f"the frame at {held} failed its check; held {held}"
    await _report(process, ReceiveReport(resume_at=held, message=message))
    process.exit(FAILED)


class _Sink:
    """Where a checked frame goes: the spool (in the page cache: a killed agent
    keeps it), the whole-stream digest and tar. Called from one thread at a time."""

    def __init__(self, out: BinaryIO, unpacker: _Unpacker) -> None:
        self.out, self.unpacker = out, unpacker
        self.whole = StreamDigest()

    def land(self, payload: bytes, digest: bytes) -> bool:
        if hashlib.sha256(payload).digest() != digest:
            return False
        self.out.write(payload)
        self.out.flush()
        self.whole.add(payload, digest)
        self.unpacker.write(payload)
        return True

    def replay(self, spool: Path) -> None:
        with spool.open("rb") as kept:
            while block := kept.read(CHUNK):
                self.whole.add(block)
                self.unpacker.write(block)


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


async def _report(process: asyncssh.SSHServerProcess[bytes], report: ReceiveReport) -> None:
    process.stdout.write(report.model_dump_json(exclude_none=True).encode() + b"\n")
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()
