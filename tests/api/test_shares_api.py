"""Shares of one GPU, accepted model sets and the wait queue through the API
(fake runtime, the suite's fleet: 1 host × 4 A100-80GB, 1 host × 2 RTX4090-24GB)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpudock.platform import Platform
from tests.api.test_instances_api import API, create, show
from tests.support.factories import Tenant


def refused(client: TestClient, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = client.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert response.status_code == 422, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def summary(client: TestClient, tenant: Tenant) -> dict[str, dict[str, Any]]:
    response = client.get(f"{API}/gpus", headers=tenant.headers)
    assert response.status_code == 200, response.text
    return {m["model"]: m for m in response.json()}


def test_a_share_shows_its_fraction_limit_and_gpu(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    created = create(client, alice, name="half", gpu_share=0.5)
    assert (created["gpu_share"], created["gpu_share_milli"]) == ("0.5", 500)
    assert created["gpu_memory_limit_mb"] is None  # no card yet
    platform.reconciler.drain()
    placed = show(client, alice, "half")
    assert placed["status"] == "running" and placed["gpu_model"] == "A100-80GB"
    assert placed["gpu_memory_limit_mb"] == 40 * 1024 and len(placed["gpus"]) == 1
    a100 = summary(client, alice)["A100-80GB"]
    assert (a100["free"], a100["share_free_milli"], a100["largest_share_milli"]) == (3, 3500, 1000)


def test_a_memory_share_rounds_up_to_the_milli_gpu(client: TestClient, alice: Tenant) -> None:
    created = create(client, alice, gpu_model="RTX4090-24GB", gpu_memory_gb=5)
    assert created["gpu_share_milli"] == 209  # 5 of 24 GB is 0.2083…: never less than asked
    assert created["gpu_share"] == "0.209"


def test_the_fraction_is_read_as_written(client: TestClient, alice: Tenant) -> None:
    assert create(client, alice, gpu_share=0.3)["gpu_share_milli"] == 300  # not 301 from 0.3000…04


def test_hosts_show_the_shares_on_each_gpu(
    client: TestClient, platform: Platform, alice: Tenant, admin: Tenant
) -> None:
    first = create(client, alice, gpu_share=0.25)
    second = create(client, alice, gpu_share=0.5)
    platform.reconciler.drain()
    hosts = client.get(f"{API}/hosts", headers=admin.headers).json()
    shared = [g for h in hosts for g in h["gpus"] if g["shares"]]
    assert len(shared) == 1 and shared[0]["instance_id"] is None  # both on one card
    held = {s["instance_id"]: s["milli"] for s in shared[0]["shares"]}
    assert held == {first["id"]: 250, second["id"]: 500}


@pytest.mark.parametrize(
    ("body", "field", "advice"),
    [
        ({"gpu_share": 0.5, "gpu_memory_gb": 10}, "gpu_share", "not both"),
        ({"gpu_share": 0.5, "gpu_count": 2}, "gpu_count", "whole ones with gpu_count"),
        ({"gpu_share": 1}, "gpu_share", "ask for whole GPUs with gpu_count"),
        ({"gpu_share": 0.9999}, "gpu_share", "ask for whole GPUs with gpu_count"),
        ({"gpu_share": 0}, "gpu_share", "between 0 and 1"),
        ({"gpu_share": -0.25}, "gpu_share", "between 0 and 1"),
        ({"gpu_memory_gb": 80}, "gpu_memory_gb", "ask for a whole GPU"),
        ({"gpu_models": ["A100-80GB", "B9-1GB"]}, "gpu_model", "available: A100-80GB"),
    ],
)
def test_bad_shares_say_what_to_ask_for(
    client: TestClient, alice: Tenant, body: dict[str, Any], field: str, advice: str
) -> None:
    error = refused(client, alice, gpu_model="A100-80GB", **body)
    assert (error["code"], error["field"]) == ("invalid_request", field)
    assert advice in error["message"]


def test_a_model_set_without_gpu_model_prefers_its_first(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    whole = {"gpu_count": 2, "gpu_models": ["RTX4090-24GB", "A100-80GB"]}
    first = client.post(f"{API}/instances", json=whole, headers=alice.headers).json()
    second = client.post(f"{API}/instances", json=whole, headers=alice.headers).json()
    assert first["gpu_models"] == ["RTX4090-24GB", "A100-80GB"]
    platform.reconciler.drain()
    assert show(client, alice, first["id"])["gpu_model"] == "RTX4090-24GB"
    assert show(client, alice, second["id"])["gpu_model"] == "A100-80GB"  # the 4090s are taken


def test_show_gives_the_place_in_the_queue_per_model(
    client: TestClient, platform: Platform, alice: Tenant
) -> None:
    running = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=2)
    platform.reconciler.drain()
    first = create(client, alice, gpu_model="RTX4090-24GB", gpu_count=1)
    create(client, alice, gpu_count=1)  # an A100 waits in another queue (and fits now)
    second = create(client, alice, gpu_model="RTX4090-24GB", gpu_share=0.5)
    assert show(client, alice, running["id"])["queue"] is None
    ahead = show(client, alice, first["id"])["queue"]
    behind = show(client, alice, second["id"])["queue"]
    assert (ahead["position"], ahead["waiting"]) == (1, 2)
    assert (behind["position"], behind["waiting"]) == (2, 2)
    assert ahead["estimate"].startswith("unknown")
    platform.reconciler.tick()  # the placement pass notes why they wait
    ahead = show(client, alice, first["id"])["queue"]
    assert ahead["reason"] == "waiting for 1 × RTX4090-24GB"
    assert client.get(f"{API}/instances", headers=alice.headers).json()[0]["queue"] is None


def test_a_request_that_fits_now_expects_the_next_pass(client: TestClient, alice: Tenant) -> None:
    waiting = create(client, alice, gpu_share=0.25)  # no pass has run yet
    queue = show(client, alice, waiting["id"])["queue"]
    assert queue["position"] == 1 and queue["estimate"].startswith("at the next placement pass")


def test_a_count_no_host_holds_is_refused_with_the_largest_that_fits(
    client: TestClient, alice: Tenant
) -> None:
    error = refused(client, alice, gpu_model="RTX4090-24GB", gpu_count=5)
    assert (error["field"], error["message"]) == (
        "gpu_count",
        "gpu_count 5 is more than any host has: at most 2 × RTX4090-24GB fit on one host",
    )
    either = {"gpu_model": "RTX4090-24GB", "gpu_models": ["A100-80GB"]}
    assert (
        "at most 4 × RTX4090-24GB or A100-80GB"
        in refused(client, alice, gpu_count=5, **either)["message"]
    )
    assert create(client, alice, gpu_count=4, **either)["status"] == "pending"  # the A100 host
