"""A data volume from one agent host to another, as messages on the two links.

The server relays: it opens a receive channel on the destination's link
(`RECEIVE_COMMAND` + `VolumeReceive`), which answers where to resume (the bytes
it already holds), then a send channel on the source's link (`SEND_COMMAND` +
`VolumeSend`, resuming there), and pipes the source's stdout into the
destination's stdin. Direct agent→agent is not done: an agent behind NAT has
no inbound port, and the relay needs none.

What flows is a GNU tar of the volume's contents made with `--sparse` (only
the files' allocated extents are read and sent: tar finds the holes with
`SEEK_DATA`/`SEEK_HOLE`) and `--sort=name`, so that the same untouched volume
gives the same bytes each time: a resumed send regenerates the stream and skips
what the destination holds. Agent volumes are the engine's own directories
(agents keep no loop images), which is why the stream is of the contents and
not of a backing file.

The stream is cut into frames, `FRAME` (offset, length, SHA-256 of the
payload) then the payload; a frame of length 0 ends it, its offset the stream's
length and its digest the stream's `StreamDigest`: the SHA-256 of the list of
the SHA-256s of its `CHUNK`-aligned pieces. That is as strong a check of the
whole stream as its plain SHA-256, and costs nothing more: a frame is an
aligned piece (but the first after a resume), so each end hashes each byte
once, for the frame and the whole at the same time. The destination checks
each frame (its offset must be what it holds, its digest its payload's), spools
the good ones, and answers on its stdout, one JSON `ReceiveReport` a line:
progress, a resume point when a frame failed (the server asks again from
there), or the end (the whole stream's digest checked against the spool, then
unpacked into the volume).

An image moves the same way (`IMAGE_RECEIVE_COMMAND` + `ImageMove`, then
`IMAGE_SEND_COMMAND` + `ImageSend`): the stream is the source engine's `docker
save` of it (less the layers the destination holds, `ImageMove.omit_layers`),
which comes out the same each time, so a move cut short resumes where the
destination's spool ends; the destination feeds `docker load` as frames land
(and, after a resume, replays its spool into a new load first).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from gpudock.runtime.calls import InstanceScope

# + ImageSend: stdout is the frames of `docker save` of the image, from `resume_at`
IMAGE_SEND_COMMAND = "gpudock-image-send "
# + ImageMove: stdin is those frames, spooled and loaded (`docker load`) as they land
IMAGE_RECEIVE_COMMAND = "gpudock-image-receive "
SEND_COMMAND = "gpudock-volume-send "
RECEIVE_COMMAND = "gpudock-volume-receive "
FRAME = struct.Struct("!QI32s")  # offset, payload length, SHA-256 of the payload
CHUNK = 1 << 20  # payload bytes a frame carries at most


class StreamDigest:
    """SHA-256 over the SHA-256 of each `CHUNK`-aligned piece of a stream, fed
    in order. `add` takes a piece's digest when the caller has it (an aligned
    whole piece: a frame), so the bytes are not hashed a second time."""

    def __init__(self) -> None:
        self._pieces = hashlib.sha256()
        self._piece = hashlib.sha256()
        self._piece_length = 0

    def add(self, data: bytes, digest: bytes | None = None) -> None:
        if digest is not None and self._piece_length == 0 and len(data) == CHUNK:
            self._pieces.update(digest)
            return
        view = memoryview(data)
        while view:
            take = min(CHUNK - self._piece_length, len(view))
            self._piece.update(view[:take])
            self._piece_length += take
            view = view[take:]
            if self._piece_length == CHUNK:
                self._pieces.update(self._piece.digest())
                self._piece, self._piece_length = hashlib.sha256(), 0

    def digest(self) -> bytes:
        pieces = self._pieces.copy()
        if self._piece_length:
            pieces.update(self._piece.digest())
        return pieces.digest()


@runtime_checkable
class ImageStreams(Protocol):
    """An engine that hands out and takes in `docker save` streams."""

    def save_image(self, ref: str) -> Iterator[bytes]: ...

    def load_image(self, chunks: Iterator[bytes]) -> None: ...


class ChunkReader:
    """`read(n)` over an iterator of chunks of any size (a `docker save` stream)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._held = chunks, bytearray()

    def read(self, size: int, /) -> bytes:
        while len(self._held) < size and (chunk := next(self._chunks, None)) is not None:
            self._held += chunk
        taken = bytes(self._held[:size])
        del self._held[:size]
        return taken


def frame(chunk: bytes, offset: int, digest: bytes, resume_at: int) -> bytes:
    """The frame of an aligned piece at `offset`, cut to what lies past `resume_at`
    (its digest made again when cut); call only when the piece ends past it."""
    start = max(offset, resume_at)
    piece = chunk[start - offset :]
    if start != offset:  # the first frame after a resume: part of a piece
        digest = hashlib.sha256(piece).digest()
    return FRAME.pack(start, len(piece), digest) + piece


def frames(read: Callable[[int], bytes], resume_at: int) -> Iterator[bytes]:
    """A stream read in `CHUNK` pieces as frames from `resume_at`, then its end frame."""
    whole = StreamDigest()
    offset = 0
    while chunk := read(CHUNK):
        digest = hashlib.sha256(chunk).digest()
        whole.add(chunk, digest)
        if offset + len(chunk) > resume_at:
            yield frame(chunk, offset, digest, resume_at)
        offset += len(chunk)
    yield FRAME.pack(offset, 0, whole.digest())


def stream_digest(data: bytes) -> bytes:
    """`StreamDigest` of a whole stream held in memory (tests, tools)."""
    whole = StreamDigest()
    whole.add(data)
    return whole.digest()


class ImageMove(BaseModel):
    ref: str
    scope: InstanceScope | None = None
    omit_layers: list[str] = Field(
        default_factory=list,
        description="Diff IDs whose layer files the archive leaves out: the destination "
        "holds them, at the bottom of its own stack in the same order (`common_bottom`)",
    )


class ImageSend(BaseModel):
    move: ImageMove
    resume_at: int = 0


def image_spool_name(move: ImageMove) -> str:
    """The destination's spool of this move: one per image and set of left-out
    layers (the shorter archive and the whole one are different streams)."""
    key = json.dumps([move.ref, sorted(move.omit_layers)]).encode()
    return f"image-{hashlib.sha256(key).hexdigest()[:32]}.tar.part"


def common_bottom(layers: tuple[str, ...], held: tuple[str, ...]) -> list[str]:
    """The diff IDs at the bottom of `layers` that `held` has in the same order:
    the layers an engine holding `held` takes from its own store on a load."""
    common: list[str] = []
    for mine, theirs in zip(layers, held, strict=False):
        if mine != theirs:
            break
        common.append(mine)
    return common


class VolumeSend(BaseModel):
    volume: str
    resume_at: int = 0
    scope: InstanceScope | None = None


class VolumeReceive(BaseModel):
    volume: str
    scope: InstanceScope | None = None


class ReceiveReport(BaseModel):
    """One line from the destination. Exactly one of: `resume_at` (send from
    there; with `message` when a frame failed), `received` (progress), `done`
    (the stream's length, all of it checked and unpacked), `error`."""

    resume_at: int | None = None
    received: int | None = None
    done: int | None = None
    sha256: str | None = None
    message: str = ""
    error: str | None = None


@dataclass
class VolumeCopied:
    """A finished copy: the stream's length and SHA-256, what crossed the links
    this time (less than the length after a resume), and where each try began."""

    bytes_total: int
    bytes_sent: int
    sha256: str
    resumed_at: list[int] = field(default_factory=list)
