"""An image to or from another host, the agent's ends (`runtime.transfer`), over
the framed, resumable stream of `agent.framed`: `docker save` of it framed on
stdout, or the frames spooled and fed into `docker load` as they land. The
engine's calls block, so they run in threads; a bounded queue between the
frames and the load keeps memory flat (SSH's window holds the sender back)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncssh
from pydantic import ValidationError

from gpudock.agent import framed
from gpudock.errors import RuntimeFailure
from gpudock.runtime.base import Runtime
from gpudock.runtime.calls import InstanceScope
from gpudock.runtime.image_delta import without_layers
from gpudock.runtime.transfer import (
    IMAGE_RECEIVE_COMMAND,
    IMAGE_SEND_COMMAND,
    ChunkReader,
    ImageMove,
    ImageSend,
    ImageStreams,
    image_spool_name,
)

log = logging.getLogger(__name__)
QUEUED = 16  # chunks between the frames and the engine's load


def handles(command: str) -> bool:
    return command.startswith((IMAGE_SEND_COMMAND, IMAGE_RECEIVE_COMMAND))


async def serve(
    runtime: Runtime,
    process: asyncssh.SSHServerProcess[bytes],
    admit: Callable[[InstanceScope], None],
    spool_dir: Path,
) -> None:
    command = str(process.command)
    sending = command.startswith(IMAGE_SEND_COMMAND)
    try:
        if not isinstance(runtime, ImageStreams):
            raise RuntimeFailure("this agent's engine cannot save or load images")
        if sending:
            send = ImageSend.model_validate_json(command[len(IMAGE_SEND_COMMAND) :])
            if send.move.scope is not None:
                admit(send.move.scope)
            await _send(runtime, send, process, spool_dir)
        else:
            move = ImageMove.model_validate_json(command[len(IMAGE_RECEIVE_COMMAND) :])
            if move.scope is not None:
                admit(move.scope)
            await framed.receive_stream(
                process,
                spool_dir / image_spool_name(move),
                lambda: _Loader(runtime, move.ref),
                f"image {move.ref}",
            )
    except (RuntimeFailure, ValidationError, OSError) as exc:
        await framed.failed(process, sending, "image", exc)


async def _send(
    runtime: ImageStreams,
    send: ImageSend,
    process: asyncssh.SSHServerProcess[bytes],
    spool_dir: Path,
) -> None:
    move = send.move
    chunks = await asyncio.to_thread(runtime.save_image, move.ref)
    if move.omit_layers:  # the destination holds those: their files stay here
        chunks = without_layers(chunks, set(move.omit_layers), spool_dir)
    # A read under way when the link goes ends by itself: the engine's save streams on.
    sent = await framed.send_stream(process, ChunkReader(chunks), send.resume_at, lambda: None)
    if sent is not None:
        await framed.end_stream(process, *sent)


class _Loader:
    """`docker load` in a thread of its own, fed through a bounded queue; a
    load that fails early drops the rest of what is written."""

    def __init__(self, runtime: ImageStreams, ref: str) -> None:
        self._ref = ref
        self._queue: queue.Queue[bytes | None] = queue.Queue(QUEUED)
        self._failure: Exception | None = None
        self._ended = False
        self._thread = threading.Thread(
            target=self._load, args=(runtime,), name="gpudock-image-load", daemon=True
        )
        self._thread.start()

    def _chunks(self) -> Iterator[bytes]:
        while (chunk := self._queue.get()) is not None:
            yield chunk
        self._ended = True

    def _load(self, runtime: ImageStreams) -> None:
        try:
            runtime.load_image(self._chunks())
        except Exception as exc:  # the engine's words, told at `finish`
            self._failure = exc
        finally:
            while not self._ended:  # writers must never wait on a load that stopped
                self._ended = self._queue.get() is None

    def write(self, data: bytes) -> None:
        self._queue.put(data)

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._failure is not None:
            raise RuntimeFailure(f"could not load image {self._ref}: {self._failure}")

    def abort(self) -> None:
        self._queue.put(None)
        self._thread.join()
