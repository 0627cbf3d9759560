"""An image from one agent host to another, relayed here (`runtime.transfer`):
the source's `docker save` stream piped into the destination's `docker load`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncssh

from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.runtime.transfer import LOAD_COMMAND, SAVE_COMMAND, ImageMove

PIPE_CHUNK = 1 << 18
STALL_S = 60.0  # no byte for this long: the try is given up (the move retries it)


async def relay_image(
    source_conn: asyncssh.SSHClientConnection,
    target_conn: asyncssh.SSHClientConnection,
    move: ImageMove,
    on_progress: Callable[[int], None],
) -> int:
    """The bytes piped (`on_progress` told as they go); `RuntimeFailure` with the
    engine's words if either end failed."""
    ref = move.ref
    command = move.model_dump_json()
    try:
        loader = await target_conn.create_process(LOAD_COMMAND + command, encoding=None)
        saver = await source_conn.create_process(SAVE_COMMAND + command, encoding=None)
        moved = 0
        while data := await asyncio.wait_for(saver.stdout.read(PIPE_CHUNK), STALL_S):
            loader.stdin.write(data)
            await asyncio.wait_for(loader.stdin.drain(), STALL_S)
            moved += len(data)
            on_progress(moved)
        await asyncio.wait_for(saver.wait_closed(), STALL_S)
        if saver.exit_status != 0:
            loader.close()
            why = (await saver.stderr.read()).decode(errors="replace")
            raise RuntimeFailure(f"could not save image {ref} on its host: {why[-300:]}")
        loader.stdin.write_eof()
        await asyncio.wait_for(loader.wait_closed(), STALL_S)
        if loader.exit_status != 0:
            why = (await loader.stderr.read()).decode(errors="replace")
            raise RuntimeFailure(f"could not load image {ref} on the new host: {why[-300:]}")
        return moved
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        raise RuntimeUnavailable(f"moving image {ref}: a link failed ({exc or 'stalled'})") from exc
