"""Shares of one simulated GPU on a real `gpudock server` and the real Docker
Engine: two halves run side by side as two containers told their limits, a
third waits in the queue and starts when one stops, and each pays half the
GPU's price for exactly the seconds Docker says it ran."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import docker
import httpx

from gpudock.billing.money import format_amount
from gpudock.services.instances import container_spec as containers
from tests.e2e.test_billing_e2e import (
    BILLING_ENV,
    assert_tiled,
    docker_seconds,
    ledger,
    usage_of,
)
from tests.support.server_process import wait_for
from tests.support.servers import ServerFactory

FLEET = "1x1xA100-80GB"
GPU_PRICE = "36"  # per GPU-hour: 10,000 micro-units a second
HALF_RATE_PER_S = 5_000  # micro-units a second for half the card


def env_of(engine: docker.DockerClient, cluster: str, instance_id: str) -> dict[str, str]:
    attrs = engine.api.inspect_container(containers.container_name(cluster, instance_id))
    return dict(item.split("=", 1) for item in attrs["Config"]["Env"])


def half(user: httpx.Client, name: str) -> dict[str, Any]:
    body = {"name": name, "gpu_model": "A100-80GB", "gpu_share": 0.5}
    created = user.post("/instances", json=body)
    assert created.status_code == 201, created.text
    result: dict[str, Any] = created.json()
    return result


def test_two_halves_share_a_card_a_third_waits_and_each_pays_half(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient
) -> None:
    server = server_factory(tmp_path / "data", FLEET, env=BILLING_ENV)
    server.start()
    with server.client() as admin:
        assert admin.put("/admin/prices", json={"gpu_model": "A100-80GB", "amount": GPU_PRICE})
        token = admin.post("/users", json={"name": "sam"}).json()["token"]
        assert admin.post("/admin/topups", json={"user": "sam", "amount": "100"}).is_success
    user = server.client(token)
    first, second = half(user, "first"), half(user, "second")
    running = [wait_for(user, i["id"], "running") for i in (first, second)]
    third = half(user, "third")

    _, _, cluster = server.database()
    (gpu,) = {g for r in running for g in r["gpus"]}  # one card for both
    for instance in running:
        env = env_of(engine, cluster, instance["id"])
        assert env["GPUDOCK_GPUS"] == gpu
        assert env["GPUDOCK_GPU_SHARE"] == "0.500"
        assert env["GPUDOCK_GPU_MEMORY_LIMIT"] == "40960m"
        assert env["PYTORCH_CUDA_ALLOC_CONF"].startswith("expandable_segments:True")
        assert instance["gpu_memory_limit_mb"] == 40960
    waiting = user.get(f"/instances/{third['id']}").json()
    assert waiting["status"] == "pending" and waiting["queue"]["position"] == 1
    assert waiting["queue"]["reason"] == "waiting for a 0.500 share of one A100-80GB"

    time.sleep(2)  # the measured run: a few seconds of the first half
    assert user.post(f"/instances/{first['id']}/stop").status_code == 200
    wait_for(user, first["id"], "stopped")
    started = wait_for(user, third["id"], "running")
    assert started["gpus"] == [gpu] and started["queue"] is None

    seconds = docker_seconds(engine, cluster, first["id"])
    assert seconds >= 2
    assert usage_of(user, first["id"])["amount"] == format_amount(seconds * HALF_RATE_PER_S)
    lines = ledger(user, first["id"])
    assert_tiled(lines, seconds)
    compute = [line for line in lines if line["kind"] == "compute"]
    assert all(" × 0.5 × A100-80GB at 18/h" in line["description"] for line in compute)
    assert -sum(line["amount_micro"] for line in compute) == seconds * HALF_RATE_PER_S
