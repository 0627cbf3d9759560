"""Build the local base image `gpudock/base:bookworm` with debootstrap and `docker import`.

No registry is needed: debootstrap fetches a minimal Debian from a mirror into a temporary
rootfs, which is cleaned and streamed as a tar into the engine's `/images/create?fromSrc=-`.
A tag already present on the engine is reused unless `force` is set.

Progress is reported as `ProgressUpdate`s through six stages, in this order of first
appearance: resolve, download, extract, install, configure, import. Within a stage `done`
never decreases; `total` is None while unknown and equals `done` once the stage is over.
(install and configure interleave once, as debootstrap unpacks and configures the required
packages first and the rest of the base system after.)
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

import docker
import docker.errors
import docker.utils
import requests

from gpudock.errors import GpudockError, RuntimeFailure, RuntimeUnavailable

BASE_IMAGE = "gpudock/base:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
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

STAGES = ("resolve", "download", "extract", "install", "configure", "import")

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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

_TAIL_LINES = 20
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgressUpdate:
    stage: str
    done: int
    total: int | None
    message: str


ProgressCallback = Callable[[ProgressUpdate], None]


@dataclass(frozen=True)
class BuildResult:
    tag: str
    status: Literal["built", "cached"]
    image_id: str
    size_bytes: int
    seconds: float

    @property
    def cached(self) -> bool:
        return self.status == "cached"


# -- the debootstrap output parser (pure) ------------------------------------------------

_STAGE_INDEX = {stage: index for index, stage in enumerate(STAGES)}
_PACKAGE_LINE = re.compile(r"^I: (Retrieving|Validating) (\S+) (\S+)$")
_ITEM_LINE = re.compile(r"^I: (Extracting|Unpacking|Configuring) (\S+)\.\.\.$")
_ITEM_STAGES = {"Extracting": "extract", "Unpacking": "install", "Configuring": "configure"}
_PHASE_PREFIXES = (
    ("I: Chosen extractor", "extract"),
    ("I: Installing core packages", "install"),
    ("I: Unpacking required packages", "install"),
    ("I: Unpacking the base system", "install"),
    ("I: Configuring required packages", "configure"),
    ("I: Configuring the base system", "configure"),
)
_SUCCESS_LINE = "I: Base system installed successfully."
_CLOSING_MESSAGES = {
    "resolve": "Resolved the package set",
    "download": "Downloaded {n} packages",
    "extract": "Extracted {n} packages",
    "install": "Unpacked {n} packages",
    "configure": "Configured {n} packages",
}


def _classify(line: str) -> tuple[str | None, bool]:
    """The stage a line belongs to (None: the current one), and whether it ends one item."""
    if line == _SUCCESS_LINE:
        return "configure", False
    for prefix, stage in _PHASE_PREFIXES:
        if line.startswith(prefix):
            return stage, False
    if package := _PACKAGE_LINE.match(line):
        return "download", package[1] == "Validating"
    if item := _ITEM_LINE.match(line):
        return _ITEM_STAGES[item[1]], True
    return None, False


class _DebootstrapParser:
    """Turns debootstrap's output, line by line, into ProgressUpdates."""

    def __init__(self) -> None:
        self.stage = STAGES[0]
        self.done = dict.fromkeys(STAGES, 0)
        self.seen = {STAGES[0]}
        self.closed: set[str] = set()
        self.packages: int | None = None

    def feed(self, raw: str) -> list[ProgressUpdate]:
        line = raw.rstrip()
        if not line:
            return []
        stage, counts = _classify(line)
        if stage is None:
            stage = self.stage
            counts = stage == "resolve" and line.startswith("I: ")
        updates = self._advance(stage)
        self.seen.add(stage)
        if counts:
            self.done[stage] += 1
        updates.append(self._update(stage, line.removeprefix("I: ")))
        if line == _SUCCESS_LINE:
            updates += self._close("install", "configure")
        return updates

    def _advance(self, stage: str) -> list[ProgressUpdate]:
        """Moving on past resolve, download or extract closes them: they do not come back."""
        if _STAGE_INDEX[stage] <= _STAGE_INDEX[self.stage]:
            return []
        self.stage = stage
        behind = STAGES[: min(_STAGE_INDEX[stage], _STAGE_INDEX["install"])]
        return self._close(*behind)

    def _close(self, *stages: str) -> list[ProgressUpdate]:
        updates = []
        for stage in stages:
            if stage in self.closed or stage not in self.seen:
                continue
            self.closed.add(stage)
            if stage == "download":
                self.packages = self.done[stage]
            message = _CLOSING_MESSAGES[stage].format(n=self.done[stage])
            updates.append(self._update(stage, message))
        return updates

    def _update(self, stage: str, message: str) -> ProgressUpdate:
        done = self.done[stage]
        total: int | None = None
        if stage in self.closed:
            total = done
        elif stage in ("install", "configure") and self.packages is not None:
            total = max(self.packages, done)  # estimated from the downloaded package count
        return ProgressUpdate(stage, done, total, message)


