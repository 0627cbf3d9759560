"""Line-chart geometry: scale, averaging to the pixel, and breaks at gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpudock.web.charts import HEIGHT, LEFT, WIDTH, LineChart, TimePoint, line_chart

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
END = START + timedelta(hours=1)


def every(seconds: int, until_s: int, value: float | None, since_s: int = 0) -> list[TimePoint]:
    return [(START + timedelta(seconds=s), value) for s in range(since_s, until_s, seconds)]


def chart(series: list[tuple[str, list[TimePoint]]], floor: float = 0.0) -> LineChart:
    return line_chart(
        series, lambda v: f"{v:g}", START, END, lambda at: at.strftime("%H:%M"), floor_ceiling=floor
    )


def test_a_steady_curve_is_one_run_averaged_to_a_point_every_few_pixels() -> None:
    made = chart([("cpu", every(10, 3600, 40.0))], floor=100.0)
    (line,) = made.lines
    assert len(line.runs) == 1 and line.latest == 40.0
    points = line.runs[0].split()
    assert 150 < len(points) < 360 - 100  # 360 samples, fewer points
    ys = {float(p.split(",")[1]) for p in points}
    plot_h = HEIGHT - 22 - 8
    assert ys == {round(8 + plot_h * 0.6, 1)}  # 40 % of a 100 scale
    assert [t.label for t in made.ticks] == ["0", "50", "100"] and not made.empty
    assert made.x_ticks[0].label == "12:00" and made.x_ticks[-1].label == "13:00"
    xs = [float(p.split(",")[0]) for p in points]
    assert min(xs) >= LEFT and max(xs) <= WIDTH


def test_a_stop_and_unknown_figures_break_the_curve() -> None:
    stopped = every(10, 600, 5.0) + every(10, 3600, 5.0, since_s=1800)
    unknown = every(10, 600, 5.0) + every(10, 1200, None, since_s=600) + every(10, 1800, 5.0, 1200)
    made = chart([("stopped", stopped), ("unknown", unknown)])
    assert [len(line.runs) for line in made.lines] == [2, 2]


def test_the_scale_rounds_up_and_no_samples_is_empty() -> None:
    made = chart([("disk", every(60, 3600, 1300.0))])
    assert made.ticks[-1].label == "2000"
    assert chart([("disk", [])]).empty and chart([("gpu", every(10, 60, None))]).ticks == []
    small = chart([("net", every(60, 3600, 0.3))])
    assert small.ticks[-1].label == "0.5"
