"""Billing against a real `gpudock server` and the real Docker Engine.

The charge is the seconds Docker says the container ran (StartedAt →
FinishedAt) times the rate, exactly; a SIGKILLed server neither misses nor
doubles a second; an empty balance stops the instance and keeps its data.
The charging period is 1 s here so that a few seconds of running show it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from gpudock.billing.metering import elapsed_seconds
from gpudock.billing.money import format_amount
from gpudock.runtime.docker.translate import parse_docker_time
from gpudock.services.instances import container_spec as containers
from tests.support.docker import docker_client, remove_cluster_objects
from tests.support.server_process import ServerProcess, wait_for

FLEET = "1x4xA100-80GB"
RATE_PER_GPU_S = 10_000  # 36 CNY per GPU-hour
BILLING_ENV = {
    "GPUDOCK_BILLING_CHARGE_PERIOD_S": "1",
    "GPUDOCK_BILLING_TICK_S": "0.2",
    "GPUDOCK_BILLING_MIN_BALANCE_SECONDS": "2",
    "GPUDOCK_STOP_TIMEOUT_S": "1",
    "GPUDOCK_SSH_ENABLED": "false",
}


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the tests that kill nothing (a start costs seconds); each
    of them has its own user."""
    engine = docker_client()
    server = ServerProcess(tmp_path_factory.mktemp("billing") / "data", FLEET, env=BILLING_ENV)
    server.start()
    try:
        yield server
    finally:
        server.kill()
        sql_engine, _sessions, cluster = server.database()
        sql_engine.dispose()
        remove_cluster_objects(engine, cluster)


def _tenant(server: ServerProcess, name: str, topup: str) -> httpx.Client:
    with server.client() as admin:
        price = {"gpu_model": "A100-80GB", "amount": "36"}
        assert admin.put("/admin/prices", json=price).is_success
        token = admin.post("/users", json={"name": name}).json()["token"]
        assert admin.post("/admin/topups", json={"user": name, "amount": topup}).is_success
    return server.client(token)


def docker_seconds(engine: docker.DockerClient, cluster: str, instance_id: str) -> int:
    state = engine.containers.get(containers.container_name(cluster, instance_id)).attrs["State"]
    started, finished = (
        parse_docker_time(state["StartedAt"]),
        parse_docker_time(state["FinishedAt"]),
    )
    assert started is not None and finished is not None and finished > started
    return elapsed_seconds(started, finished)


def ledger(user: httpx.Client, instance_id: str) -> list[dict[str, Any]]:
    lines = user.get("/billing/ledger", params={"limit": 1000}).json()["lines"]
    return [line for line in lines if line["instance_id"] == instance_id]


def assert_tiled(lines: list[dict[str, Any]], total: int) -> None:
    """Charges cover [0, total) of the run with no gap and no overlap."""
    pieces = sorted((line["from"], line["to"]) for line in lines if line["kind"] == "compute")
    for (_a, end), (start, _b) in itertools.pairwise(pieces):
        assert start == end, pieces
    assert sum(line["seconds"] for line in lines if line["kind"] == "compute") == total


def usage_of(user: httpx.Client, instance_id: str) -> dict[str, Any]:
    items = user.get("/billing/usage").json()["instances"]
    return next(i for i in items if i["instance_id"] == instance_id)


