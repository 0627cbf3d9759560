"""Data volumes: the engine's named volumes, size-limited where the engine's
`local` driver has no size option (`LoopVolumes`), and the copy of one volume
into another that moves an instance's data to another host.

Docker's `local` volume driver enforces a size only on xfs with project
quotas (`-o size=`); on ext4 or overlay2 a volume can fill the host's disk.
So each size-limited volume is an ext4 file system in a sparse file,
loop-mounted on the Docker host, and Docker binds a directory *inside* it
into the container:

    <root>/<name>.img          sparse file, ext4, size = the instance's disk
    <root>/<name>/             its mount point (loop, nodev, nosuid)
    <root>/<name>/data         what Docker binds (`local`, type=none, o=bind)

If the file system is not mounted (after a reboot) `data` does not exist and
Docker refuses to start the container, so a tenant never writes to the host's
disk by mistake; `ensure` mounts it again. Needs root on the Docker host, in
its mount namespace (the server runs beside dockerd).

A new volume's image comes ready-formatted from a pool where one is kept
(`runtime.docker.volume_pool`), and its file system is mounted while the
engine creates the container (`DockerRuntime.create_container`): the engine
needs `data` only when the container starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
import requests.exceptions

from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import RuntimeTimeout, VolumeState
from gpudock.runtime.docker.translate import label_filter, timed_out, translated
from gpudock.runtime.docker.volume_pool import VolumePool

GIB = 1024**3
# Lazy inode tables and journal: formatting 50 GB takes milliseconds and writes
# a few MB; `noinit_itable` keeps the kernel from zeroing them later.
MKFS = ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1"]
MOUNT_OPTIONS = "loop,noinit_itable,nodev,nosuid"
COPY_POLL_S = 1.0  # how often a copy's progress is read while it runs

Progress = Callable[[int, int], None]


class HelperApi(Protocol):
    """What waiting for a helper container needs of docker-py's `APIClient`."""

    def wait(self, container: str, timeout: float) -> dict[str, Any]: ...

    def logs(self, container: str, stdout: bool, stderr: bool) -> bytes: ...


class DockerVolumes:
    """The data volumes of one engine; `loop`: size-limited ones (None: no limits)."""

    def __init__(
        self, api: docker.APIClient, loop: LoopVolumes | None, copy_timeout_s: float
    ) -> None:
        self._api = api
        self._loop = loop
        self._copy_timeout_s = copy_timeout_s

    def ensure(self, name: str, labels: dict[str, str], size_gb: int | None) -> None:
        """The engine's volume and, for a size-limited one, its image (not yet
        mounted: `ensure_mounted` does that, before the container starts)."""
        options: dict[str, str] | None = None
        if self._loop is not None and size_gb is not None:
            options = {"type": "none", "o": "bind", "device": str(self._loop.data_dir(name))}
        # The engine's create is idempotent and answers with the volume as it is:
        # one made before quotas were on keeps its options (none), and stays plain.
        # It never looks at `device` before a container starts.
        with translated(f"create volume {name}"):
            made = self._api.create_volume(
                name=name, driver="local", driver_opts=options, labels=labels
            )
        if self._loop is not None and size_gb is not None and _bound(made):
            self._loop.provision(name, size_gb)

    def ensure_mounted(self, name: str) -> None:
        """A size-limited volume's file system mounted (after `ensure`, or a reboot)."""
        if self._loop is not None:
            self._loop.ensure_mounted(name)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()

    def wait_for_pool(self, timeout_s: float) -> bool:
        return self._loop is not None and self._loop.wait_for_pool(timeout_s)

    def used_bytes(self, name: str) -> int | None:
        """A size-limited volume's file system use; plain volumes share the
        host's file system, so theirs cannot be told apart (None)."""
        return self._loop.used_bytes(name) if self._loop is not None else None

    def remove(self, name: str) -> None:
        with translated(f"remove volume {name}"), contextlib.suppress(docker.errors.NotFound):
            self._api.remove_volume(name, force=True)
        if self._loop is not None:
            self._loop.remove(name)

    def directory(self, name: str) -> Path:
        """The volume's contents on the engine's host: the loop file system's
        data directory (mounted if it is not), or the engine's own mount point."""
        if self._loop is not None and self._loop.has_image(name):
            self.ensure_mounted(name)
            return self._loop.data_dir(name)
        with translated(f"inspect volume {name}"):
            found = self._api.inspect_volume(name)
        return Path(found["Mountpoint"])

    def with_labels(self, labels: dict[str, str]) -> list[VolumeState]:
        with translated("list volumes"):
            found = self._api.volumes(filters={"label": label_filter(labels)})
        return [
            VolumeState(name=v["Name"], labels=dict(v.get("Labels") or {}))
            for v in found.get("Volumes") or []
        ]

    def copy(
        self,
        source: str,
        target: str,
        *,
        image: str,
        helper_name: str,
        labels: dict[str, str],
        on_progress: Progress | None,
    ) -> int:
        """`Runtime.copy_volume`: a helper container mirrors `source` into
        `target`; `RuntimeTimeout` past the copy's time limit."""
        self.ensure_mounted(source)
        self.ensure_mounted(target)
        with translated(f"copy volume {source} to {target}"):
            with contextlib.suppress(docker.errors.NotFound):
                self._api.remove_container(helper_name, force=True)  # a copy cut short earlier
            helper = self._create_helper(source, target, image, helper_name, labels)
            try:
                self._api.start(helper)
                code = wait_for_copy(
                    self._api,
                    helper,
                    name=helper_name,
                    limit_s=self._copy_timeout_s,
                    on_progress=on_progress,
                )
                output = self._api.logs(helper, stdout=True, stderr=True)
            finally:
                with contextlib.suppress(docker.errors.APIError):
                    self._api.remove_container(helper, force=True)
        text = bytes(output).decode(errors="replace")
        if code != 0:
            raise RuntimeFailure(
                f"copying volume {source} to {target} failed ({code}): {text[-500:]}"
            )
        total = _copy_total(text)
        if on_progress is not None:
            on_progress(total, total)
        return total

    def _create_helper(
        self, source: str, target: str, image: str, name: str, labels: dict[str, str]
    ) -> str:
        created = self._api.create_container(
            image,
            ["sh", "-c", COPY_SCRIPT],
            name=name,
            labels=labels,
            network_disabled=True,
            host_config=self._api.create_host_config(
                binds={
                    source: {"bind": "/from", "mode": "ro"},
                    target: {"bind": "/to", "mode": "rw"},
                },
                network_mode="none",
                security_opt=["no-new-privileges"],
                pids_limit=256,
            ),
        )
        return str(created["Id"])


