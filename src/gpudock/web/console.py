"""Mount the console on the app: pages at `/`, vendored assets at `/static`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gpudock.services.instances.usage import CpuMeter
from gpudock.web import (
    pages_admin,
    pages_auth,
    pages_billing,
    pages_billing_admin,
    pages_health,
    pages_images,
    pages_instances,
    pages_ssh_keys,
    pages_tokens,
)
from gpudock.web.deps import TEMPLATES

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
        pages_auth.router,
        pages_instances.router,
        pages_admin.router,
        pages_ssh_keys.router,
        pages_tokens.router,
        pages_billing.router,
        pages_images.router,
        pages_billing_admin.router,
        pages_health.router,
    ):
        app.include_router(router)
