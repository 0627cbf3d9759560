"""WebSockets through the proxy: the browser's side is the ASGI server's
(uvicorn's, over the `websockets` package), the instance's side a
`websockets` client on a socket into the container's network namespace;
messages are passed on as they are, both ways.

Liveness, not silence, ends a connection: the instance's side is pinged every
`min(20 s, timeout / 3)` and dropped when a pong is `timeout` late, so a kernel
that sends nothing for hours stays connected while both ends answer, and one
whose instance vanished (a paused container, a dead host) is closed after
the idle timeout. (uvicorn pings the browser's side on its own.) A close on
either side closes the other, with its code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

log = logging.getLogger(__name__)
HANDSHAKE_HEADERS = frozenset(
    {b"host", b"origin", b"content-length", b"user-agent", b"sec-websocket-protocol"}
)
GOING_AWAY, INTERNAL_ERROR = 1001, 1011


def ping_schedule(idle_timeout_s: float) -> tuple[float, float]:
    """(ping interval, how long after a ping its pong may come)."""
    interval = min(20.0, idle_timeout_s / 3)
    return interval, idle_timeout_s - interval


def _subprotocols(scope: Scope) -> list[str]:
    return [str(p) for p in scope.get("subprotocols") or []]


def _extra_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [
        (n.decode("latin-1"), v.decode("latin-1"))
        for n, v in headers
        if n not in HANDSHAKE_HEADERS and not n.startswith(b"sec-websocket-")
    ]


async def bridge(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    sock: socket.socket,
    target: str,
    headers: list[tuple[bytes, bytes]],
    origin: str | None,
    idle_timeout_s: float,
    while_open: Callable[[float], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Connect to the instance over `sock` (connected), then accept the browser
    and relay until one side closes; `while_open(interval)` runs (at the ping
    interval) as long as the connection does."""
    interval, timeout = ping_schedule(idle_timeout_s)
    message = await receive()
    if message["type"] != "websocket.connect":
        sock.close()
        return
    try:
        upstream = await connect(
            f"ws://127.0.0.1{target}",
            sock=sock,
            origin=origin,  # type: ignore[arg-type]
            subprotocols=_subprotocols(scope) or None,  # type: ignore[arg-type]
            additional_headers=_extra_headers(headers),
            user_agent_header=None,
            proxy=None,
            compression=None,
            max_size=None,
            ping_interval=interval,
            ping_timeout=timeout,
            open_timeout=10,
        )
    except (InvalidHandshake, OSError, TimeoutError) as exc:
        sock.close()
        status = exc.response.status_code if isinstance(exc, InvalidStatus) else 502
        log.info("websocket to %s refused by the instance: %s", target, exc)
        await send({"type": "websocket.close", "code": 1008 if status < 500 else INTERNAL_ERROR})
        return
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
    alongside = asyncio.create_task(while_open(interval)) if while_open else None
    try:
        await _relay(upstream, receive, send)
    finally:
        if alongside is not None:
            alongside.cancel()


async def _relay(upstream: ClientConnection, receive: Receive, send: Send) -> None:
    to_instance = asyncio.create_task(_browser_to_instance(upstream, receive))
    to_browser = asyncio.create_task(_instance_to_browser(upstream, send))
    try:
        await asyncio.wait({to_instance, to_browser}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (to_instance, to_browser):
            task.cancel()
        with contextlib.suppress(Exception):
            await upstream.close()


async def _browser_to_instance(upstream: ClientConnection, receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            code = int(message.get("code") or GOING_AWAY)
            await upstream.close(code if 1000 <= code < 5000 and code != 1005 else GOING_AWAY)
            return
        data = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        try:
            await upstream.send(data)
        except ConnectionClosed:
            return


async def _instance_to_browser(upstream: ClientConnection, send: Send) -> None:
    try:
        async for data in upstream:
            key = "text" if isinstance(data, str) else "bytes"
            await send({"type": "websocket.send", key: data})
    except ConnectionClosed:
        pass
    code = upstream.close_code or INTERNAL_ERROR
    if code in (1005, 1006):
        code = INTERNAL_ERROR
    with contextlib.suppress(Exception):
        await send({"type": "websocket.close", "code": code})
