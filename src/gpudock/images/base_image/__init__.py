"""The local base image `gpudock/base:bookworm`, built with debootstrap and
imported into the engine: no registry needed.

debootstrap makes a minimal Debian root file system in a temporary directory
(`debootstrap`), which is cleaned and streamed as a tar into the engine's
import with the image's configuration (`rootfs`); progress goes to a callback
(`progress`; `gpudock images build-base` draws it). A tag already on the
engine is reused unless `force` is set.

The engine is whatever implements `ImageEngine` (`gpudock.runtime.docker`'s
`DockerRuntime` does): this package imports no container runtime.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from gpudock.errors import RuntimeFailure
from gpudock.images.base_image.debootstrap import (
    DEFAULT_MIRROR,
    find_debootstrap,
    remove_build_dir,
    run_debootstrap,
)
from gpudock.images.base_image.progress import (
    ProgressCallback,
    ProgressUpdate,
    ignore_progress,
)
from gpudock.images.base_image.rootfs import IMAGE_CHANGES, clean_rootfs, count_entries, tar_stream

BASE_IMAGE = "gpudock/base:bookworm"

log = logging.getLogger(__name__)


class StoredImage(Protocol):
    """An image the engine has."""

    @property
    def id(self) -> str: ...

    @property
    def size_bytes(self) -> int: ...


class ImageEngine(Protocol):
    """What building the base image needs of a container engine."""

    def image_info(self, ref: str) -> StoredImage | None:
        """The image `ref` names, or None if the engine has none."""
        ...

    def import_rootfs(self, tar_chunks: Iterable[bytes], tag: str, changes: list[str]) -> str:
        """Import a root file system's tar, read as it streams, as image `tag`
        with Dockerfile `changes`; return the image's id."""
        ...

    def remove_image_if_unused(self, ref: str) -> None:
        """Remove the image; `RuntimeFailure` if a container still uses it."""
        ...


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


def build_base_image(
    engine: ImageEngine,
    *,
    tag: str = BASE_IMAGE,
    suite: str = "bookworm",
    mirror: str = DEFAULT_MIRROR,
    force: bool = False,
    on_progress: ProgressCallback | None = None,
    workdir: Path | None = None,
) -> BuildResult:
    """Build `tag` from a debootstrapped `suite`, or return the image already there.

    `workdir`: where the temporary root file system goes (default: the system's
    temporary directory). Raises RuntimeUnavailable when the engine cannot be
    reached and RuntimeFailure when debootstrap is missing or fails, or the
    engine refuses the import.
    """
    started = time.monotonic()
    existing = engine.image_info(tag)
    if existing is not None and not force:
        return _result(tag, "cached", existing, started)
    binary = find_debootstrap()
    image_id = _make_and_import(engine, binary, tag, suite, mirror, on_progress, workdir)
    if existing is not None and existing.id != image_id:
        _remove_previous(engine, existing.id)
    built = engine.image_info(tag)
    if built is None:
        raise RuntimeFailure(f"The Docker Engine imported {image_id} but has no {tag}.")
    return _result(tag, "built", built, started)


def import_rootfs(
    engine: ImageEngine, rootfs: Path, tag: str, on_progress: ProgressCallback | None = None
) -> str:
    """Import the directory `rootfs` as the image `tag` with the base image's
    configuration, reporting the files sent; return the image's id."""
    notify = on_progress or ignore_progress
    entries = count_entries(rootfs)
    meter = _Meter(entries, notify)
    notify(ProgressUpdate("import", 0, entries, f"Sending {entries} files to the engine"))
    image_id = engine.import_rootfs(tar_stream(rootfs, meter.step), tag, list(IMAGE_CHANGES))
    notify(ProgressUpdate("import", entries, entries, f"Imported {tag} as {image_id[:19]}"))
    return image_id


def _make_and_import(
    engine: ImageEngine,
    binary: str,
    tag: str,
    suite: str,
    mirror: str,
    on_progress: ProgressCallback | None,
    workdir: Path | None,
) -> str:
    notify = on_progress or ignore_progress
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gpudock-base-", dir=workdir))
    try:
        rootfs = tmp / "rootfs"
        run_debootstrap(binary, suite, mirror, rootfs, notify)
        notify(ProgressUpdate("import", 0, None, "Cleaning the rootfs"))
        clean_rootfs(rootfs)
        return import_rootfs(engine, rootfs, tag, notify)
    except OSError as exc:
        raise RuntimeFailure(f"Could not prepare the base image rootfs in {tmp}: {exc}") from exc
    finally:
        remove_build_dir(tmp)


def _remove_previous(engine: ImageEngine, image_id: str) -> None:
    """Drop the image a forced rebuild untagged; keep it if containers still use it."""
    try:
        engine.remove_image_if_unused(image_id)
    except RuntimeFailure as exc:
        log.info("kept the previous base image %s: %s", image_id, exc.message)


def _result(
    tag: str, status: Literal["built", "cached"], image: StoredImage, started: float
) -> BuildResult:
    return BuildResult(
        tag=tag,
        status=status,
        image_id=image.id,
        size_bytes=image.size_bytes,
        seconds=time.monotonic() - started,
    )


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
