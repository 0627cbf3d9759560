"""Instances through the API on the fake runtime, over SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpudock.platform import Platform
from gpudock.services.instances import changes
from tests.support.factories import Tenant
from tests.support.sshgw import wait_for

API = "/api/v1"


def create(client: TestClient, tenant: Tenant, **body: Any) -> dict[str, Any]:
    body.setdefault("gpu_model", "A100-80GB")
    response = client.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def show(client: TestClient, tenant: Tenant, ref: str) -> dict[str, Any]:
    response = client.get(f"{API}/instances/{ref}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def act(client: TestClient, tenant: Tenant, ref: str, verb: str) -> dict[str, Any]:
    response = client.post(f"{API}/instances/{ref}/{verb}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


ID_ROUTES = [
    ("get", "/instances/{id}"),
    ("post", "/instances/{id}/start"),
    ("post", "/instances/{id}/stop"),
    ("post", "/instances/{id}/restart"),
    ("delete", "/instances/{id}"),
    ("get", "/instances/{id}/events"),
    ("get", "/instances/{id}/wait"),
]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/instances"),
        ("post", "/instances"),
        ("get", "/gpus"),
        ("get", "/users/me"),
        *ID_ROUTES,
    ],
)
def test_every_endpoint_needs_a_token(client: TestClient, method: str, path: str) -> None:
    url = API + path.format(id="i-0000000000")
    for headers in ({}, {"Authorization": "Bearer gpd_not-a-real-token"}, {"Authorization": "x"}):
        response = client.request(method, url, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["error"]["code"] == "unauthenticated"


@pytest.mark.parametrize(("method", "path"), ID_ROUTES)
def test_another_tenants_instance_is_not_found(
    client: TestClient, alice: Tenant, bob: Tenant, method: str, path: str
) -> None:
    instance = create(client, alice, name="mine")
    for ref in (instance["id"], "mine"):
        response = client.request(method, API + path.format(id=ref), headers=bob.headers)
        assert response.status_code == 404, response.text
    assert show(client, alice, instance["id"])["status"] == "pending"  # untouched


def test_lifecycle_through_the_api(client: TestClient, platform: Platform, alice: Tenant) -> None:
    instance = create(client, alice, name="train", gpu_count=2)
    assert instance["status"] == "pending"
    # 2 of the host's 4 GPUs: half its 48 simulated CPUs, held to the (fake) engine's 2,
    # and half its memory, which is held to the engine's 24 GB
    assert (instance["cpu"], instance["memory_gb"]) == (2.0, 12)

    platform.reconciler.drain()
    running = show(client, alice, "train")
    assert running["status"] == "running"
    assert len(running["gpus"]) == 2 and running["host"] == "sim0-a100-80gb"

    assert act(client, alice, "train", "stop")["status"] == "stopping"
    platform.reconciler.drain()
    stopped = show(client, alice, "train")
    assert stopped["status"] == "stopped" and stopped["gpus"] == []

    assert act(client, alice, "train", "start")["status"] == "starting"
    platform.reconciler.drain()
    restarted = show(client, alice, "train")
    assert restarted["status"] == "running" and restarted["gpus"] == running["gpus"]

    assert act(client, alice, "train", "restart")["status"] == "stopping"
    platform.reconciler.drain()
    assert show(client, alice, "train")["gpus"] == running["gpus"]

    response = client.delete(f"{API}/instances/train", headers=alice.headers)
    assert response.json()["status"] == "deleting"
    platform.reconciler.drain()
    assert show(client, alice, instance["id"])["status"] == "deleted"
    assert client.get(f"{API}/instances", headers=alice.headers).json() == []

    events = client.get(f"{API}/instances/{instance['id']}/events", headers=alice.headers).json()
    path = [e["to_status"] for e in events]
    assert path[:4] == ["pending", "creating", "running", "stopping"]
    assert path[-2:] == ["deleting", "deleted"]
    assert "stopped" in path and "starting" in path


def test_not_enough_gpus_waits_with_a_reason(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    first = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=2)
    second = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=1)
    platform.reconciler.drain()
    assert show(client, alice, first["id"])["status"] == "running"
    waiting = show(client, alice, second["id"])
    assert waiting["status"] == "pending"
    assert waiting["status_reason"] == "waiting for 1 × RTX4090-24GB"

    act(client, alice, first["id"], "stop")
    platform.reconciler.drain()
    assert show(client, alice, second["id"])["status"] == "running"


def test_gpu_summary_counts_free_gpus(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    create(client, alice, gpu_count=3)
    platform.reconciler.drain()
    summary = {m["model"]: m for m in client.get(f"{API}/gpus", headers=alice.headers).json()}
    assert summary["A100-80GB"]["total"] == 4 and summary["A100-80GB"]["free"] == 1
    assert summary["RTX4090-24GB"] == {
        "model": "RTX4090-24GB",
        "memory_mb": 24 * 1024,
        "total": 2,
        "free": 2,
        "hosts": 1,
        "max_per_host": 2,
        "price_per_hour": None,
        "share_free_milli": 2000,
        "largest_share_milli": 1000,
    }


def test_no_gpu_mode(client: TestClient, platform: Platform, alice: Tenant) -> None:
    instance = create(client, alice, gpu_model=None, gpu_count=0)
    assert (instance["cpu"], instance["memory_gb"]) == (1.0, 4)
    platform.reconciler.drain()
    running = show(client, alice, instance["id"])
    assert running["status"] == "running" and running["gpus"] == []


BAD_BODIES = [
    ({"gpu_model": "H100-80GB"}, "gpu_model", "A100-80GB, RTX4090-24GB"),
    ({"gpu_count": 5}, "gpu_count", "at most 4 × A100-80GB"),
    ({"gpu_count": -1}, "gpu_count", "greater than or equal to 0"),
    ({"gpu_count": 1, "gpu_model": None}, "gpu_model", "required"),
    ({"cpu": -2}, "cpu", "greater than 0"),
    ({"cpu": 100000}, "cpu", "less than or equal"),
    ({"cpu": 500}, "cpu", "at most 48"),
    ({"memory_gb": 0}, "memory_gb", "greater than or equal to 1"),
    ({"disk_gb": 10**9}, "disk_gb", "less than or equal"),
    ({"name": "Bad_Name"}, "name", "lowercase"),
    ({"image": "no such image!"}, "image", "bad image reference"),
    ({"image": "pytorch/pytorch:2.4.0"}, "image", "unknown image"),
    ({"env": {"LD_PRELOAD": "/evil.so"}}, "env", "reserved"),
    ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "reserved"),
    ({"surprise": 1}, "surprise", "Extra inputs"),
]


@pytest.mark.parametrize(("body", "field", "says"), BAD_BODIES)
def test_bad_input_is_refused_and_nothing_is_created(
    client: TestClient, alice: Tenant, body: dict[str, Any], field: str, says: str
) -> None:
    response = client.post(
        f"{API}/instances", json={"gpu_model": "A100-80GB", **body}, headers=alice.headers
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert says in error["message"]
    assert client.get(f"{API}/instances", headers=alice.headers).json() == []


def test_malformed_json_is_refused(client: TestClient, alice: Tenant) -> None:
    response = client.post(
        f"{API}/instances",
        content=b"{not json",
        headers={**alice.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert "JSON" in response.json()["error"]["message"]


def test_names_are_unique_per_user_not_globally(
    client: TestClient, alice: Tenant, bob: Tenant
) -> None:
    create(client, alice, name="same")
    create(client, bob, name="same")
    response = client.post(
        f"{API}/instances", json={"gpu_model": "A100-80GB", "name": "same"}, headers=alice.headers
    )
    assert response.status_code == 409
    assert "already have an instance named 'same'" in response.json()["error"]["message"]


def test_a_deleted_name_can_be_reused(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    first = create(client, alice, name="again")
    client.delete(f"{API}/instances/again", headers=alice.headers)
    platform.reconciler.drain()
    second = create(client, alice, name="again")
    assert second["id"] != first["id"]
    assert show(client, alice, "again")["id"] == second["id"]


def test_stop_before_placement_needs_no_runtime(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    instance = create(client, alice)
    assert act(client, alice, instance["id"], "stop")["status"] == "stopped"
    platform.reconciler.drain()
    assert show(client, alice, instance["id"])["status"] == "stopped"


def test_restart_of_a_stopped_instance_is_a_conflict(client: TestClient, alice: Tenant) -> None:
    instance = create(client, alice)
    act(client, alice, instance["id"], "stop")
    response = client.post(f"{API}/instances/{instance['id']}/restart", headers=alice.headers)
    assert response.status_code == 409
    assert "use start" in response.json()["error"]["message"]


def test_admin_sees_every_instance(client: TestClient, admin: Tenant, alice: Tenant) -> None:
    instance = create(client, alice)
    listed = client.get(f"{API}/instances", headers=admin.headers).json()
    assert [i["id"] for i in listed] == [instance["id"]]


def test_a_wait_answers_at_the_change_not_at_its_next_look(
    client: TestClient, platform: Platform, alice: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changes, "RECHECK_S", 120.0)  # only the wake-up can answer in time
    instance = create(client, alice, name="w")
    answers: list[dict[str, Any]] = []

    def wait() -> None:
        url = f"{API}/instances/{instance['id']}/wait"
        params = {"status": "running", "timeout_s": "25"}
        response = client.get(url, params=params, headers=alice.headers)
        assert response.status_code == 200, response.text
        answers.append(response.json())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    watched = platform.ctx.memo.get(changes.InstanceChanges)
    wait_for(lambda: watched.waiting() == 1, "the request to wait")
    assert answers == []  # pending: nothing to answer yet
    platform.reconciler.drain()  # placed, created, started: each commit wakes it
    waiter.join(15)  # well before its 25 s timeout, or the next look at 120 s
    assert not waiter.is_alive(), "the wait did not answer when the instance ran"
    assert answers[0]["status"] == "running"


def test_a_wait_with_changed_from_answers_at_the_next_change(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    instance = create(client, alice, name="w")
    seen = f"{instance['status']}|{instance['status_reason']}"
    url = f"{API}/instances/{instance['id']}/wait"
    params = {"status": "running", "changed_from": "something else|", "timeout_s": "20"}
    first = client.get(url, params=params, headers=alice.headers).json()
    assert first["status"] == "pending"  # already not what the caller last saw: at once
    held = client.get(
        url, params={**params, "changed_from": seen, "timeout_s": "0"}, headers=alice.headers
    )
    assert held.json()["status"] == "pending"  # no change within its timeout: as it is
    bad = client.get(url, params={"status": "paused"}, headers=alice.headers)
    assert bad.status_code == 422
