"""A real gpudock server in a background thread, and a runner for the CLI against it."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import uvicorn
from typer.testing import Result

from gpudock.api.app import create_app
from gpudock.platform import Platform

FLEET = "1x4xA100-80GB,1x2xRTX4090-24GB"


STARTUP_DEADLINE_S = 30.0


@dataclass(frozen=True)
class LiveServer:
    url: str
    admin_token: str
    data_dir: Path


def wait_until_started(server: uvicorn.Server, thread: threading.Thread) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test server exited during startup")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test server did not start in {STARTUP_DEADLINE_S} s")
        time.sleep(0.01)


@contextmanager
def serving(platform: Platform) -> Iterator[LiveServer]:
    """The platform's API on a free port, in a background thread; closed afterwards."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))  # the port is ours from here on: no race for it
    port = listener.getsockname()[1]
    config = uvicorn.Config(create_app(platform), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="gpudock-test-server"
    )
    thread.start()
    try:
        wait_until_started(server, thread)
        data_dir = platform.ctx.settings.data_dir
        token = (data_dir / "admin.token").read_text().strip()
        yield LiveServer(url=f"http://127.0.0.1:{port}", admin_token=token, data_dir=data_dir)
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_DEADLINE_S)
        listener.close()
        platform.close()
    assert not thread.is_alive(), "the test server did not shut down"


Invoke = Callable[..., Result]


instance_names = itertools.count()


@dataclass(frozen=True)
class Answer:
    method: str
    path: str
    status: int
    body: bytes


class RecordingProxy:
    """An HTTP proxy in front of a server that keeps every answer it passes on, so
    that a test can compare what the CLI printed with exactly what the server sent
    (two requests of the same listing need not agree: money accrues, hours pass)."""

    FORWARDED = ("content-type", "www-authenticate", "retry-after")

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.answers: list[Answer] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="recording-proxy")

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "host"}
        upstream = httpx.request(
            handler.command,
            self.upstream + handler.path,
            headers=headers,
            content=handler.rfile.read(length),
            timeout=STARTUP_DEADLINE_S,
        )
        self.answers.append(
            Answer(handler.command, handler.path, upstream.status_code, upstream.content)
        )
        handler.send_response(upstream.status_code)
        for name in self.FORWARDED:
            if name in upstream.headers:
                handler.send_header(name, upstream.headers[name])
        handler.send_header("Content-Length", str(len(upstream.content)))
        handler.end_headers()
        handler.wfile.write(upstream.content)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        forward = self._forward

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                forward(self)

            do_POST = do_PUT = do_DELETE = do_GET

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: pytest shows what a failing test needs."""

        return Handler
