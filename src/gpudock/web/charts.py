"""Bar and line charts as inline SVG geometry: computed here, drawn by
`macros.html`'s `bar_chart` and `line_chart`.

No JavaScript and nothing fetched: the page carries its own picture, which
also prints, scales and survives a strict Content-Security-Policy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH = 720
HEIGHT = 180
LEFT = 64  # room for the axis labels
BOTTOM = 22  # room for the bar labels
TOP = 8
MAX_SLOT = 56.0  # a few bars stay bars, not walls


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # under the bar ('' to skip)
    title: str  # the tooltip: label and value


@dataclass(frozen=True)
class Tick:
    y: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    baseline: float
    bars: list[Bar]
    ticks: list[Tick]
    empty: bool


def _nice_ceiling(value: int) -> int:
    """The smallest 1, 2 or 5 × 10^n at or above `value` (≥ 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def bar_chart(
    points: list[tuple[str, int]],
    fmt: Callable[[int], str],
    *,
    every: int = 1,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Chart:
    """Bars for (label, value ≥ 0) points; `fmt` turns a value into text; every
    `every`-th label is printed under its bar (the tooltip always has it)."""
    top = _nice_ceiling(max((v for _, v in points), default=0) or 1)
    plot_w, plot_h = width - LEFT, height - BOTTOM - TOP
    slot = min(plot_w / max(len(points), 1), MAX_SLOT)
    gap = min(4.0, slot * 0.2)
    bars = []
    for n, (label, value) in enumerate(points):
        h = plot_h * max(value, 0) / top
        bars.append(
            Bar(
                x=round(LEFT + n * slot + gap / 2, 1),
                y=round(TOP + plot_h - h, 1),
                width=round(slot - gap, 1),
                height=round(h, 1),
                label=label if n % every == 0 else "",
                title=f"{label}: {fmt(value)}",
            )
        )
    empty = not any(v > 0 for _, v in points)
    # An empty chart has no scale to read: its axis would say "0.000001 / 0 / 0".
    fractions = () if empty else (0, 0.5, 1)
    ticks = [Tick(round(TOP + plot_h * (1 - f), 1), fmt(int(top * f))) for f in fractions]
    return Chart(width, height, LEFT, TOP + plot_h, bars, ticks, empty)


# Line charts: curves over a time window (the instance page's samples).

SERIES_STYLES = 8  # console.css colours series c0..c7; more series reuse them
LINE_STEP_PX = 3.0  # one averaged point per this many pixels: a week stays ~200 points
GAP_SPACINGS = 3  # a gap of more than this many typical spacings breaks the curve

TimePoint = tuple[datetime, float | None]


@dataclass(frozen=True)
class Line:
    label: str
    style: str  # the CSS class of its colour
    runs: list[str]  # SVG polyline points, one string per unbroken stretch
    latest: float | None  # the newest known sample as it was, not averaged: the legend's "now"


@dataclass(frozen=True)
class XTick:
    x: float
    label: str


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    left: int
    baseline: float
    lines: list[Line]
    ticks: list[Tick]
    x_ticks: list[XTick]
    empty: bool


def _nice_float_ceiling(value: float) -> float:
    """As `_nice_ceiling`, for values below 1 too (0.3 → 0.5)."""
    if value >= 1:
        return float(_nice_ceiling(math.ceil(value)))
    scale = 1.0
    while value * scale < 1:
        scale *= 10
    return _nice_ceiling(math.ceil(value * scale)) / scale


def _bucketed(points: list[TimePoint], start: datetime, slot_s: float) -> list[TimePoint]:
    """The known values averaged per slot of `slot_s` seconds, at the slot's mean time."""
    slots: dict[int, list[tuple[float, float]]] = {}
    for at, value in points:
        if value is None or at < start:
            continue
        offset = (at - start).total_seconds()
        slots.setdefault(int(offset // slot_s), []).append((offset, value))
    return [
        (
            start + timedelta(seconds=sum(o for o, _ in part) / len(part)),
            sum(v for _, v in part) / len(part),
        )
        for _, part in sorted(slots.items())
    ]


def _largest_gap_s(series: list[list[TimePoint]], slot_s: float) -> float:
    """How far apart two points may be and still be joined: a few times the
    samples' usual spacing (so a stopped instance shows as a gap), never less
    than two slots (so averaging alone never breaks a curve)."""
    spacings = sorted(
        (b[0] - a[0]).total_seconds()
        for points in series
        for a, b in itertools.pairwise([p for p in points if p[1] is not None])
    )
    typical = spacings[len(spacings) // 2] if spacings else 0.0
    return max(GAP_SPACINGS * typical, 2 * slot_s)


def _runs(
    points: list[TimePoint], xy: Callable[[datetime, float], str], max_gap_s: float
) -> list[str]:
    runs: list[list[str]] = []
    previous: datetime | None = None
    for at, value in points:
        if value is None:
            continue
        if previous is None or (at - previous).total_seconds() > max_gap_s:
            runs.append([])
        runs[-1].append(xy(at, value))
        previous = at
    return [" ".join(run) for run in runs]


def _latest(points: list[TimePoint]) -> float | None:
    return next((v for _, v in reversed(points) if v is not None), None)


def line_chart(
    series: list[tuple[str, list[TimePoint]]],
    fmt: Callable[[float], str],
    start: datetime,
    end: datetime,
    time_label: Callable[[datetime], str],
    *,
    floor_ceiling: float = 0.0,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> LineChart:
    """Curves for (label, [(time, value ≥ 0 or None)]) series over [start, end].
    Points are averaged to one per few pixels; None values and long gaps break
    a curve. The scale's top is a round number at or above the largest value
    and at least `floor_ceiling` (100 keeps a percentage chart honest at 3 %)."""
    plot_w, plot_h = width - LEFT, height - BOTTOM - TOP
    span_s = max((end - start).total_seconds(), 1.0)
    slot_s = span_s / max(plot_w / LINE_STEP_PX, 1)
    reduced = [(label, _bucketed(points, start, slot_s)) for label, points in series]
    largest = max((v for _, pts in reduced for _, v in pts if v is not None), default=0.0)
    top = _nice_float_ceiling(max(largest, floor_ceiling) or 1.0)
    max_gap = _largest_gap_s([points for _, points in series], slot_s)

    def xy(at: datetime, value: float) -> str:
        x = LEFT + plot_w * min(max((at - start).total_seconds() / span_s, 0.0), 1.0)
        return f"{x:.1f},{TOP + plot_h * (1 - min(value, top) / top):.1f}"

    lines = [
        Line(label, f"c{n % SERIES_STYLES}", _runs(points, xy, max_gap), _latest(raw))
        for n, ((label, points), (_, raw)) in enumerate(zip(reduced, series, strict=True))
    ]
    empty = not any(line.runs for line in lines)
    fractions = () if empty else (0, 0.5, 1)
    ticks = [Tick(round(TOP + plot_h * (1 - f), 1), fmt(top * f)) for f in fractions]
    x_ticks = [
        XTick(round(LEFT + plot_w * f, 1), time_label(start + timedelta(seconds=span_s * f)))
        for f in (0, 0.25, 0.5, 0.75, 1)
    ]
    return LineChart(width, height, LEFT, TOP + plot_h, lines, ticks, x_ticks, empty)
