"""Bar charts as inline SVG geometry: computed here, drawn by `macros.html`'s `bar_chart`.

No JavaScript and nothing fetched: the page carries its own picture, which
also prints, scales and survives a strict Content-Security-Policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