def parse_debootstrap_output(lines: Iterable[str]) -> Iterator[ProgressUpdate]:
    """ProgressUpdates for debootstrap's (merged stdout and stderr) output, lazily."""
    parser = _DebootstrapParser()
    for line in lines:
        yield from parser.feed(line)


# -- the build ----------------------------------------------------------------------------


def build_base_image(
    *,
    tag: str = BASE_IMAGE,
    suite: str = "bookworm",
    mirror: str = DEFAULT_MIRROR,
    force: bool = False,
    docker_host: str | None = None,
    on_progress: ProgressCallback | None = None,
    workdir: Path | None = None,
) -> BuildResult:
    """Build `tag` from a debootstrapped `suite`, or return the image already there.

    Raises RuntimeUnavailable when the engine cannot be reached and RuntimeFailure when
    debootstrap is missing or fails, or the engine refuses the import.
    """
    started = time.monotonic()
    notify = on_progress or _ignore_progress
    client = _connect(docker_host)
    try:
        existing = _inspect(client, tag)
        if existing is not None and not force:
            return _result(tag, "cached", existing, started)
        binary = _find_debootstrap()
        image_id = _build_and_import(client, binary, tag, suite, mirror, notify, workdir)
        if existing is not None and existing["Id"] != image_id:
            _remove_stale(client, str(existing["Id"]))
        built = _inspect(client, tag)
        if built is None:
            raise RuntimeFailure(f"The Docker Engine imported {image_id} but has no {tag}.")
        return _result(tag, "built", built, started)
    finally:
        client.close()


def _ignore_progress(update: ProgressUpdate) -> None:
    del update


def _result(
    tag: str, status: Literal["built", "cached"], image: dict[str, Any], started: float
) -> BuildResult:
    return BuildResult(
        tag=tag,
        status=status,
        image_id=str(image["Id"]),
        size_bytes=int(image.get("Size") or 0),
        seconds=time.monotonic() - started,
    )


def _build_and_import(
    client: Any,
    binary: str,
    tag: str,
    suite: str,
    mirror: str,
    notify: ProgressCallback,
    workdir: Path | None,
) -> str:
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpudock-base-", dir=workdir))
    try:
        rootfs = tmp / "rootfs"
        _run_debootstrap(binary, suite, mirror, rootfs, notify)
        notify(ProgressUpdate("import", 0, None, "Cleaning the rootfs"))
        _clean_rootfs(rootfs)
        return _import_rootfs(client, rootfs, tag, notify)
    except OSError as exc:
        raise RuntimeFailure(f"Could not prepare the base image rootfs in {tmp}: {exc}") from exc
    finally:
        _remove_tree(tmp)


