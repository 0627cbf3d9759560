"""The instance page's curves and the operator's utilisation page, on the fake
runtime with samples written as the sampler writes them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from gpudock.platform import Platform
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples
from gpudock.web.i18n import ZH_CN
from gpudock.web.pages.metrics import instance_charts
from tests.support.web import Browser, log_in

GIB = 2**30


def running_instance(console: Platform, browser: Browser, count: int = 2) -> str:
    data = {
        "gpu_model": "A100-80GB",
        "gpu_count": str(count),
        "name": "",
        "image": "",
        "disk_gb": "",
    }
    response = browser.post("/instances", data)
    assert response.status_code == 303, response.text
    instance_id: str = response.headers["location"].rsplit("/", 1)[1]
    console.reconciler.drain()
    return instance_id


def busy_samples(instance_id: str, now: datetime, minutes: int = 10) -> list[Sample]:
    """A sample a minute: CPU at 150 %, GPU 0 at 90 % and GPU 1 idle."""
    return [
        Sample(
            instance_id=instance_id,
            at=now - timedelta(minutes=m),
            cpu_percent=150.0,
            memory_bytes=2 * GIB,
            disk_read_bps=4096.0,
            disk_write_bps=0.0,
            net_rx_bps=100.0,
            net_tx_bps=50.0,
            gpus=(GpuFigure(90.0, 1024.0), GpuFigure(0.0, 0.0)),
        )
        for m in range(minutes, 0, -1)
    ]


def record(console: Platform, samples: list[Sample]) -> None:
    with console.ctx.sessions.begin() as session:
        record_samples(session, samples)


def test_page_loads_the_curves_and_shows_no_samples_yet(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = running_instance(console, alice)
    page = alice.client.get(f"/instances/{instance_id}")
    assert f'hx-get="/instances/{instance_id}/metrics?window=1h"' in page.text
    fragment = alice.client.get(f"/instances/{instance_id}/metrics")
    assert fragment.status_code == 200
    assert 'id="no-samples"' in fragment.text and "<polyline" not in fragment.text


def test_curves_per_gpu_cpu_memory_disk_and_network(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = running_instance(console, alice)
    record(console, busy_samples(instance_id, console.ctx.clock()))
    html = alice.client.get(f"/instances/{instance_id}/metrics?window=1h").text
    for chart in ("chart-gpu", "chart-gpu-memory", "chart-cpu", "chart-memory", "chart-disk"):
        assert f'id="{chart}"' in html
    gpu_chart = html.split('id="chart-gpu"')[1].split("</figure>")[0]
    assert gpu_chart.count("<polyline") == 2  # one curve per GPU
    assert 'data-series="GPU 0" data-latest="90.00"' in gpu_chart
    assert 'data-series="GPU 1" data-latest="0.00"' in gpu_chart
    assert 'data-series="CPU" data-latest="150.00"' in html
    assert "2.0 GiB" in html and 'id="no-samples"' not in html


def test_window_selector_and_a_clear_error_for_an_unknown_window(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = running_instance(console, alice)
    now = console.ctx.clock()
    record(console, busy_samples(instance_id, now - timedelta(hours=5), minutes=30))
    hour = alice.client.get(f"/instances/{instance_id}/metrics?window=1h").text
    day = alice.client.get(f"/instances/{instance_id}/metrics?window=1d").text
    assert 'id="no-samples"' in hour  # five hours ago is outside the last hour
    assert 'data-window="1d"' in day and "<polyline" in day
    bad = alice.client.get(f"/instances/{instance_id}/metrics?window=3y")
    assert bad.status_code == 422 and "use 1h, 1d, 1w" in bad.text


def test_another_users_instance_curves_are_404(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    instance_id = running_instance(console, alice)
    record(console, busy_samples(instance_id, console.ctx.clock()))
    response = bob.client.get(f"/instances/{instance_id}/metrics")
    assert response.status_code == 404 and "<polyline" not in response.text


def test_zh_cn_names_the_curves(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = running_instance(console, alice)
    record(console, busy_samples(instance_id, console.ctx.clock()))
    alice.client.cookies.set("gpudock_lang", "zh-CN")
    html = alice.client.get(f"/instances/{instance_id}/metrics").text
    assert "GPU 利用率" in html and "最近一周" in html and "接收" in html


def test_every_chart_title_and_series_label_is_translated() -> None:
    now = datetime(2026, 12, 1, 12, 0)
    views = instance_charts(busy_samples("i", now), now - timedelta(hours=1), now, "%H:%M")
    labels = {view.title for view in views} | {
        line.label
        for view in views
        for line in view.chart.lines
        if not line.label.startswith("GPU ")
    }
    assert len(views) == 6 and sorted(label for label in labels if label not in ZH_CN) == []


def test_operator_page_is_for_admins_and_lists_models_by_host(console: Platform) -> None:
    alice, admin = log_in(console, "alice"), log_in(console, "admin")
    instance_id = running_instance(console, alice)
    record(console, busy_samples(instance_id, console.ctx.clock()))
    assert alice.client.get("/admin/utilisation").status_code == 403
    assert 'href="/admin/utilisation"' not in alice.client.get("/instances").text
    page = admin.client.get("/admin/utilisation?window=1h")
    assert page.status_code == 200 and 'href="/admin/utilisation"' in page.text
    row = re.search(r'<tr data-model="A100-80GB"[^>]*>.*?</tr>', page.text, re.S)
    assert row is not None
    assert 'data-mean="45.0"' in row.group(0)  # GPU 0 at 90 %, GPU 1 idle
    assert re.search(r'<tr data-model="RTX4090-24GB".*?no samples', page.text, re.S)