def _bound(volume: dict[str, Any]) -> bool:
    """False for a volume made before quotas were on (the engine's own directory)."""
    return bool((volume.get("Options") or {}).get("device"))


def wait_for_copy(
    api: HelperApi,
    container_id: str,
    *,
    name: str,
    limit_s: float,
    on_progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Wait for the copy helper `container_id` (named `name`) to exit and return
    its exit status, reporting progress from its log meanwhile. `RuntimeTimeout`
    once it has run `limit_s`; the caller removes it (a later copy resumes).
    Engine errors are the caller's to translate."""
    started = clock()
    while True:
        try:
            return int(api.wait(container_id, timeout=COPY_POLL_S)["StatusCode"])
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            if not timed_out(exc):  # the engine went away: not a copy still running
                raise
        ran = clock() - started
        if ran >= limit_s:
            raise RuntimeTimeout(
                f"the data copy in helper container {name} ran {ran:.0f} s, past its limit "
                f"of {limit_s:.0f} s (GPUDOCK_VOLUME_COPY_TIMEOUT_S), and was stopped; "
                "the next try resumes it"
            )
        if on_progress is not None:
            log = bytes(api.logs(container_id, stdout=True, stderr=True))
            done, total = _copy_progress(log.decode(errors="replace"))
            if total:
                on_progress(done, total)


# A fresh target gets `cp -a` (fastest); a target a cut-short copy left behind
# gets rsync, which skips the files already complete (resume), or a clean
# `cp -a` where the image has no rsync. A background `du` reports progress.
COPY_SCRIPT = r"""
set -e
echo "total $(du -sb /from | cut -f1)"
( while sleep 1; do echo "done $(du -sb /to 2>/dev/null | cut -f1)"; done ) &
watcher=$!
if [ -z "$(find /to -mindepth 1 -maxdepth 1 ! -name lost+found -print -quit)" ]; then
  cp -a /from/. /to/
elif command -v rsync >/dev/null 2>&1; then
  rsync -a --delete --inplace --exclude=/lost+found /from/ /to/
else
  find /to -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} +
  cp -a /from/. /to/
fi
kill "$watcher" 2>/dev/null || true
echo "copied"
"""
_COPY_TOTAL = re.compile(r"^total (\d+)", re.MULTILINE)
_COPY_DONE = re.compile(r"^done (\d+)", re.MULTILINE)


def _copy_total(log: str) -> int:
    match = _COPY_TOTAL.search(log)
    return int(match[1]) if match else 0


def _copy_progress(log: str) -> tuple[int, int]:
    """(bytes done, total) from the helper's log so far."""
    done = _COPY_DONE.findall(log)
    total = _copy_total(log)
    return (min(int(done[-1]), total) if done else 0), total


class LoopVolumes:
    """Size-limited volumes as loop-mounted ext4 images under `root` (see the
    module's docstring)."""

    def __init__(self, root: Path, timeout_s: float = 60.0) -> None:
        self._root = root
        self._timeout_s = timeout_s
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._pool: VolumePool | None = None
        self._nice = shutil.which("nice")

    def open_pool(self, per_size: int, sizes: tuple[int, ...] = ()) -> VolumePool:
        """Empty the pool of ready images an earlier process left (also when
        `per_size` is 0: a pool turned off leaves nothing behind) and keep
        `per_size` images of each size in use ready from now on, `sizes` first."""
        self._pool = VolumePool(self._root, per_size, self._format_in_background, sizes=sizes)
        self._pool.open()
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def wait_for_pool(self, timeout_s: float) -> bool:
        return self._pool is not None and self._pool.settle(timeout_s)

    def has_image(self, name: str) -> bool:
        return (self._root / f"{name}.img").exists()

    def data_dir(self, name: str) -> Path:
        """What the engine binds: it exists only while the file system is mounted."""
        return self._root / name / "data"

    def provision(self, name: str, size_gb: int) -> None:
        """Make the volume's image exist (a pooled one, or formatted now); an
        existing image keeps its size and its data."""
        with self._lock_of(name):
            image = self._root / f"{name}.img"
            if image.exists():
                return
            self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self._pool is None or not self._pool.take(size_gb, image):
                self._format(image, size_gb)

    def ensure_mounted(self, name: str) -> None:
        """Mount the volume again if its image exists and it is not mounted."""
        with self._lock_of(name):
            image = self._root / f"{name}.img"
            if image.exists():
                self._mount(name, image)

    def used_bytes(self, name: str) -> int | None:
        """Blocks in use on the mounted file system (what `df` says); None when
        it is not mounted here (no such volume, or a plain one)."""
        mountpoint = self._root / name
        if not os.path.ismount(mountpoint):
            return None
        try:
            fs = os.statvfs(mountpoint)
        except OSError:
            return None
        return (fs.f_blocks - fs.f_bfree) * fs.f_frsize

    def remove(self, name: str) -> None:
        """Unmount and delete the volume's file system; silent if there is none.
        `RuntimeFailure` if it is still in use (Docker still binds it)."""
        with self._lock_of(name):
            mountpoint = self._root / name
            if os.path.ismount(mountpoint):
                self._run(["umount", str(mountpoint)], f"unmount volume {name}")
            (self._root / f"{name}.img").unlink(missing_ok=True)
            (self._root / f"{name}.img.tmp").unlink(missing_ok=True)
            if mountpoint.is_dir():
                mountpoint.rmdir()  # empty once unmounted: `data` lives inside the image

    def _format(self, image: Path, size_gb: int, *, niced: bool = False) -> None:
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = image.with_name(image.name + ".tmp")
        with partial.open("wb") as handle:
            handle.truncate(size_gb * GIB)  # sparse: costs nothing until written
        command = [*MKFS, "-L", "gpudock-data", str(partial)]
        if niced and self._nice is not None:
            command = [self._nice, "-n", "10", *command]
        self._run(command, f"format {image.name}")
        partial.rename(image)  # atomic: a crash never leaves a half-formatted image

    def _format_in_background(self, image: Path, size_gb: int) -> None:
        self._format(image, size_gb, niced=True)

    def _mount(self, name: str, image: Path) -> Path:
        mountpoint = self._root / name
        mountpoint.mkdir(mode=0o700, exist_ok=True)
        if not os.path.ismount(mountpoint):
            self._run(
                ["mount", "-o", MOUNT_OPTIONS, str(image), str(mountpoint)], f"mount volume {name}"
            )
        data = mountpoint / "data"
        data.mkdir(mode=0o755, exist_ok=True)
        return data

    def _run(self, command: list[str], action: str) -> None:
        try:
            result = subprocess.run(
                command, capture_output=True, timeout=self._timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeFailure(f"could not {action}: {exc}") from exc
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).decode(errors="replace").strip()
            raise RuntimeFailure(
                f"could not {action}: {detail or f'exit status {result.returncode}'} "
                "(size-limited volumes need root on the Docker host; "
                "GPUDOCK_VOLUME_QUOTA=off turns them off)"
            )

    def _lock_of(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())