def _find_debootstrap() -> str:
    binary = shutil.which("debootstrap")
    if binary is None:
        raise RuntimeFailure(
            "debootstrap is not installed (not found on PATH); it builds the base image. "
            "Install it with `apt-get install debootstrap` and retry."
        )
    if os.geteuid() != 0:
        raise RuntimeFailure(
            "debootstrap needs root to build the base image; rerun as root (e.g. with sudo)."
        )
    return binary


# -- debootstrap ----------------------------------------------------------------------------


def _run_debootstrap(
    binary: str, suite: str, mirror: str, rootfs: Path, notify: ProgressCallback
) -> None:
    command = [
        binary,
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        suite,
        str(rootfs),
        mirror,
    ]
    env = {**os.environ, "LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}
    env["PATH"] = f"{env.get('PATH', '')}:{SYSTEM_PATH}".lstrip(":")
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    with subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
        start_new_session=True,  # its own process group, so all of it can be stopped
    ) as process:
        try:
            assert process.stdout is not None
            for update in parse_debootstrap_output(_recorded(process.stdout, tail)):
                notify(update)
            code = process.wait()
        except BaseException:
            _stop(process)
            raise
    if code != 0:
        last = "\n".join(tail)
        raise RuntimeFailure(
            f"debootstrap failed (exit status {code}) building {suite} from {mirror}. "
            f"Its last {len(tail)} lines:\n{last}",
            exit_status=code,
            output_tail=list(tail),
        )


def _recorded(stream: IO[str], tail: deque[str]) -> Iterator[str]:
    for line in stream:
        line = line.rstrip("\n")
        tail.append(line)
        yield line


def _stop(process: subprocess.Popen[str]) -> None:
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# -- the rootfs -----------------------------------------------------------------------------


def _clean_rootfs(rootfs: Path) -> None:
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


def tar_stream(rootfs: Path, on_entry: Callable[[str], None] | None = None) -> Iterator[bytes]:
    """The rootfs as an uncompressed tar, in chunks of about 256 KiB, made as it is read.

    Keeps numeric owners (no user or group names), modes, mtimes, symlinks and hard links;
    skips device nodes (the engine provides /dev) and sockets. Memory stays at a chunk or
    two whatever the size of the files.
    """
    return _coalesced(_tar_pieces(rootfs, on_entry), _CHUNK_SIZE)


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


def _mounts_below(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
        points = [line.split()[1] for line in mounts if line.strip()]
    decoded = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), p) for p in points)
    return [p for p in decoded if p == prefix or p.startswith(prefix + "/")]


def _remove_tree(tmp: Path) -> None:
    """Remove the build directory; unmount what an interrupted debootstrap left first."""
    umount = shutil.which("umount", path=SYSTEM_PATH) or "umount"
    for point in sorted(_mounts_below(tmp), key=len, reverse=True):
        subprocess.run([umount, "--lazy", point], check=False, capture_output=True)
    if still := _mounts_below(tmp):
        _log.error("not removing %s: still mounted there: %s", tmp, ", ".join(still))
        return
    shutil.rmtree(tmp, ignore_errors=True)
    if tmp.exists():
        _log.warning("could not remove all of %s", tmp)


# -- the engine -------------------------------------------------------------------------------


def _connect(docker_host: str | None) -> Any:
    try:
        if docker_host:
            return docker.DockerClient(base_url=docker_host)
        return docker.from_env()
    except docker.errors.DockerException as exc:
        where = docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise RuntimeUnavailable(
            f"Cannot reach the Docker Engine at {where}: {exc}. Start it (`systemctl start "
            "docker`), or point DOCKER_HOST (or the docker_host setting) at a running engine "
            "whose socket this user may use."
        ) from exc


