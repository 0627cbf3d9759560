"""Mount the console on the app: pages at `/`, vendored assets at `/static`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gpudock.services.instances.usage import CpuMeter
from gpudock.sizes import MIB, format_size
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


def _mib(count_mib: int) -> str:
    """GPU memory, which NVML counts in MiB: 81920 → '80 GiB'."""
    return format_size(count_mib * MIB, precision=0)


def _duration(seconds: int) -> str:
    """4000 → '1 h 06 min'; under a minute, seconds."""
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def mount_console(app: FastAPI) -> None:
    TEMPLATES.env.filters["when"] = _when
    TEMPLATES.env.filters["mib"] = _mib
    TEMPLATES.env.filters["duration"] = _duration
    TEMPLATES.env.filters["size"] = format_size
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