def _poll(check: Any, what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_charge_is_docker_seconds_times_the_rate(
    shared_server: ServerProcess, engine: docker.DockerClient
) -> None:
    server = shared_server
    user = _tenant(server, "erin", "100")
    asked = time.monotonic()
    created = user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 2}).json()
    wait_for(user, created["id"], "running")
    seen_running = time.monotonic()
    time.sleep(3)  # the measured run: about three seconds of two GPUs
    stopping = time.monotonic()
    user.post(f"/instances/{created['id']}/stop")
    wait_for(user, created["id"], "stopped")
    seen_stopped = time.monotonic()
    _, _, cluster = server.database()
    seconds = docker_seconds(engine, cluster, created["id"])
    # The container ran at least while the client saw it running and at most from
    # the create to the stop seen (polling on a loaded machine widens the outer
    # bound only); a second either way for Docker's whole seconds.
    assert stopping - seen_running - 1 <= seconds <= seen_stopped - asked + 1
    usage = usage_of(user, created["id"])
    assert (usage["seconds"], usage["gpu_seconds"]) == (seconds, 2 * seconds)
    assert usage["amount"] == format_amount(seconds * 2 * RATE_PER_GPU_S)
    assert_tiled(ledger(user, created["id"]), seconds)
    balance = user.get("/billing/balance").json()
    assert balance["balance_micro"] == 100_000_000 - seconds * 2 * RATE_PER_GPU_S


def test_kill_9_while_running_misses_and_doubles_no_second(
    server_factory: type[ServerProcess], tmp_path: Path, engine: docker.DockerClient
) -> None:
    server = server_factory(tmp_path / "data", FLEET, env=BILLING_ENV)
    server.start(GPUDOCK_CRASH_POINTS="after_charge")  # dies right after a charge commits
    user = _tenant(server, "gus", "100")
    token = user.headers["Authorization"].removeprefix("Bearer ")
    ids = []
    for _ in range(2):
        try:
            ids.append(user.post("/instances", json={"gpu_model": "A100-80GB"}).json()["id"])
        except httpx.HTTPError:
            break  # the server died charging the first one: that is the point
    assert server.wait_for_death() == -9

    server.start()
    user = server.client(token)
    ids = [i["id"] for i in user.get("/instances").json()]
    if len(ids) < 2:
        ids.append(user.post("/instances", json={"gpu_model": "A100-80GB"}).json()["id"])
    for instance_id in ids:
        wait_for(user, instance_id, "running")
    _poll(lambda: all(usage_of(user, i)["seconds"] >= 3 for i in ids), "catch-up charges")
    for instance_id in ids:
        user.post(f"/instances/{instance_id}/stop")
    _, _, cluster = server.database()
    for instance_id in ids:
        wait_for(user, instance_id, "stopped")
        seconds = docker_seconds(engine, cluster, instance_id)
        assert usage_of(user, instance_id)["seconds"] == seconds
        assert_tiled(ledger(user, instance_id), seconds)


def test_an_empty_balance_stops_the_instance_and_keeps_its_data(
    shared_server: ServerProcess, engine: docker.DockerClient
) -> None:
    server = shared_server
    user = _tenant(server, "finn", "0.04")  # four seconds of one A100
    created = user.post("/instances", json={"gpu_model": "A100-80GB"}).json()
    wait_for(user, created["id"], "running")
    _, _, cluster = server.database()
    name = containers.container_name(cluster, created["id"])
    exit_code, out = engine.containers.get(name).exec_run(["sh", "-c", "echo kept > /root/data/f"])
    assert exit_code == 0, out

    stopped = wait_for(user, created["id"], "stopped", timeout_s=30)
    assert stopped["status_reason"].startswith("billing: stopped")
    assert stopped["gpus"] == [] and stopped["desired_state"] == "stopped"
    engine.volumes.get(containers.volume_name(cluster, created["id"]))  # never deleted
    balance = user.get("/billing/balance").json()
    assert balance["balance_micro"] >= -2 * RATE_PER_GPU_S  # one period and the stop itself
    refused = user.post(f"/instances/{created['id']}/start")
    assert refused.status_code == 402, refused.text

    with server.client() as admin:
        admin.post("/admin/topups", json={"user": "finn", "amount": "10"})
    assert user.post(f"/instances/{created['id']}/start").status_code == 200
    wait_for(user, created["id"], "running")
    exit_code, out = engine.containers.get(name).exec_run(["cat", "/root/data/f"])
    assert (exit_code, out.decode().strip()) == (0, "kept")
    user.delete(f"/instances/{created['id']}")
    wait_for(user, created["id"], "deleted")
