"""Request bodies too large for memory: streamed to a file, the limit enforced
while reading, every write off the event loop.

A 600 MB upload must neither fill the server's memory nor stall its loop (the
SSH gateway and every other request share it): the declared length is checked
first, then each chunk is counted as it arrives and written from a worker
thread; past the limit the file is deleted and the client gets a 413.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from gpudock.errors import InvalidRequest, PayloadTooLarge


def _too_large(what: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the {what} is over the {limit // 2**20} MiB limit: leave large files out of it "
        "(.dockerignore) and put data in /root/data instead"
    )


async def receive_upload(request: Request, limit: int, what: str) -> Path:
    """The body, on disk; PayloadTooLarge past `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError as exc:
            raise InvalidRequest("bad Content-Length header") from exc
        if length > limit:
            raise _too_large(what, limit)
    handle: IO[bytes] = await run_in_threadpool(
        tempfile.NamedTemporaryFile, suffix=".upload", delete=False
    )
    path = Path(handle.name)
    try:
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise _too_large(what, limit)
            await run_in_threadpool(handle.write, chunk)
    except BaseException:
        await run_in_threadpool(handle.close)
        path.unlink(missing_ok=True)
        raise
    await run_in_threadpool(handle.close)
    return path
