"""Listen first, load after: the ASGI app `gpudock server` starts uvicorn with.

Importing the whole server (FastAPI, the routers' schemas, the services, the
reconciler, asyncssh, docker-py) takes longer than a server may take to answer
its first health check, so the server starts in two stages:

1. before the socket opens, in the main thread: the settings, the database at
   its newest schema and the GPU source (what a user's configuration can get
   wrong fails here, before anything listens, with the exit code of a bad
   setting);
2. while uvicorn already listens, in a worker thread: the rest of the server is
   imported and the real app built (`load`); then its lifespan runs on the
   event loop (garbage collection, the reconciler, the SSH gateway).

Once ready, `on_ready` is called on the event loop (the CLI settles the heap
there: `api/heap.py`).

While stage 2 runs, `/healthz` answers 200 (liveness: the process is up and its
database open) and `/readyz` 503; every other request waits, it does not fail,
and is served by the real app once it is ready. `/readyz` answers 200 from then
on. If stage 2 fails, the waiting requests get a 503 that says why, and
`on_failure` is called (the CLI stops uvicorn and exits with the error).

Only the standard library and `gpudock.errors` are imported here: this module
is part of stage 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpudock.errors import GpudockError

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)
PROBES = ("/healthz", "/readyz")


class StagedApp:
    """An ASGI app that is live at once and ready when `load()` has built the
    real app (in a worker thread) and the real app's lifespan has started."""

    def __init__(
        self,
        load: Callable[[], Starlette],
        *,
        service_domain: str | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        on_ready: Callable[[], object] | None = None,
    ) -> None:
        self._load = load
        self._on_ready = on_ready
        self._service_domain = service_domain
        self.on_failure = on_failure
        self.failure: Exception | None = None
        self.ready_after_s: float | None = None
        self.waiting = 0  # requests that arrived before the app was ready
        self._app: Starlette | None = None
        self._settled: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._app is None and self._is_probe(scope):
            await self._probe(scope, send)
            return
        if self._app is None:
            await self._wait_until_settled()
        if self._app is None:
            await self._refuse(scope, send)
            return
        await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        self._settled, self._stop = asyncio.Event(), asyncio.Event()
        running = asyncio.create_task(self._run_real_app(self._settled, self._stop))
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        self._stop.set()
        await running  # a load in its thread cannot be interrupted; it is short
        await send({"type": "lifespan.shutdown.complete"})

    async def _run_real_app(self, settled: asyncio.Event, stop: asyncio.Event) -> None:
        """Load, start the real app's lifespan, serve until stopped, end it; in
        one task, so that the lifespan is entered and left in the same one."""
        began = time.perf_counter()
        try:
            app = await asyncio.to_thread(self._load)
            if stop.is_set():
                return
            async with app.router.lifespan_context(app):
                self._app = app
                self.ready_after_s = time.perf_counter() - began
                log.info("ready %.2f s after the socket opened", self.ready_after_s)
                settled.set()
                if self._on_ready is not None:
                    self._on_ready()
                await stop.wait()
        except Exception as exc:  # reported to the caller (the CLI), which exits with it
            if self._app is not None:
                raise  # an error while stopping: not a failure to start
            self.failure = exc
            expected = isinstance(exc, GpudockError | OSError)  # a message says it all
            log.error("the server failed to start: %s", exc, exc_info=None if expected else exc)
            if self.on_failure is not None:
                self.on_failure(exc)
        finally:
            settled.set()

    async def _wait_until_settled(self) -> None:
        assert self._settled is not None, "requests come after the lifespan's startup"
        self.waiting += 1
        try:
            await self._settled.wait()
        finally:
            self.waiting -= 1

    def _is_probe(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["path"] not in PROBES:
            return False
        if not self._service_domain:
            return True
        # A service URL's host (<service>-<instance>.<domain>) is the proxy's, whatever the path.
        host = dict(scope.get("headers") or ()).get(b"host", b"").decode("latin-1")
        return not host.split(":")[0].endswith("." + self._service_domain)

    async def _probe(self, scope: Scope, send: Send) -> None:
        if scope["path"] == "/healthz":
            await _answer(send, 200, {"status": "ok"})
        elif self.failure is not None:
            await _answer(send, 503, {"status": "failed", **self._failure_body()})
        else:
            await _answer(send, 503, {"status": "loading"})

    async def _refuse(self, scope: Scope, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1011})  # 1011: internal error
        else:
            await _answer(send, 503, self._failure_body())

    def _failure_body(self) -> dict[str, Any]:
        if self.failure is None:
            message = "the server stopped before it was ready; start it again"
        else:
            reason = getattr(self.failure, "message", None) or str(self.failure)
            message = f"the server failed to start: {reason}; see its log"
        return {"error": {"code": "server_not_started", "message": message}}


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    encoded = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(encoded))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": encoded})
