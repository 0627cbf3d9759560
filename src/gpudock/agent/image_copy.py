"""An image to or from another host, the agent's ends (`runtime.transfer`):
`docker save` of it on stdout, or stdin into `docker load`. The engine's calls
block, so they run in threads; a bounded queue between the channel and the
load keeps memory flat (SSH's window holds the sender back meanwhile)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import asyncssh
from pydantic import ValidationError

from gpudock.agent.image_delta import without_layers
from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import Runtime
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.transfer import CHUNK, LOAD_COMMAND, SAVE_COMMAND, ImageMove

log = logging.getLogger(__name__)
FAILED = 1
QUEUED = 16  # chunks between the channel and the engine's load


@runtime_checkable
class ImageStreams(Protocol):
    def save_image(self, ref: str) -> Iterator[bytes]: ...

    def load_image(self, chunks: Iterator[bytes]) -> None: ...


def handles(command: str) -> bool:
    return command.startswith((SAVE_COMMAND, LOAD_COMMAND))


async def serve(
    runtime: Runtime,
    process: asyncssh.SSHServerProcess[bytes],
    admit: Callable[[InstanceScope], None],
    spool_dir: Path,
) -> None:
    command = str(process.command)
    saving = command.startswith(SAVE_COMMAND)
    try:
        if not isinstance(runtime, ImageStreams):
            raise RuntimeFailure("this agent's engine cannot save or load images")
        move = ImageMove.model_validate_json(
            command[len(SAVE_COMMAND if saving else LOAD_COMMAND) :]
        )
        if move.scope is not None:
            admit(move.scope)
        if saving:
            await _save(runtime, move, process, spool_dir)
        else:
            await _load(runtime, process)
    except (RuntimeFailure, ValidationError, OSError) as exc:
        log.warning("image transfer failed: %s", exc)
        process.stderr.write(str(exc).encode())
        process.exit(FAILED)
        return
    process.exit(0)


async def _save(
    runtime: ImageStreams,
    move: ImageMove,
    process: asyncssh.SSHServerProcess[bytes],
    spool_dir: Path,
) -> None:
    chunks = await asyncio.to_thread(runtime.save_image, move.ref)
    if move.omit_layers:  # the destination holds those: their files stay here
        chunks = without_layers(chunks, set(move.omit_layers), spool_dir)
    while (chunk := await asyncio.to_thread(next, chunks, None)) is not None:
        process.stdout.write(chunk)
        await process.stdout.drain()


async def _load(runtime: ImageStreams, process: asyncssh.SSHServerProcess[bytes]) -> None:
    pending: queue.Queue[bytes | None] = queue.Queue(QUEUED)
    loading = asyncio.ensure_future(asyncio.to_thread(runtime.load_image, iter(pending.get, None)))
    try:
        while data := await process.stdin.read(CHUNK):
            await asyncio.to_thread(pending.put, data)
    finally:
        await asyncio.to_thread(pending.put, None)
    with contextlib.suppress(asyncio.CancelledError):
        await loading