@contextmanager
def _engine(action: str) -> Iterator[None]:
    """Docker SDK (and requests) exceptions as gpudock errors."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise RuntimeFailure(f"The Docker Engine failed to {action}: {exc}") from exc
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise RuntimeUnavailable(
            f"Lost the Docker Engine while trying to {action}: {exc}. Check that it is "
            "running (`docker info`) and retry."
        ) from exc


def _inspect(client: Any, tag: str) -> dict[str, Any] | None:
    with _engine(f"inspect the image {tag}"):
        try:
            return dict(client.api.inspect_image(tag))
        except docker.errors.ImageNotFound:
            return None


def _remove_stale(client: Any, image_id: str) -> None:
    """Drop the image a forced rebuild untagged; keep it if containers still use it."""
    try:
        client.api.remove_image(image_id)
    except (docker.errors.DockerException, requests.RequestException) as exc:
        _log.info("kept the previous base image %s: %s", image_id, exc)


def _import_rootfs(client: Any, rootfs: Path, tag: str, notify: ProgressCallback) -> str:
    entries = sum(1 for _ in _walk(rootfs))
    meter = _Meter(entries, notify)
    repository, version = docker.utils.parse_repository_tag(tag)
    notify(ProgressUpdate("import", 0, entries, f"Sending {entries} files to the engine"))
    with _engine(f"import the base image as {tag}"):
        answer = client.api.import_image_from_data(
            tar_stream(rootfs, meter.step),
            repository=repository,
            tag=version or "latest",
            changes=list(IMAGE_CHANGES),
        )
    image_id = _imported_id(answer)
    notify(ProgressUpdate("import", entries, entries, f"Imported {tag} as {image_id[:19]}"))
    return image_id


class _Meter:
    """Import progress: files sent, reported at each whole percent."""

    def __init__(self, total: int, notify: ProgressCallback) -> None:
        self.total = total
        self.done = 0
        self.notify = notify
        self._percent = 0

    def step(self, arcname: str) -> None:
        self.done = min(self.done + 1, self.total)
        percent = self.done * 100 // max(self.total, 1)
        if percent != self._percent:
            self._percent = percent
            self.notify(ProgressUpdate("import", self.done, self.total, f"Sending {arcname}"))


def _imported_id(answer: str | bytes) -> str:
    text = answer.decode("utf-8", "replace") if isinstance(answer, bytes) else str(answer)
    image_id = ""
    for line in text.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if message.get("error"):
            raise RuntimeFailure(f"The Docker Engine refused the base image: {message['error']}")
        status = str(message.get("status", ""))
        if status.startswith("sha256:"):
            image_id = status
    if not image_id:
        raise RuntimeFailure(f"The Docker Engine answered the import unexpectedly: {text[:200]}")
    return image_id


# -- a console display ------------------------------------------------------------------------


@contextmanager
def rich_progress(console: Any = None) -> Iterator[ProgressCallback]:
    """A callback that draws the build's stages as rich progress bars while in the block."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        TextColumn("{task.description:<9}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[message]}"),
    )
    with Progress(*columns, console=console) as progress:
        tasks: dict[str, TaskID] = {}

        def show(update: ProgressUpdate) -> None:
            if update.stage not in tasks:
                tasks[update.stage] = progress.add_task(update.stage, total=None, message="")
            progress.update(
                tasks[update.stage],
                completed=update.done,
                total=update.total,
                message=update.message[:36],
            )

        yield show


def main(argv: list[str] | None = None) -> int:
    """`python -m gpudock.images.base_image [--force]`: build the base image here."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tag", default=BASE_IMAGE)
    parser.add_argument("--suite", default="bookworm")
    parser.add_argument("--mirror", default=DEFAULT_MIRROR)
    parser.add_argument("--docker-host", default=None)
    parser.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    args = parser.parse_args(argv)
    try:
        with rich_progress() as show:
            result = build_base_image(
                tag=args.tag,
                suite=args.suite,
                mirror=args.mirror,
                force=args.force,
                docker_host=args.docker_host,
                on_progress=show,
            )
    except GpudockError as exc:
        print(f"error: {exc.message}")
        return 1
    size_mb = result.size_bytes / 1e6
    print(f"{result.tag}: {result.status} in {result.seconds:.0f} s, {size_mb:.0f} MB")
    print(result.image_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
