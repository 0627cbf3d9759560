"""The app factory: settings in, FastAPI app out; nothing is built at import."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Protocol

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute

from gpudock import __version__
from gpudock.api.deps import document_admin_only
from gpudock.api.errors import error_responses, install_error_handlers
from gpudock.api.foreground import ForegroundMiddleware
from gpudock.api.prometheus import serve_on_own_address
from gpudock.api.ratelimit import HttpGates, RateLimitMiddleware
from gpudock.api.routers import (
    agent_hosts,
    billing,
    gpus,
    health,
    images,
    instances,
    metrics,
    notifications,
    services,
    ssh,
    tokens,
    users,
)
from gpudock.proxy.app import ServiceProxy
from gpudock.services.context import ServiceContext
from gpudock.web.console import mount_console

API_PREFIX = "/api/v1"
ERROR_RESPONSES = error_responses(401, 422, 429)  # any route; each adds its own


class Sidecar(Protocol):
    """A server on the app's event loop (the SSH gateway): started after the
    platform, stopped before it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Hosted(Protocol):
    """What the app runs beside itself: the platform `gpudock server` composes
    (`gpudock.platform`); the app knows it only by this shape."""

    @property
    def ctx(self) -> ServiceContext: ...

    @property
    def sidecars(self) -> Sequence[Sidecar]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


def create_app(platform: Hosted, *, run_reconciler: bool = True) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if run_reconciler:
            # Off the loop: the start-up garbage collection talks to the engine,
            # and a staged server (api/staged.py) answers probes meanwhile.
            await asyncio.to_thread(platform.start)
        bind = platform.ctx.settings.metrics_bind
        scrape_server = serve_on_own_address(platform.ctx, bind) if bind else None
        started = []  # sidecars (the SSH gateway) share this event loop
        try:
            for sidecar in platform.sidecars:
                await sidecar.start()
                started.append(sidecar)
            yield
        finally:
            for sidecar in reversed(started):
                await sidecar.stop()
            if scrape_server is not None:
                scrape_server.shutdown()
                scrape_server.server_close()
            if run_reconciler:
                platform.stop()

    app = FastAPI(
        title="gpudock",
        version=__version__,
        description="Self-hosted GPU cloud API. Every endpoint needs a Bearer token (gpd_…).",
        lifespan=lifespan,
    )
    app.state.context = platform.ctx
    install_error_handlers(app)
    if platform.ctx.settings.rate_limits_enabled:
        app.add_middleware(
            RateLimitMiddleware, gates=HttpGates.from_settings(platform.ctx.settings)
        )
    app.router.routes.extend(_api_routes())
    document_admin_only(app, API_PREFIX, _routers())

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> dict[str, str]:
        """Served once the lifespan has started (api/staged.py answers before)."""
        return {"status": "ready"}

    mount_console(app)  # the web console at /; the API stays under /api/v1
    app.add_middleware(ServiceProxy, ctx=platform.ctx)  # /i/… and service hosts, first
    app.add_middleware(ForegroundMiddleware, foreground=platform.ctx.foreground)

    return app


def _routers() -> tuple[APIRouter, ...]:
    return (
        users.router,
        tokens.router,
        gpus.router,
        instances.router,
        services.router,
        images.router,
        images.instance_router,
        billing.router,
        ssh.router,
        health.router,
        notifications.router,
        metrics.router,
        agent_hosts.router,
    )


@functools.cache
def _api_routes() -> tuple[BaseRoute, ...]:
    """The API's routes under API_PREFIX, and the Prometheus scrape, built once per
    process. FastAPI builds each route's fields and dependencies as it is included
    (~0.35 s for gpudock's, most of an app's making), and nothing in a route is the
    app's own: a request finds its context in `request.app.state`. So every app of
    the process (the test suite makes hundreds) shares them. (Their dependency
    overrides would be none: gpudock sets none.)"""
    api = APIRouter(prefix=API_PREFIX, responses=ERROR_RESPONSES)
    for router in _routers():
        api.include_router(router)
    staged = APIRouter()  # what FastAPI.include_router includes into
    staged.include_router(api)
    staged.include_router(metrics.prometheus_router)
    return tuple(staged.routes)
