"""A server standing in for a service inside an instance: it says what it got
(path, headers, cookies), streams, sets cookies, and echoes WebSocket messages."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import Receive, Scope, Send


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await receive()
        await send(
            {"type": "websocket.accept", "subprotocol": (scope["subprotocols"] or [None])[0]}
        )
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            reply = {k: message[k] for k in ("text", "bytes") if message.get(k) is not None}
            await send({"type": "websocket.send", **reply})
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"].endswith("/stream"):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(3):
            await send(
                {"type": "http.response.body", "body": f"part{n}\n".encode(), "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})
        return
    seen = {
        "path": scope["path"],
        "query": scope["query_string"].decode(),
        "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
        "body": body.decode(errors="replace"),
    }
    headers = [
        (b"content-type", b"application/json"),
        (b"set-cookie", b"app_cookie=1; Path=/"),
        (b"set-cookie", b"gpudock_session=planted; Path=/"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(seen).encode()})


@contextmanager
def echo_server() -> Iterator[tuple[str, int]]:
    """The echo app on 127.0.0.1 (a bound socket: no polling for readiness)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(echo_app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
