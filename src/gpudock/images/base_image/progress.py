"""How a base image build reports its progress: `ProgressUpdate`s through six
stages, in this order of first appearance: resolve, download, extract,
install, configure, import. Within a stage `done` never decreases; `total` is
None while unknown and equals `done` once the stage is over. (install and
configure interleave once, as debootstrap unpacks and configures the required
packages first and the rest of the base system after.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STAGES = ("resolve", "download", "extract", "install", "configure", "import")


@dataclass(frozen=True)
class ProgressUpdate:
    stage: str
    done: int
    total: int | None
    message: str


ProgressCallback = Callable[[ProgressUpdate], None]


def ignore_progress(update: ProgressUpdate) -> None:
    """A callback for a build nobody watches."""
    del update
