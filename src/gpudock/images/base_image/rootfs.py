"""What goes into the base image: the packages, the cleaning of what
debootstrap leaves behind, the image's configuration, and the root file
system as the tar stream the engine imports."""

from __future__ import annotations

import os
import shutil
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

BASE_LABEL = "org.gpudock.base"

# What a gpudock container needs: python3 for user code and tooling, bash as the login
# shell, sftp-server and rsync for file transfer, ps/ip for inspection, CA roots for TLS.
# openssh-client is not listed: rsync over ssh runs `ssh` on the user's machine and only
# needs `rsync --server` in here (it arrives anyway, as a dependency of openssh-sftp-server).
BASE_PACKAGES = (
    "python3",
    "bash",
    "coreutils",
    "openssh-sftp-server",
    "rsync",
    "procps",
    "iproute2",
    "ca-certificates",
)

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Dockerfile instructions the import applies: the image's configuration.
IMAGE_CHANGES = (
    f"ENV PATH={SYSTEM_PATH}",
    "ENV LANG=C.UTF-8",
    "WORKDIR /root",
    'CMD ["/bin/bash"]',
    f"LABEL {BASE_LABEL}=1",
)

# Left behind by debootstrap but useless (or leaking the build host) in an image. Docker
# bind-mounts its own /etc/hostname, /etc/hosts and /etc/resolv.conf into every container.
_CLEAN_GLOBS = (
    "var/lib/apt/lists/*",
    "var/cache/apt/*.bin",
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/archives/partial/*",
    "var/cache/debconf/*-old",
    "var/lib/dpkg/*-old",
    "var/log/*.log",
    "var/log/apt/*",
    "tmp/*",
    "var/tmp/*",
    "etc/hostname",
    "etc/resolv.conf",
)
# No init runs in a container: keep package scripts from trying to start daemons there.
_POLICY_RC_D = "#!/bin/sh\n# gpudock: containers have no init; do not start services.\nexit 101\n"


def clean_rootfs(rootfs: Path) -> None:
    """Remove the caches, logs and host files debootstrap left, never following a
    symlink out of `rootfs`; add a policy-rc.d that keeps services from starting."""
    root = rootfs.resolve()
    for pattern in _CLEAN_GLOBS:
        for path in rootfs.glob(pattern):
            if not path.parent.resolve().is_relative_to(root):
                continue  # a symlink pointing out of the rootfs: never touch the host
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    policy = rootfs / "usr/sbin/policy-rc.d"
    policy.write_text(_POLICY_RC_D)
    policy.chmod(0o755)


def count_entries(rootfs: Path) -> int:
    """How many entries `tar_stream` walks (what its `on_entry` is called for)."""
    return sum(1 for _ in _walk(rootfs))


def tar_stream(rootfs: Path, on_entry: Callable[[str], None] | None = None) -> Iterator[bytes]:
    """The rootfs as an uncompressed tar, in chunks of about 256 KiB, made as it is read.

    Keeps numeric owners (no user or group names), modes, mtimes, symlinks and hard links;
    skips device nodes (the engine provides /dev) and sockets. Memory stays at a chunk or
    two whatever the size of the files.
    """
    return _coalesced(_tar_pieces(rootfs, on_entry), _CHUNK_SIZE)


def _walk(rootfs: Path) -> Iterator[tuple[str, str]]:
    """(path, name in the archive) for everything below rootfs, parents first."""

    def fail(exc: OSError) -> None:
        raise exc

    for dirpath, dirnames, filenames in os.walk(rootfs, onerror=fail):
        dirnames.sort()
        relative = os.path.relpath(dirpath, rootfs)
        for name in sorted(dirnames + filenames):  # symlinks to directories are in dirnames
            arcname = name if relative == "." else f"{relative}/{name}"
            yield os.path.join(dirpath, name), arcname


class _NullSink:
    """A file that forgets what is written: tarfile.gettarinfo needs an open TarFile."""

    def write(self, data: bytes, /) -> int:
        return len(data)

    def read(self, size: int, /) -> bytes:
        raise OSError("write-only")

    def tell(self) -> int:
        return 0

    def seek(self, pos: int, /) -> int:
        raise OSError("not seekable")

    def close(self) -> None:
        return None


_BLOCK = 512
_READ_SIZE = 1 << 20
_CHUNK_SIZE = 1 << 18


def _tar_pieces(rootfs: Path, on_entry: Callable[[str], None] | None) -> Iterator[bytes]:
    with tarfile.open(fileobj=_NullSink(), mode="w|") as namer:
        for path, arcname in _walk(rootfs):
            info = namer.gettarinfo(path, arcname)  # it remembers inodes: hard links
            if info is not None and not (info.ischr() or info.isblk()):
                yield from _member(info, path)
            if on_entry is not None:
                on_entry(arcname)
    yield bytes(2 * _BLOCK)  # the end-of-archive marker


def _member(info: tarfile.TarInfo, path: str) -> Iterator[bytes]:
    info.uname = info.gname = ""
    info.mtime = int(info.mtime)
    yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    if not info.isreg():
        return
    sent = 0
    with open(path, "rb") as content:
        while chunk := content.read(min(_READ_SIZE, info.size - sent)):
            sent += len(chunk)
            yield chunk
    if sent != info.size:
        raise OSError(f"{path} changed size while it was being archived")
    if padding := -sent % _BLOCK:
        yield bytes(padding)


def _coalesced(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    buffer: list[bytes] = []
    buffered = 0
    for piece in pieces:
        buffer.append(piece)
        buffered += len(piece)
        if buffered >= size:
            yield b"".join(buffer)
            buffer.clear()
            buffered = 0
    if buffer:
        yield b"".join(buffer)
