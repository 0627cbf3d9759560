"""An image from one agent host to another, relayed here (`runtime.transfer`):
the source's `docker save`, framed, into the destination's `docker load`,
resumable as a volume's copy is (`agentgw.volume_copy.relay_stream`)."""

from __future__ import annotations

from collections.abc import Callable

import asyncssh

from gpudock.agentgw.volume_copy import StreamRoute, relay_stream
from gpudock.runtime.transfer import (
    IMAGE_RECEIVE_COMMAND,
    IMAGE_SEND_COMMAND,
    ImageMove,
    ImageSend,
)


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
