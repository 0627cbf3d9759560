"""An image from one agent host to another, relayed here (`runtime.transfer`):
the source's `docker save`, framed, into the destination's `docker load`,
resumable as a volume's copy is (`agentgw.volume_copy.relay_stream`); or from
this server's own engine to an agent host (`push_image`: gpudock's images that
no registry has)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

import asyncssh

from gpudock.agentgw.volume_copy import (
    ATTEMPTS,
    STALL_S,
    StreamRoute,
    follow,
    next_report,
    relay_stream,
)
from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.transfer import (
    IMAGE_RECEIVE_COMMAND,
    IMAGE_SEND_COMMAND,
    ChunkReader,
    ImageMove,
    ImageSend,
    frames,
)

log = logging.getLogger(__name__)


async def relay_image(
    source_conn: asyncssh.SSHClientConnection,
    target_conn: asyncssh.SSHClientConnection,
    move: ImageMove,
    on_progress: Callable[[int], None],
) -> int:
    """The bytes that crossed this time (less than the stream after a resume);
    `RuntimeFailure` with the engine's words if either end failed."""

    def send(resume_at: int) -> str:
        return IMAGE_SEND_COMMAND + ImageSend(move=move, resume_at=resume_at).model_dump_json()

    route = StreamRoute(
        source_conn,
        target_conn,
        IMAGE_RECEIVE_COMMAND + move.model_dump_json(),
        send,
        f"image {move.ref}",
    )
    copied = await relay_stream(route, on_progress)
    return copied.bytes_sent


async def push_image(
    target_conn: asyncssh.SSHClientConnection,
    move: ImageMove,
    open_chunks: Callable[[], Iterator[bytes]],
    on_progress: Callable[[int], None],
) -> int:
    """An image of this server's own engine (`open_chunks`: its `docker save`,
    made afresh for each try) into `docker load` on the target's host, framed
    and resumable as a relayed move is; the bytes that crossed."""
    what = f"image {move.ref}"
    sent = 0
    for _ in range(ATTEMPTS):
        try:
            receiver = await asyncio.wait_for(
                target_conn.create_process(
                    IMAGE_RECEIVE_COMMAND + move.model_dump_json(), encoding=None
                ),
                STALL_S,
            )
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            raise RuntimeUnavailable(f"sending {what}: no channel ({exc})") from exc
        try:
            first = await next_report(receiver)
            if first is None or first.resume_at is None:
                raise RuntimeFailure(f"the destination did not say where to resume: {first}")
            pushing = asyncio.ensure_future(_push(receiver, open_chunks, first.resume_at))
            try:
                end = await follow(receiver, on_progress, what)
            finally:
                if not pushing.done():  # the destination gave up first: the push ends too
                    receiver.close()
                sent += await pushing
            if end is not None:
                return sent
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            log.warning("sending %s: a link failed (%s); resuming", what, exc)
        finally:
            receiver.close()
    raise RuntimeUnavailable(f"sending {what}: {ATTEMPTS} tries did not finish; the next resumes")


async def _push(
    receiver: asyncssh.SSHClientProcess[bytes],
    open_chunks: Callable[[], Iterator[bytes]],
    resume_at: int,
) -> int:
    """The frames from `resume_at` into the receiver (the save read in a thread)."""
    chunks = await asyncio.to_thread(open_chunks)
    framed = frames(ChunkReader(chunks).read, resume_at)
    pushed = 0
    try:
        while (data := await asyncio.to_thread(next, framed, None)) is not None:
            receiver.stdin.write(data)
            await asyncio.wait_for(receiver.stdin.drain(), STALL_S)
            pushed += len(data)
        receiver.stdin.write_eof()
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        log.warning("image push ended: %s", exc or "stalled")
    return pushed
