"""The agent's ends of a framed, resumable stream to another host
(`runtime.transfer`), whatever the stream is: a volume's tar, an image's save.

Sending: read the stream in `CHUNK` pieces, hash each, and frame what lies past
the resume point; an end frame carries the whole stream's length and digest.
Receiving: check each frame, append it to a spool under the agent's state
directory (it survives a dropped link or a restarted agent: the next receive
resumes at its length, replaying the kept part into the consumer first), and
hand it to the consumer as it lands; once the end frame's digest matches the
whole stream's, the consumer is finished and the spool dropped. A stream that
is made again on a resume must come out the same (a sorted tar of an untouched
volume, `docker save` of one image): if it does not, the whole digest fails and
the copy starts again from 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

import asyncssh

from gpudock.runtime.transfer import CHUNK, FRAME, ReceiveReport, StreamDigest, frame

log = logging.getLogger(__name__)
PROGRESS_EVERY = 8 * CHUNK  # bytes received between progress lines
FAILED = 1
_RECEIVING: dict[Path, asyncio.Lock] = {}  # per spool: the receiver holding it


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class Consumer(Protocol):
    """Where a received stream goes as it lands. Its calls block: they are made
    in a thread, one at a time."""

    def write(self, data: bytes) -> None: ...

    def finish(self) -> None:
        """The whole stream was written and checked: complete it
        (`RuntimeFailure` with the reason if that fails)."""
        ...

    def abort(self) -> None:
        """The stream broke off: drop what was written."""
        ...


# -- sending --------------------------------------------------------------------
async def send_stream(
    process: asyncssh.SSHServerProcess[bytes],
    stream: Readable,
    resume_at: int,
    stop: Callable[[], None],
) -> tuple[int, bytes] | None:
    """Frame `stream` from `resume_at` onto the process's stdout; its length and
    whole digest (the end frame is the caller's to send once the stream's source
    says it went well), or None if the link went (`stop` was called if a read
    was under way, so that it ends)."""
    whole = StreamDigest()
    offset = 0
    # Reading and hashing the next piece (a thread: both let go of the GIL) runs
    # while this one goes out over the link.
    ahead = asyncio.ensure_future(asyncio.to_thread(_next_piece, stream))
    try:
        while (piece := await ahead)[0]:
            chunk, digest = piece
            ahead = asyncio.ensure_future(asyncio.to_thread(_next_piece, stream))
            whole.add(chunk, digest)
            end = offset + len(chunk)
            if end > resume_at:
                await _send_frame(process, chunk, offset, digest, resume_at)
            offset = end
    except (asyncssh.Error, OSError):
        return None
    finally:
        if not ahead.done():  # cut short, or the agent stops: the source goes, and its reader
            stop()
            await asyncio.wait([ahead])
    return offset, whole.digest()


async def end_stream(process: asyncssh.SSHServerProcess[bytes], length: int, digest: bytes) -> None:
    process.stdout.write(FRAME.pack(length, 0, digest))
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()
    process.exit(0)


def _next_piece(stream: Readable) -> tuple[bytes, bytes]:
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
    process.stdout.write(frame(chunk, offset, digest, resume_at))
    await process.stdout.drain()


# -- receiving ------------------------------------------------------------------
async def receive_stream(
    process: asyncssh.SSHServerProcess[bytes],
    spool: Path,
    open_consumer: Callable[[], Consumer],
    what: str,
) -> None:
    """Receive one stream into a consumer `open_consumer` makes (in a thread),
    resuming from `spool`; reports on stdout (`ReceiveReport`), exit status set."""
    # A receiver the server gave up on may still be unwinding (aborting its
    # consumer) when the resumed one arrives: one at a time.
    async with _RECEIVING.setdefault(spool, asyncio.Lock()):
        spool.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        held = spool.stat().st_size if spool.exists() else 0
        await report(process, ReceiveReport(resume_at=held))
        consumer = await asyncio.to_thread(open_consumer)
        try:
            with spool.open("ab") as out:
                sink = _Sink(out, consumer)
                if held:  # a resumed copy: what was kept goes to the consumer and digest first
                    await asyncio.to_thread(sink.replay, spool)
                ended = await _frames_into(process, sink, held)
        except BaseException:
            await asyncio.to_thread(consumer.abort)
            raise
        if ended is None:
            await asyncio.to_thread(consumer.abort)
            return
        total, digest = ended
        if total != spool.stat().st_size or sink.whole.digest() != digest:
            await asyncio.to_thread(consumer.abort)
            spool.unlink()  # what was kept does not add up: from the start again
            message = f"{what}: the stream's SHA-256 does not match what was kept"
            await report(process, ReceiveReport(resume_at=0, message=message))
            process.exit(FAILED)
            return
        try:
            await asyncio.to_thread(consumer.finish)
        finally:  # done, or what it holds cannot be finished: from the start next time
            spool.unlink(missing_ok=True)
    await report(process, ReceiveReport(done=total, sha256=digest.hex()))
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
    """Good frames into `sink` (checked, spooled, hashed and consumed in a thread
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
                    await report(process, ReceiveReport(received=expected))
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
        await report(process, ReceiveReport(resume_at=held, message=message))
        process.exit(FAILED)


async def _frame_failed(process: asyncssh.SSHServerProcess[bytes], held: int) -> None:
    message = f"the frame at {held} failed its check; held {held}"
    await report(process, ReceiveReport(resume_at=held, message=message))
    process.exit(FAILED)


class _Sink:
    """Where a checked frame goes: the spool (in the page cache: a killed agent
    keeps it), the whole-stream digest and the consumer. Called from one thread
    at a time."""

    def __init__(self, out: BinaryIO, consumer: Consumer) -> None:
        self.out, self.consumer = out, consumer
        self.whole = StreamDigest()

    def land(self, payload: bytes, digest: bytes) -> bool:
        if hashlib.sha256(payload).digest() != digest:
            return False
        self.out.write(payload)
        self.out.flush()
        self.whole.add(payload, digest)
        self.consumer.write(payload)
        return True

    def replay(self, spool: Path) -> None:
        with spool.open("rb") as kept:
            while block := kept.read(CHUNK):
                self.whole.add(block)
                self.consumer.write(block)


async def failed(
    process: asyncssh.SSHServerProcess[bytes], sending: bool, what: str, exc: Exception
) -> None:
    """End a send or a receive that could not go on, saying why where the other
    end reads it: a sender's stdout is the frames, so stderr; a receiver's report."""
    log.warning("%s transfer failed: %s", what, exc)
    if sending:
        process.stderr.write(str(exc).encode())
    else:
        await report(process, ReceiveReport(error=str(exc)))
    process.exit(FAILED)


async def report(process: asyncssh.SSHServerProcess[bytes], line: ReceiveReport) -> None:
    process.stdout.write(line.model_dump_json(exclude_none=True).encode() + b"\n")
    with contextlib.suppress(asyncssh.Error, OSError):
        await process.stdout.drain()
