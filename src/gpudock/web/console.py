"""Mount the console on the app: pages at `/`, vendored assets at `/static`."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from markupsafe import Markup
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute

from gpudock.billing.money import format_amount, format_cents
from gpudock.messages import Message
from gpudock.services.context import ServiceContext
from gpudock.services.instances.usage import CpuMeter
from gpudock.services.rate_limits import RateGate
from gpudock.sizes import MIB, format_size
from gpudock.web.deps import TEMPLATES, console_http_errors
from gpudock.web.pages import (
    admin,
    auth,
    billing,
    billing_admin,
    health,
    images,
    instances,
    metrics,
    notifications,
    services,
    ssh_keys,
    terminal,
    tokens,
)
from gpudock.web.terminals import TerminalHub

STATIC_DIR = Path(__file__).parent / "static"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _mib(count_mib: int) -> str:
    """GPU memory, which NVML counts in MiB: 81920 → '80 GiB'."""
    return format_size(count_mib * MIB, precision=0)


def _duration(seconds: int) -> Message:
    """4000 → '1 h 06 min'; under a minute, seconds; from two days, days and hours.
    A message: the template's `t()` shows it in the reader's language."""
    if seconds < 60:
        return Message("{n} s", n=seconds)
    hours, minutes = divmod(seconds // 60, 60)
    if hours >= 48:
        return Message("{d} d {h} h", d=hours // 24, h=hours % 24)
    return (
        Message("{h} h {m} min", h=hours, m=f"{minutes:02d}")
        if hours
        else Message("{n} min", n=minutes)
    )


def _cash(micros: int) -> Markup:
    """An amount as people read it (two decimals), the exact one on hover: the CSV
    and the API keep every micro-unit."""
    template = Markup('<span class="money" title="{0}" data-exact="{0}">{1}</span>')
    return template.format(format_amount(micros), format_cents(micros))


def _favicon() -> FileResponse:
    """Browsers ask for /favicon.ico whatever the page links: the same icon."""
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")


def _mount_terminals(app: FastAPI) -> None:
    """The browser terminals' hub, started and stopped with the app (its shells are
    hung up when the server stops)."""
    ctx: ServiceContext = app.state.context
    settings = ctx.settings
    gate = None
    if settings.rate_limits_enabled:
        gate = RateGate(
            "terminal connections from one address", settings.rate_limit_terminal_address
        )
    hub = TerminalHub(ctx, settings.terminal_reattach_grace_s, gate)
    app.state.terminals = hub
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(running: FastAPI) -> AsyncIterator[Any]:
        async with inner(running) as state:
            await hub.start()
            try:
                yield state
            finally:
                await hub.stop()

    app.router.lifespan_context = lifespan
    app.include_router(terminal.router)


@functools.cache
def _page_routes() -> tuple[BaseRoute, ...]:
    """The console's pages, built once per process and shared by its apps, as the
    API's routes are (`api.app._api_routes`): a page finds its context in
    `request.app.state`."""
    staged = APIRouter()  # what FastAPI.include_router includes into
    for router in (
        auth.router,
        notifications.router,  # before instances: its POST /instances/{id}/{action} is a catch-all
        instances.router,
        admin.router,
        ssh_keys.router,
        tokens.router,
        billing.router,
        images.router,
        billing_admin.router,
        health.router,
        metrics.router,
        services.router,
    ):
        staged.include_router(router)
    return tuple(staged.routes)


def mount_console(app: FastAPI) -> None:
    """After the API's error handlers: the console wraps the one for HTTP errors."""
    TEMPLATES.env.filters["when"] = _when
    TEMPLATES.env.filters["mib"] = _mib
    TEMPLATES.env.filters["duration"] = _duration
    TEMPLATES.env.filters["size"] = format_size
    TEMPLATES.env.filters["cash"] = _cash
    app.state.cpu_meter = CpuMeter()
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_api_route("/favicon.ico", _favicon, include_in_schema=False)
    api_handler = app.exception_handlers[StarletteHTTPException]
    app.add_exception_handler(StarletteHTTPException, console_http_errors(api_handler))
    app.router.routes.extend(_page_routes())
    _mount_terminals(app)
