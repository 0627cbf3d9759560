"""The build context a user uploaded, and the archives COPY and ADD put into images.

The upload lies on disk as a plain tar (a compressed one is unpacked once), so
a 512 MiB context never sits in memory. `.dockerignore` is applied with
docker-py's own matcher (Docker's rules: `**`, `!exceptions`, last match wins).

COPY semantics, as Docker's: a source directory contributes its contents, a
file goes to `dest` itself unless `dest` ends in "/" or names a directory that
exists, several sources need a directory. Ownership is 0:0 unless `--chown`.
Paths may not leave the context (`../`), whatever the spelling.
"""

from __future__ import annotations

import fnmatch
import io
import posixpath
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from docker.utils.build import PatternMatcher

from gpudock.errors import InvalidRequest

IGNORE_FILE = ".dockerignore"
_SPOOL_BYTES = 32 * 2**20


@dataclass(frozen=True)
class Owner:
    uid: int = 0
    gid: int = 0


class BuildContext:
    """Read-only view of one uploaded context plus files gpudock adds to it."""

    def __init__(self, archive: Path, extra: dict[str, tuple[bytes, int]] | None = None):
        self._tar = tarfile.open(archive, mode="r:")  # noqa: SIM115 - closed by close()
        self._extra = dict(extra or {})
        ignore = self._read_member(IGNORE_FILE)
        patterns = [
            line.strip()
            for line in (ignore.decode(errors="replace").splitlines() if ignore else [])
            if line.strip() and not line.lstrip().startswith("#")
        ]
        matcher = PatternMatcher(patterns) if patterns else None
        self._members: dict[str, tarfile.TarInfo] = {}
        for member in self._tar.getmembers():
            path = _clean(member.name)
            if path and not (matcher and matcher.matches(path)):
                self._members[path] = member
        for path in self._extra:
            self._members.pop(path, None)

    def close(self) -> None:
        self._tar.close()

    def read(self, path: str) -> bytes | None:
        """A file of the context (after .dockerignore), or None."""
        clean = _clean(path)
        if clean in self._extra:
            return self._extra[clean][0]
        member = self._members.get(clean)
        return self._read_member(clean) if member is not None and member.isfile() else None

    def _read_member(self, path: str) -> bytes | None:
        for name in (path, f"./{path}"):
            try:
                handle = self._tar.extractfile(name)
            except KeyError:
                continue
            return handle.read() if handle is not None else None
        return None

    # -- sources ------------------------------------------------------------------
    def matches(self, pattern: str) -> list[str]:
        """Context paths a COPY source names (wildcards as Go's filepath.Match)."""
        clean = _clean(pattern)
        if clean == "":
            return [""]
        if not any(ch in clean for ch in "*?["):
            known = clean in self._members or clean in self._extra or self._is_dir(clean)
            return [clean] if known else []
        paths = set(self._members) | set(self._extra)
        return sorted(p for p in paths if _match(clean, p))

    def _is_dir(self, path: str) -> bool:
        prefix = f"{path}/" if path else ""
        return path == "" or any(p.startswith(prefix) for p in (*self._members, *self._extra))

    def is_dir(self, path: str) -> bool:
        member = self._members.get(path)
        return (member is not None and member.isdir()) or (member is None and self._is_dir(path))

    def archive(
        self,
        sources: Iterable[str],
        dest: str,
        owner: Owner,
        chmod: int | None,
        unpack: bool,
        dest_is_dir: bool,
    ) -> IO[bytes]:
        """A tar to extract at "/" that puts `sources` at `dest`."""
        found = [path for source in sources for path in self._expanded(source)]
        several = len(found) > 1 or dest.endswith("/") or dest_is_dir
        out = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115 - returned
        with tarfile.open(fileobj=out, mode="w:") as target:
            for path in found:
                self._add_source(target, path, dest, several, owner, chmod, unpack)
        out.seek(0)
        return out

    def _expanded(self, source: str) -> list[str]:
        found = self.matches(source)
        if not found:
            raise InvalidRequest(
                f"COPY/ADD source {source!r} is not in the build context "
                "(or .dockerignore excludes it)",
                field="dockerfile",
            )
        return found

    def _add_source(
        self,
        target: tarfile.TarFile,
        path: str,
        dest: str,
        several: bool,
        owner: Owner,
        chmod: int | None,
        unpack: bool,
    ) -> None:
        root = dest.rstrip("/") or "/"
        if self.is_dir(path):
            for inner in self._under(path):
                relative = inner[len(path) :].lstrip("/")
                self._add_one(target, inner, posixpath.join(root, relative), owner, chmod)
            return
        data = self.read(path)
        if unpack and data is not None and _is_tar(data):
            _unpack_into(target, data, root, owner)
            return
        name = posixpath.join(root, posixpath.basename(path)) if several else root
        self._add_one(target, path, name, owner, chmod)

    def _under(self, path: str) -> Iterator[str]:
        prefix = f"{path}/" if path else ""
        for candidate in sorted({*self._members, *self._extra}):
            if candidate.startswith(prefix):
                yield candidate

    def _add_one(
        self, target: tarfile.TarFile, path: str, name: str, owner: Owner, chmod: int | None
    ) -> None:
        arcname = name.lstrip("/")
        if not arcname:
            return
        if path in self._extra:
            data, mode = self._extra[path]
            info = tarfile.TarInfo(arcname)
            info.size, info.mode = len(data), mode
            _own(info, owner, chmod)
            target.addfile(info, io.BytesIO(data))
            return
        member = self._members[path]
        info = _copy_info(member, arcname)
        _own(info, owner, chmod)
        handle = self._tar.extractfile(member) if member.isfile() else None
        target.addfile(info, handle)


