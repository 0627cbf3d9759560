"""Mount the console on the app: pages at `/`, vendored assets at `/static`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gpudock.services.instances.usage import CpuMeter
from gpudock.web.deps import TEMPLATES
from gpudock.web.pages import (
    admin,
    auth,
    billing,
    billing_admin,
    health,
    images,
    instances,
    ssh_keys,
    tokens,
)

STATIC_DIR = Path(__file__).parent / "static"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else ""


def _gib(memory_mb: int) -> str:
    return f"{memory_mb / 1024:.0f} GB"


def _duration(seconds: int) -> str:
    """4000 → '1 h 06 min'; under a minute, seconds."""
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def _size(size_bytes: int) -> str:
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes // 1024} KB"


def mount_console(app: FastAPI) -> None:
    TEMPLATES.env.filters["when"] = _when
    TEMPLATES.env.filters["gib"] = _gib
    TEMPLATES.env.filters["duration"] = _duration
    TEMPLATES.env.filters["size"] = _size
    app.state.cpu_meter = CpuMeter()
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in (
        auth.router,
        instances.router,
        admin.router,
        ssh_keys.router,
        tokens.router,
        billing.router,
        images.router,
        billing_admin.router,
        health.router,
    ):
        app.include_router(router)
