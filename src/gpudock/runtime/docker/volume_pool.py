"""A bounded pool of pre-formatted data volume images, made ahead in the background.

A size-limited volume (`runtime.docker.volumes.LoopVolumes`) is an ext4 file
system in a sparse file; formatting it is a `mkfs.ext4` on the way from create
to running. The pool keeps up to `per_size` images of each size in use
formatted and ready, so that making a volume is one `rename`; a thread of its
own formats the next ones while nothing waits for them.

What keeps it safe is where files are, not what is remembered:

    <root>/.pool/<size>g-<token>.img.tmp    being formatted
    <root>/.pool/<size>g-<token>.img        ready: formatted, never mounted

- A pooled image is never mounted and never given out twice: taking one is a
  single `rename` out of `.pool/`, under the pool's lock, onto a name that
  does not exist yet. Files only ever leave the pool, so a tenant's volume
  cannot become a pool member, and no pool operation touches a path outside
  `.pool/`.
- `.pool` is no volume's name (the engine's names start with a letter or a
  digit), so it never meets a volume's `<root>/<name>` mount point.
- The pool does not outlive its process: whatever a previous one left there
  (half-formatted `.tmp` files after a crash, ready images whose last writes
  a power loss may have lost) is deleted when the pool opens, then remade.
- Bounded: `per_size` images for each of at most `max_sizes` sizes — the
  sizes it is opened with (the default disk), then the most recently asked
  for; a size that drops out has its images deleted.

A size that still has a ready image is refilled once no image has been asked
for during `quiet_s`: the format then does not compete with the start that
took the last one (its container create and start) for the disk and the CPUs.
A size with none left is refilled at once.
"""

from __future__ import annotations

import logging
import math
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from gpudock.errors import RuntimeFailure

log = logging.getLogger(__name__)

POOL_DIR = ".pool"
MAX_SIZES = 4
RETRY_AFTER_FAILURE_S = 30.0  # a failing format (disk full, no mkfs) is not retried in a loop
QUIET_S = 1.0

# (where, size in GiB): format a sparse ext4 image at `where`, atomically
# (written aside, renamed into place), niced: nothing waits for it.
FormatImage = Callable[[Path, int], None]


class VolumePool:
    """Ready images under `<root>/.pool` (see the module's docstring)."""

    def __init__(
        self,
        root: Path,
        per_size: int,
        format_image: FormatImage,
        *,
        sizes: Iterable[int] = (),
        max_sizes: int = MAX_SIZES,
        quiet_s: float = QUIET_S,
    ) -> None:
        self.directory = root / POOL_DIR
        self._per_size = per_size
        self._format = format_image
        self._pinned = tuple(dict.fromkeys(s for s in sizes if s > 0))[:max_sizes]
        self._max_sizes = max_sizes
        self._sizes: OrderedDict[int, None] = OrderedDict.fromkeys(self._pinned)
        self._ready: dict[int, list[Path]] = {}
        self._changed = threading.Condition()
        self._closing = False
        self._failing = False
        self._quiet_s = quiet_s
        self._last_asked = -math.inf  # time.monotonic() of the last `take`
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Delete what an earlier process left in the pool and, if it keeps any
        images, start making them."""
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._per_size <= 0:
            return
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._thread = threading.Thread(
            target=self._refill_forever, name="gpudock-volume-pool", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop refilling (a format under way finishes first); the images stay
        until the next `open` deletes them."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def take(self, size_gb: int, target: Path) -> bool:
        """Move a ready image of `size_gb` to `target`, which must not exist;
        False when none is ready (the caller formats one itself). Either way the
        size counts as in use, and the pool makes the next one."""
        if self._per_size <= 0:
            return False
        with self._changed:
            self._note_asked(size_gb)
            self._last_asked = time.monotonic()
            self._changed.notify_all()
            ready = self._ready.get(size_gb, [])
            while ready:
                image = ready.pop()
                if target.exists():
                    ready.append(image)
                    raise RuntimeFailure(f"volume image {target} exists: it is not the pool's")
                try:
                    image.rename(target)
                except FileNotFoundError:
                    continue  # deleted under us (another process opened a pool here)
                return True
        return False

    def ready_count(self, size_gb: int) -> int:
        with self._changed:
            return len(self._ready.get(size_gb, []))

    def settle(self, timeout_s: float) -> bool:
        """Wait until every size in use has its images (True), or a format
        failed, or `timeout_s` passed (False)."""
        with self._changed:
            return (
                self._changed.wait_for(
                    lambda: self._failing or self._short_of() is None, timeout=timeout_s
                )
                and not self._failing
            )

    # -- the refill thread ---------------------------------------------------------
    def _refill_forever(self) -> None:
        while True:
            size = self._wait_for_due()
            if size is None:
                return
            if not self._make_one(size):
                with self._changed:
                    self._changed.wait_for(lambda: self._closing, timeout=RETRY_AFTER_FAILURE_S)
                    self._failing = False

    def _make_one(self, size_gb: int) -> bool:
        image = self.directory / f"{size_gb}g-{secrets.token_hex(6)}.img"
        try:
            self._format(image, size_gb)
        except (RuntimeFailure, OSError) as exc:
            log.warning("the volume pool could not format a %d GB image: %s", size_gb, exc)
            with self._changed:
                self._failing = True
                self._changed.notify_all()
            return False
        with self._changed:
            kept = size_gb in self._sizes and not self._closing
            if kept:
                self._ready.setdefault(size_gb, []).append(image)
            self._changed.notify_all()
        if not kept:  # the size dropped out while it was formatted
            image.unlink(missing_ok=True)
        return True

    def _wait_for_due(self) -> int | None:
        """The next size to make an image of, when it is due; None when closing."""
        with self._changed:
            while not self._closing:
                quiet_for = time.monotonic() - self._last_asked
                short = self._short_of(empty_only=quiet_for < self._quiet_s)
                if short is not None:
                    return short
                waiting = self._short_of(empty_only=False) is not None
                self._changed.wait(timeout=self._quiet_s - quiet_for if waiting else None)
        return None

    def _short_of(self, *, empty_only: bool = False) -> int | None:
        """A size with fewer ready images than it should have (`empty_only`:
        with none), or None; the lock held."""
        for size in self._sizes:
            ready = len(self._ready.get(size, []))
            if ready < self._per_size and not (empty_only and ready):
                return size
        return None

    def _note_asked(self, size_gb: int) -> None:
        """Most recent first among the unpinned sizes; the oldest drops out (lock held)."""
        if size_gb in self._sizes:
            if size_gb not in self._pinned:
                self._sizes.move_to_end(size_gb)
            return
        self._sizes[size_gb] = None
        unpinned = [s for s in self._sizes if s not in self._pinned]
        while len(self._sizes) > self._max_sizes and unpinned:
            dropped = unpinned.pop(0)
            del self._sizes[dropped]
            for image in self._ready.pop(dropped, []):
                image.unlink(missing_ok=True)
