"""The system-disk watchdog on the fake runtime: a warning at 90 %, a stop above
100 %, never a delete, and nothing at all where the engine caps layers itself."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.reconcile import system_disks
from gpudock.runtime.fake import FakeRuntime
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory

API = "/api/v1"
GB = 10**9


def running(platform: Platform) -> tuple[TestClient, str, str, dict[str, str]]:
    api = TestClient(create_app(platform, run_reconciler=False))
    tenant = make_tenant(platform, "gil")
    body = {"gpu_count": 0, "system_disk_gb": 10, "name": "job"}
    created = api.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert created.status_code == 201, created.text
    platform.reconciler.drain()
    shown = api.get(f"{API}/instances/job", headers=tenant.headers).json()
    assert shown["status"] == "running", shown
    return api, shown["id"], shown["container_id"], tenant.headers


def messages(api: TestClient, headers: dict[str, str]) -> list[str]:
    return [e["message"] for e in api.get(f"{API}/instances/job/events", headers=headers).json()]


def test_the_watchdog_warns_once_then_stops_and_keeps_the_container(
    platform_factory: PlatformFactory,
) -> None:
    runtime = FakeRuntime()
    platform = platform_factory(runtime=runtime)
    api, instance_id, container_id, headers = running(platform)
    watch = system_disks.DiskWatch()
    runtime.writable_bytes[container_id] = 9 * GB + 1
    assert system_disks.check_system_disks(platform.ctx, watch) == []
    assert system_disks.check_system_disks(platform.ctx, watch) == []  # warned once only
    warnings = [m for m in messages(api, headers) if m.startswith("system disk 9.0 GB of 10.0 GB")]
    assert len(warnings) == 1
    runtime.writable_bytes[container_id] = 11 * GB
    assert system_disks.check_system_disks(platform.ctx, watch) == [instance_id]
    platform.reconciler.drain()
    shown = api.get(f"{API}/instances/job", headers=headers).json()
    assert shown["status"] == "stopped" and shown["desired_state"] == "stopped", shown
    assert any("over its 10.0 GB" in m for m in messages(api, headers))
    assert runtime.inspect_container(container_id) is not None  # stopped, not removed


def test_an_engine_that_caps_layers_needs_no_watchdog(platform_factory: PlatformFactory) -> None:
    runtime = FakeRuntime(system_disk_quota=True)
    platform = platform_factory(runtime=runtime)
    _, _, container_id, _ = running(platform)
    runtime.writable_bytes[container_id] = 50 * GB
    assert system_disks.check_system_disks(platform.ctx, system_disks.DiskWatch()) == []
