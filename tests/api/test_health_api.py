"""GPU health and migration through the API on the fake runtime, over SQLite
and PostgreSQL (issue 6). Real-Docker moves are in tests/e2e/test_migration.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi.testclient import TestClient

from gpudock.api.health_schemas import (
    FaultPublic,
)
from gpudock.platform import Platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.fleet.gpu_health import FaultView
from tests.api.test_instances_api import API, act, create, show
from tests.support.factories import Tenant

A100_HOST, RTX_HOST = "sim0-a100-80gb", "sim1-rtx4090-24gb"


def gpus_by_uuid(client: TestClient, admin: Tenant) -> dict[str, dict[str, Any]]:
    hosts = client.get(f"{API}/hosts", headers=admin.headers).json()
    return {g["uuid"]: {**g, "host": h["name"]} for h in hosts for g in h["gpus"]}


def fault(client: TestClient, admin: Tenant, uuid: str, xid: int) -> dict[str, Any]:
    response = client.post(
        f"{API}/admin/gpus/{uuid}/faults", json={"xid": xid}, headers=admin.headers
    )
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def events(client: TestClient, tenant: Tenant, ref: str) -> list[dict[str, Any]]:
    response = client.get(f"{API}/instances/{ref}/events", headers=tenant.headers)
    result: list[dict[str, Any]] = response.json()
    return result


def test_reset_class_xid_moves_the_instance_to_a_healthy_gpu_of_the_same_model(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    instance = create(client, alice, name="train", gpu_count=1)
    platform.reconciler.drain()
    before = show(client, alice, "train")
    bad = before["gpus"][0]

    recorded = fault(client, admin, bad, 48)
    assert recorded["action"] == "migrate" and recorded["gpu_state"] == "draining"
    moving = show(client, alice, "train")
    assert moving["status"] == "migrating" and "Xid 48" in moving["status_reason"]

    platform.reconciler.drain()
    after = show(client, alice, "train")
    assert after["status"] == "running" and after["id"] == instance["id"]
    assert after["gpus"] != [bad] and len(after["gpus"]) == 1
    gpus = gpus_by_uuid(client, admin)
    assert gpus[after["gpus"][0]]["model"] == "A100-80GB" and after["host"] == A100_HOST
    assert gpus[bad]["state"] == "unhealthy" and gpus[bad]["instance_id"] is None
    assert after["ssh_command"] == before["ssh_command"]
    path = [e["to_status"] for e in events(client, alice, "train")]
    assert path[-4:] == ["migrating", "migrating", "starting", "running"]


def test_nothing_is_placed_on_a_gpu_that_is_not_healthy(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    rtx = [u for u, g in gpus_by_uuid(client, admin).items() if g["model"] == "RTX4090-24GB"]
    fault(client, admin, rtx[0], 95)
    platform.reconciler.drain()
    assert gpus_by_uuid(client, admin)[rtx[0]]["state"] == "unhealthy"
    first = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=1)
    second = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=1)
    platform.reconciler.drain()
    assert show(client, alice, first["id"])["gpus"] == [rtx[1]]
    waiting = show(client, alice, second["id"])
    assert waiting["status"] == "pending" and waiting["gpus"] == []


def test_xid_79_drains_the_whole_host_and_moves_every_tenant(
    platform_factory: Any, database_url: str | None
) -> None:
    runtime = FakeRuntime()
    platform = platform_factory(runtime, database_url=database_url, simulate="2x2xA100-80GB")
    client = TestClient(_app(platform))
    admin, alice = _tenants(platform)
    first = create(client, alice, gpu_count=1)
    second = create(client, alice, gpu_count=1)
    platform.reconciler.drain()
    host = show(client, alice, first["id"])["host"]
    assert show(client, alice, second["id"])["host"] == host  # packed on one host
    old_volume = f"gpudock-{platform.ctx.cluster_id}-{first['id']}-data"
    assert old_volume in runtime.volumes

    fault(client, admin, show(client, alice, first["id"])["gpus"][0], 79)
    platform.reconciler.drain()

    for ref in (first["id"], second["id"]):
        moved = show(client, alice, ref)
        assert moved["status"] == "running" and moved["host"] != host
    gpus = gpus_by_uuid(client, admin)
    assert {g["state"] for g in gpus.values() if g["host"] == host} == {"unhealthy"}
    # the data volume went along: copied to a volume on the new host, the old one removed
    [(_source, target)] = [c for c in runtime.volume_copies if c[0] == old_volume]
    assert target.startswith(f"{old_volume}-")
    assert old_volume not in runtime.volumes
    assert len(runtime.volume_copies) == 2


def test_app_level_xid_only_tells_the_tenant(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_count=1)
    platform.reconciler.drain()
    gpu = show(client, alice, "train")["gpus"][0]
    assert fault(client, admin, gpu, 13)["action"] == "notify"
    platform.reconciler.drain()
    still = show(client, alice, "train")
    assert still["status"] == "running" and still["gpus"] == [gpu]
    assert gpus_by_uuid(client, admin)[gpu]["state"] == "healthy"
    assert "Xid 13 (graphics engine exception)" in events(client, alice, "train")[-1]["message"]


def test_predictive_xid_moves_the_tenant_at_its_next_restart(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_count=1)
    platform.reconciler.drain()
    gpu = show(client, alice, "train")["gpus"][0]
    assert fault(client, admin, gpu, 63)["action"] == "migrate_deferred"
    platform.reconciler.drain()
    assert show(client, alice, "train")["gpus"] == [gpu]  # not interrupted
    assert gpus_by_uuid(client, admin)[gpu]["state"] == "draining"
    assert "next restart" in events(client, alice, "train")[-1]["message"]

    act(client, alice, "train", "restart")
    platform.reconciler.drain()
    moved = show(client, alice, "train")
    assert moved["status"] == "running" and moved["gpus"] != [gpu]
    assert gpus_by_uuid(client, admin)[gpu]["state"] == "unhealthy"


def test_without_capacity_the_move_waits_then_starts_when_a_gpu_is_repaired(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    first = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=1)
    second = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=1)
    platform.reconciler.drain()
    bad = show(client, alice, first["id"])["gpus"][0]
    fault(client, admin, bad, 48)
    platform.reconciler.drain()
    waiting = show(client, alice, first["id"])
    assert waiting["status"] == "migrating" and waiting["gpus"] == []
    assert "waiting for a healthy 1 × RTX4090-24GB" in waiting["status_reason"]
    assert show(client, alice, second["id"])["status"] == "running"

    response = client.post(f"{API}/admin/gpus/{bad}/repair", headers=admin.headers)
    assert response.status_code == 200 and response.json()["state"] == "healthy"
    platform.reconciler.drain()
    back = show(client, alice, first["id"])
    assert back["status"] == "running" and back["gpus"] == [bad]


def test_start_when_the_host_is_full_moves_the_instance_unless_told_to_stay(
    platform_factory: Any, database_url: str | None
) -> None:
    runtime = FakeRuntime()
    platform = platform_factory(runtime, database_url=database_url, simulate="2x1xA100-80GB")
    client = TestClient(_app(platform))
    _admin, alice = _tenants(platform)
    mine = create(client, alice, name="mine", gpu_count=1)
    platform.reconciler.drain()
    home = show(client, alice, "mine")["host"]
    act(client, alice, "mine", "stop")
    platform.reconciler.drain()
    other = create(client, alice, name="other", gpu_count=1)
    platform.reconciler.drain()
    assert show(client, alice, "other")["host"] == home  # took the stopped instance's GPU

    response = client.post(f"{API}/instances/mine/start?stay=true", headers=alice.headers)
    assert response.status_code == 200 and response.json()["stay_on_host"] is True
    platform.reconciler.drain()
    stays = show(client, alice, "mine")
    assert stays["status"] == "starting" and "on its own host" in stays["status_reason"]

    act(client, alice, "mine", "stop")
    platform.reconciler.drain()
    act(client, alice, "mine", "start")
    platform.reconciler.drain()
    moved = show(client, alice, "mine")
    assert moved["status"] == "running" and moved["host"] != home
    assert moved["id"] == mine["id"] and other["id"] != mine["id"]
    assert len(runtime.volume_copies) == 1  # its data came along


def test_fault_injection_is_for_admins_on_known_gpus_with_a_valid_xid(
    client: TestClient, admin: Tenant, alice: Tenant
) -> None:
    uuid = next(iter(gpus_by_uuid(client, admin)))
    url = f"{API}/admin/gpus/{uuid}/faults"
    assert client.post(url, json={"xid": 48}, headers=alice.headers).status_code == 403
    missing = client.post(
        f"{API}/admin/gpus/GPU-nope/faults", json={"xid": 48}, headers=admin.headers
    )
    assert missing.status_code == 404 and "gpudock hosts" in missing.json()["error"]["message"]
    for bad in ({"xid": 0}, {"xid": "x"}, {}):
        assert client.post(url, json=bad, headers=admin.headers).status_code == 422
    assert client.get(f"{API}/admin/faults", headers=admin.headers).json() == []


def test_repair_is_refused_while_tenants_are_still_on_the_gpu(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_count=1)
    platform.reconciler.drain()
    gpu = show(client, alice, "train")["gpus"][0]
    fault(client, admin, gpu, 48)  # no reconciler pass: the tenant is still there
    refused = client.post(f"{API}/admin/gpus/{gpu}/repair", headers=admin.headers)
    assert refused.status_code == 409 and "still has tenants" in refused.json()["error"]["message"]


def test_reliability_counts_failures_service_hours_and_moves(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_count=1)
    platform.reconciler.drain()
    gpu = show(client, alice, "train")["gpus"][0]
    fault(client, admin, gpu, 13)
    fault(client, admin, gpu, 48)
    fault(client, admin, gpu, 48)  # the same incident: one failure, two faults
    platform.reconciler.drain()
    report = client.get(f"{API}/admin/reliability", headers=admin.headers).json()
    row = next(g for g in report["gpus"] if g["uuid"] == gpu)
    assert row["faults"] == {"xid 13": 1, "xid 48": 2}
    assert row["failures"] == 1 and row["migrations"] == 1 and row["state"] == "unhealthy"
    assert row["mtbf_hours"] == row["hours_in_service"] >= 0  # one failure: MTBF = hours
    a100 = next(m for m in report["models"] if m["model"] == "A100-80GB")
    assert a100["failures"] == 1 and a100["reference_mtbf_hours"] == 1872.0
    assert a100["interruption_p50_s"] is not None and a100["interruption_p50_s"] >= 0
    assert client.get(f"{API}/admin/reliability", headers=alice.headers).status_code == 403


def test_stopping_during_a_move_abandons_it_and_keeps_the_data(
    client: TestClient, platform: Platform, admin: Tenant, alice: Tenant
) -> None:
    create(client, alice, name="train", gpu_model="RTX4090-24GB", gpu_count=2)
    platform.reconciler.drain()
    fault(client, admin, show(client, alice, "train")["gpus"][0], 48)
    platform.reconciler.drain()
    assert show(client, alice, "train")["status"] == "migrating"  # no 2 healthy RTX free
    assert act(client, alice, "train", "stop")["status"] == "stopped"
    platform.reconciler.drain()
    report = client.get(f"{API}/admin/reliability", headers=admin.headers).json()
    rtx = next(m for m in report["models"] if m["model"] == "RTX4090-24GB")
    assert rtx["migrations"] == 1 and rtx["interruption_p50_s"] is None  # abandoned


def _app(platform: Platform) -> Any:
    from gpudock.api.app import create_app

    return create_app(platform, run_reconciler=False)


def _tenants(platform: Platform) -> tuple[Tenant, Tenant]:
    from tests.support.factories import make_tenant

    assert platform.admin_token_path is not None
    token = platform.admin_token_path.read_text().strip()
    return Tenant("admin", token, {"Authorization": f"Bearer {token}"}), make_tenant(
        platform, "alice"
    )


def test_fault_bodies_have_the_fields_of_the_fleet_services_fault_view() -> None:
    """The bodies are read off the service's dataclass by attribute: a field added on
    one side only would vanish from the API, or fail every request."""
    assert list(FaultPublic.model_fields) == [f.name for f in dataclasses.fields(FaultView)]