def _copy_info(member: tarfile.TarInfo, arcname: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(arcname)
    info.type, info.size, info.mode, info.mtime = (
        member.type,
        member.size,
        member.mode,
        member.mtime,
    )
    if member.issym() or member.islnk():
        info.linkname = member.linkname
        if member.islnk():
            info.type, info.size = tarfile.SYMTYPE, 0  # a hard link to another path: a symlink
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        info.type, info.size = tarfile.REGTYPE, 0  # devices and fifos become empty files
    return info


def _own(info: tarfile.TarInfo, owner: Owner, chmod: int | None) -> None:
    info.uid, info.gid, info.uname, info.gname = owner.uid, owner.gid, "", ""
    if chmod is not None and not info.issym():
        info.mode = chmod


def _is_tar(data: bytes) -> bool:
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*"):
            return True
    except (tarfile.TarError, EOFError, OSError):
        return False


def _unpack_into(target: tarfile.TarFile, data: bytes, root: str, owner: Owner) -> None:
    """ADD of a local archive: its members under `root`, never outside it."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as source:
        for member in source.getmembers():
            clean = _clean(member.name)
            if not clean:
                continue
            info = _copy_info(member, posixpath.join(root, clean).lstrip("/"))
            info.uid, info.gid = member.uid or owner.uid, member.gid or owner.gid
            handle = source.extractfile(member) if member.isfile() else None
            target.addfile(info, handle)


def _clean(path: str) -> str:
    """A context path: relative, normalised, never above the root."""
    normal = posixpath.normpath("/" + path.replace("\\", "/")).lstrip("/")
    return "" if normal == "." else normal


def _match(pattern: str, path: str) -> bool:
    """Go's filepath.Match: `*` does not cross a "/"."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(
        fnmatch.fnmatchcase(n, p) for p, n in zip(parts, names, strict=True)
    )


def store_upload(chunks: Iterable[bytes], limit: int, directory: Path | None = None) -> Path:
    """Write an uploaded context to disk as a plain tar; InvalidRequest if it is
    not an archive. (The size limit is enforced while receiving, by the caller.)"""
    raw = tempfile.NamedTemporaryFile(dir=directory, suffix=".upload", delete=False)  # noqa: SIM115
    with raw:
        for chunk in chunks:
            raw.write(chunk)
    return normalise_archive(Path(raw.name), limit)


def normalise_archive(path: Path, limit: int) -> Path:
    """Unpack a compressed context into a plain tar beside it (bounded by `limit`)."""
    if path.stat().st_size == 0:
        return _empty_tar(path)
    try:
        with tarfile.open(path, mode="r:") as plain:
            plain.getmembers()
        return path
    except tarfile.ReadError:
        pass
    except tarfile.TarError as exc:
        raise InvalidRequest(f"the build context is not a tar archive: {exc}") from exc
    return _decompressed(path, limit)


def _decompressed(path: Path, limit: int) -> Path:
    target = path.with_suffix(".tar")
    try:
        with tarfile.open(path, mode="r:*") as source, tarfile.open(target, mode="w:") as out:
            total = 0
            for member in source:
                total += member.size
                if total > limit:
                    raise InvalidRequest(
                        f"the build context unpacks to more than {limit // 2**20} MiB"
                    )
                out.addfile(member, source.extractfile(member) if member.isfile() else None)
    except (tarfile.TarError, EOFError, OSError) as exc:
        target.unlink(missing_ok=True)
        raise InvalidRequest(f"the build context is not a tar archive: {exc}") from exc
    finally:
        path.unlink(missing_ok=True)
    return target


def _empty_tar(path: Path) -> Path:
    with tarfile.open(path, mode="w:"):
        pass
    return path
