"""Monitoring pages: an instance's curves (a fragment of its page) and the
operator's fleet utilisation per GPU model and host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from fastapi import APIRouter, Request, Response

from gpudock.errors import InvalidRequest
from gpudock.services.metrics import fleet, series
from gpudock.services.metrics.store import Sample
from gpudock.sizes import MIB, format_size
from gpudock.web import charts
from gpudock.web.charts import LineChart, TimePoint
from gpudock.web.deps import AdminViewer, ConsoleRoute, Context, Viewer, render

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

# The windows the selector offers: key → (how long, how its time axis reads).
WINDOWS: dict[str, tuple[timedelta, str]] = {
    "1h": (timedelta(hours=1), "%H:%M"),
    "1d": (timedelta(days=1), "%H:%M"),
    "1w": (timedelta(weeks=1), "%m-%d"),
}
KIB = 1024.0  # the least a byte chart's scale reaches: an idle disk reads 0 / 512 B / 1 KiB
REFRESH_S = 30  # the curves move by a pixel every ~16 s in the hour window


@dataclass(frozen=True)
class ChartView:
    id: str
    title: str  # an English catalog key
    chart: LineChart
    fmt: Callable[[float], str]


def _window(key: str) -> tuple[timedelta, str]:
    if key not in WINDOWS:
        raise InvalidRequest(
            f"unknown window {key[:16]!r}: use {', '.join(WINDOWS)}", field="window"
        )
    return WINDOWS[key]


def _percent(value: float) -> str:
    return f"{value:.0f} %"


def _bytes(value: float) -> str:
    return format_size(round(value))


def _rate(value: float) -> str:
    return f"{format_size(round(value))}/s"


def _mib(value: float) -> str:
    return format_size(round(value * MIB), precision=0)


def _figure(samples: list[Sample], read: Callable[[Sample], float | None]) -> list[TimePoint]:
    return [(s.at, read(s)) for s in samples]


def _gpu_figure(samples: list[Sample], gpu: int, memory: bool) -> list[TimePoint]:
    def read(s: Sample) -> float | None:
        if gpu >= len(s.gpus):
            return None
        figure = s.gpus[gpu]
        return figure.memory_used_mb if memory else figure.utilisation_percent

    return _figure(samples, read)


def instance_charts(
    samples: list[Sample], start: datetime, end: datetime, axis: str
) -> list[ChartView]:
    """The instance page's curves: GPU utilisation and memory (a curve per
    GPU, when it has any), CPU, memory, disk read/write, network in/out."""

    def chart(
        id_: str,
        title: str,
        lines: list[tuple[str, list[TimePoint]]],
        fmt: Callable[[float], str],
        floor: float = 0.0,
    ) -> ChartView:
        made = charts.line_chart(
            lines, fmt, start, end, lambda at: at.strftime(axis), floor_ceiling=floor
        )
        return ChartView(id_, title, made, fmt)

    width = max((len(s.gpus) for s in samples), default=0)
    views = []
    if width:
        gpus = [f"GPU {n}" for n in range(width)]
        utilisation = [(g, _gpu_figure(samples, n, memory=False)) for n, g in enumerate(gpus)]
        memory = [(g, _gpu_figure(samples, n, memory=True)) for n, g in enumerate(gpus)]
        views.append(chart("chart-gpu", "GPU utilisation", utilisation, _percent, 100.0))
        views.append(chart("chart-gpu-memory", "GPU memory", memory, _mib, KIB))
    views += [
        chart(
            "chart-cpu",
            "CPU",
            [("CPU", _figure(samples, lambda s: s.cpu_percent))],
            _percent,
            100.0,
        ),
        chart(
            "chart-memory",
            "Memory",
            [("Memory", _figure(samples, lambda s: float(s.memory_bytes)))],
            _bytes,
            KIB,
        ),
        chart(
            "chart-disk",
            "Disk read / write",
            [
                ("read", _figure(samples, lambda s: s.disk_read_bps)),
                ("written", _figure(samples, lambda s: s.disk_write_bps)),
            ],
            _rate,
            KIB,
        ),
        chart(
            "chart-network",
            "Network in / out",
            [
                ("received", _figure(samples, lambda s: s.net_rx_bps)),
                ("sent", _figure(samples, lambda s: s.net_tx_bps)),
            ],
            _rate,
            KIB,
        ),
    ]
    return views


@router.get("/instances/{instance_id}/metrics")
def instance_metrics(
    request: Request, ctx: Context, viewer: Viewer, instance_id: str, window: str = "1h"
) -> Response:
    """The curves over the chosen window, refreshed by htmx every REFRESH_S."""
    length, axis = _window(window)
    found = series.instance_series(ctx, viewer.user, instance_id, window)
    end = ctx.clock()
    views = instance_charts(found.samples, end - length, end, axis) if found.samples else []
    return render(
        request,
        "fragments/instance_metrics.html",
        viewer,
        instance_id=found.instance_id,
        window=window,
        windows=list(WINDOWS),
        views=views,
        refresh_s=REFRESH_S,
    )


@router.get("/admin/utilisation")
def fleet_utilisation(
    request: Request, ctx: Context, viewer: AdminViewer, window: str = "1d"
) -> Response:
    length, _ = _window(window)
    rows = fleet.utilisation_by_model_and_host(ctx, length)
    return render(
        request,
        "admin_utilisation.html",
        viewer,
        rows=rows,
        window=window,
        windows=list(WINDOWS),
    )
