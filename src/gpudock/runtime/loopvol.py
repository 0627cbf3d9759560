"""Size-limited data volumes on engines whose `local` driver has no size option.

Docker's `local` volume driver enforces a size only on xfs with project
quotas (`-o size=`); on ext4 or overlay2 a volume can fill the host's disk.
Here each volume is an ext4 filesystem in a sparse file, loop-mounted on the
Docker host, and Docker binds a directory *inside* it into the container:

    <root>/<name>.img          sparse file, ext4, size = the instance's disk
    <root>/<name>/             its mount point (loop, nodev, nosuid)
    <root>/<name>/data         what Docker binds (`local`, type=none, o=bind)

If the filesystem is not mounted (after a reboot) `data` does not exist and
Docker refuses to start the container, so a tenant never writes to the host's
disk by mistake; `ensure` mounts it again. Needs root on the Docker host, in
its mount namespace (the server runs beside dockerd).
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from gpudock.errors import RuntimeFailure

GIB = 1024**3
# Lazy inode tables and journal: formatting 50 GB takes milliseconds and writes
# a few MB; `noinit_itable` keeps the kernel from zeroing them later.
MKFS = ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1"]
MOUNT_OPTIONS = "loop,noinit_itable,nodev,nosuid"


class LoopVolumes:
    def __init__(self, root: Path, timeout_s: float = 60.0) -> None:
        self._root = root
        self._timeout_s = timeout_s
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def data_path(self, name: str) -> Path:
        return self._root / name / "data"

    def ensure(self, name: str, size_gb: int) -> Path:
        """Make the volume's filesystem exist and be mounted; return the
        directory to bind. An existing image keeps its size."""
        with self._lock_of(name):
            image = self._root / f"{name}.img"
            if not image.exists():
                self._format(image, size_gb)
            return self._mount(name, image)

    def ensure_mounted(self, name: str) -> None:
        """Mount the volume again if its image exists and it is not mounted."""
        with self._lock_of(name):
            image = self._root / f"{name}.img"
            if image.exists():
                self._mount(name, image)

    def remove(self, name: str) -> None:
        """Unmount and delete the volume's filesystem; silent if there is none.
        `RuntimeFailure` if it is still in use (Docker still binds it)."""
        with self._lock_of(name):
            mountpoint = self._root / name
            if os.path.ismount(mountpoint):
                self._run(["umount", str(mountpoint)], f"unmount volume {name}")
            (self._root / f"{name}.img").unlink(missing_ok=True)
            (self._root / f"{name}.img.tmp").unlink(missing_ok=True)
            if mountpoint.is_dir():
                mountpoint.rmdir()  # empty once unmounted: `data` lives inside the image

    def _format(self, image: Path, size_gb: int) -> None:
        self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = image.with_name(image.name + ".tmp")
        with partial.open("wb") as handle:
            handle.truncate(size_gb * GIB)  # sparse: costs nothing until written
        self._run([*MKFS, "-L", "gpudock-data", str(partial)], f"format {image.name}")
        partial.rename(image)  # atomic: a crash never leaves a half-formatted image

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
