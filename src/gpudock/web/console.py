"""Mount the console on the app: pages at `/`, vendored assets at `/static`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gpudock.web import extensions, pages_admin, pages_auth, pages_instances
from gpudock.web.deps import TEMPLATES

STATIC_DIR = Path(__file__).parent / "static"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _gib(memory_mb: int) -> str:
    return f"{memory_mb / 1024:.0f} GB"


def mount_console(app: FastAPI) -> None:
    TEMPLATES.env.filters["when"] = _when
    TEMPLATES.env.filters["gib"] = _gib
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in (
        pages_auth.router,
        pages_instances.router,
        pages_admin.router,
        *extensions.optional_routers(),
    ):
        app.include_router(router)
