"""A `docker save` archive without the layers the receiving host already holds.

An instance moved to another host takes its committed writable layer along as
an image: its base image's layers (gigabytes for a CUDA and PyTorch image) and
the one layer the commit added. When the destination holds the base image, the
engine's `docker load` takes each layer whose chain it already has from its own
store and never opens that layer's file in the archive (checked with Docker
20.10: an archive without the base layers' files loads, and the container runs).
So the source leaves those files out: the archive that crosses the links is
the commit's own layer plus a few kilobytes of JSON.

Which files those are: in the legacy layout (`<v1 id>/layer.tar`, Docker before
25) the name does not say, so each layer file is hashed as it is read (its
SHA-256 is its diff ID: the layers are uncompressed) and kept in a spool file
until the hash decides; in the OCI layout (`blobs/sha256/<digest>`) the name
is the digest. Anything else passes as it is. The caller names the diff IDs to
leave out: only those at the bottom of the image's stack that the destination
holds in the same order (their chain IDs match), so `docker load` finds each.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from gpudock.errors import RuntimeFailure

COPY_CHUNK = 1 << 20
OCI_BLOB = "blobs/sha256/"


def without_layers(chunks: Iterator[bytes], omit: set[str], spool_dir: Path) -> Iterator[bytes]:
    """The archive `chunks` carries, less the files of the layers whose diff ID
    (`sha256:<hex>`) is in `omit`, as chunks again. Blocking: run it in a thread."""
    sink = _Chunks()
    spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    reader = io.BufferedReader(_IteratorReader(chunks), COPY_CHUNK)
    try:
        with (
            tarfile.open(fileobj=reader, mode="r|") as archive,
            tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as out,
        ):
            for member in archive:
                _pass_on(archive, member, out, omit, spool_dir)
                yield from sink.take()
    except tarfile.TarError as exc:
        raise RuntimeFailure(f"the engine's save of the image is not a tar archive: {exc}") from exc
    yield from sink.take()


def _pass_on(
    archive: tarfile.TarFile,
    member: tarfile.TarInfo,
    out: tarfile.TarFile,
    omit: set[str],
    spool_dir: Path,
) -> None:
    if not member.isfile():
        out.addfile(member)
        return
    data = archive.extractfile(member)
    assert data is not None
    if member.name.startswith(OCI_BLOB):
        if f"sha256:{member.name.removeprefix(OCI_BLOB)}" not in omit:
            out.addfile(member, data)
        return
    if not member.name.endswith("/layer.tar"):
        out.addfile(member, data)
        return
    with tempfile.TemporaryFile(dir=spool_dir) as spooled:
        digest = _spool(data, spooled)
        if digest not in omit:
            spooled.seek(0)
            out.addfile(member, spooled)


def _spool(data: IO[bytes], into: IO[bytes]) -> str:
    """Copy `data` into `into`; its diff ID."""
    digest = hashlib.sha256()
    while chunk := data.read(COPY_CHUNK):
        digest.update(chunk)
        into.write(chunk)
    return f"sha256:{digest.hexdigest()}"


class _IteratorReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._rest:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._rest = chunk
        count = min(len(buffer), len(self._rest))
        buffer[:count] = self._rest[:count]
        self._rest = self._rest[count:]
        return count


class _Chunks(io.RawIOBase):
    """A writable file that keeps what is written until it is taken."""

    def __init__(self) -> None:
        self._written: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._written.append(bytes(data))
        return len(data)

    def take(self) -> Iterator[bytes]:
        written, self._written = self._written, []
        return iter(written)
