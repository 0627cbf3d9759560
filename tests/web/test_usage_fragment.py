"""The instance page's live usage block, on the fake runtime with a driven clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpudock.api.app import create_app
from gpudock.db.models import GpuAllocationModel
from gpudock.platform import Platform
from gpudock.runtime.base import ContainerStats
from gpudock.runtime.fake import FakeRuntime, FakeUsage
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.usage import CpuMeter
from tests.support.web import Browser, log_in

MiB = 2**20


def running_instance(console: Platform, browser: Browser) -> str:
    data = {"gpu_model": "A100-80GB", "gpu_count": "1", "name": "", "image": "", "disk_gb": ""}
    response = browser.post("/instances", data)
    assert response.status_code == 303, response.text
    instance_id: str = response.headers["location"].rsplit("/", 1)[1]
    console.reconciler.drain()
    return instance_id


def allocated_gpu(console: Platform, instance_id: str) -> str:
    with console.ctx.sessions() as session:
        return session.scalars(
            select(GpuAllocationModel.gpu_id).where(GpuAllocationModel.instance_id == instance_id)
        ).one()


def fake_with_clock(console: Platform) -> tuple[FakeRuntime, list[datetime]]:
    runtime = console.ctx.runtime
    assert isinstance(runtime, FakeRuntime)
    now = [datetime(2026, 1, 1, 12, 0, tzinfo=UTC)]
    runtime.clock = lambda: now[0]
    return runtime, now


def test_unauthenticated_fragment_asks_htmx_to_log_in(console: Platform) -> None:
    client = TestClient(create_app(console, run_reconciler=False))
    response = client.get("/instances/anything/usage", headers={"HX-Request": "true"})
    assert response.status_code == 401 and response.headers["HX-Redirect"].startswith("/login")


def test_another_users_instance_is_404(console: Platform) -> None:
    alice, bob = log_in(console, "alice"), log_in(console, "bob")
    instance_id = running_instance(console, alice)
    response = bob.client.get(f"/instances/{instance_id}/usage")
    assert response.status_code == 404 and "data-usage" not in response.text


def test_running_instance_shows_cpu_from_two_readings_memory_and_pids(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = running_instance(console, alice)
    runtime, now = fake_with_clock(console)
    name = containers.container_name(console.ctx.cluster_id, instance_id)
    limit_mb = runtime.spec_of(name).memory_mb

    page = alice.client.get(f"/instances/{instance_id}").text
    assert f'hx-get="/instances/{instance_id}/usage"' in page

    runtime.set_usage(name, FakeUsage(cpu_total_ns=10**9, memory_bytes=512 * MiB, pids=7))
    first = alice.client.get(f"/instances/{instance_id}/usage").text
    assert "data-usage" in first and "measuring…" in first and "data-cpu-percent" not in first
    assert f"512.0 MiB / {limit_mb / 1024:.1f} GiB" in first
    assert f'max="{limit_mb * MiB}" value="{512 * MiB}"' in first
    assert '<dd id="usage-pids">7</dd>' in first
    assert f'<code class="small">{allocated_gpu(console, instance_id)}</code>' in first
    assert "utilisation: n/a (simulated)" in first

    # 2 s later it has used 3 more CPU-seconds: 1.5 cores busy
    now[0] += timedelta(seconds=2)
    runtime.set_usage(name, FakeUsage(cpu_total_ns=4 * 10**9, memory_bytes=600 * MiB, pids=9))
    second = alice.client.get(f"/instances/{instance_id}/usage").text
    assert "<span data-cpu-percent>150 %</span>" in second and "measuring…" not in second
    assert '<dd id="usage-pids">9</dd>' in second and "600.0 MiB / " in second

    alice.client.cookies.set("gpudock_lang", "zh-CN")
    chinese = alice.client.get(f"/instances/{instance_id}/usage").text
    assert "当前用量" in chinese and "利用率：不可用（模拟 GPU）" in chinese


def test_stopped_instance_has_no_usage_block(console: Platform) -> None:
    alice = log_in(console, "alice")
    instance_id = running_instance(console, alice)
    assert "data-usage" in alice.client.get(f"/instances/{instance_id}/usage").text
    assert alice.post(f"/instances/{instance_id}/stop").status_code == 303
    console.reconciler.drain()
    response = alice.client.get(f"/instances/{instance_id}/usage")
    assert response.status_code == 200
    assert "data-usage" not in response.text and 'id="instance-usage"' in response.text


def test_previous_readings_are_bounded_and_restarts_start_over() -> None:
    meter = CpuMeter(max_containers=2)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(3):
        assert meter.cpu_percent(f"id{n}", ContainerStats(n, None, 0, None, 1, at)) is None
    second = at + timedelta(seconds=1)
    # id0 was the oldest of three: dropped, so its next reading is a first one again
    assert meter.cpu_percent("id0", ContainerStats(0, None, 0, None, 1, second)) is None
    half_a_core = ContainerStats(2 + 5 * 10**8, None, 0, None, 1, second)
    assert meter.cpu_percent("id2", half_a_core) == pytest.approx(50.0)
    restarted = ContainerStats(10**6, None, 0, None, 1, at + timedelta(seconds=2))
    assert meter.cpu_percent("id2", restarted) is None  # counters went back
