"""The base image build's progress as Rich bars, one per stage
(`gpudock images build-base`; the stages: `gpudock.images.base_image.progress`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gpudock.images.base_image.progress import ProgressCallback, ProgressUpdate

MESSAGE_WIDTH = 36


@contextmanager
def stage_bars(console: Console | None = None) -> Iterator[ProgressCallback]:
    """A callback that draws each stage's bar while in the block."""
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
                message=update.message[:MESSAGE_WIDTH],
            )

        yield show
