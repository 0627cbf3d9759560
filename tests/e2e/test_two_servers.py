"""Two `gpudock server` processes on one PostgreSQL database (the HA topology):
parallel creates against both give no GPU twice and charge no second twice;
one killed with SIGKILL leaves its leases to expire, and the survivor takes
them over and converges."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from sqlalchemy import select

from gpudock.db.models import InstanceModel
from gpudock.platform import SERVER_ID_FILE
from gpudock.services.billing import postings as ledger
from tests.support.docker import assert_converged_on
from tests.support.server_process import ServerProcess, wait_for, wait_settled
from tests.support.servers import ServerFactory

FLEET = "1x4xA100-80GB"
LEASE_S = "3"
SHARED_ENV = {
    "GPUDOCK_LEASE_S": LEASE_S,
    "GPUDOCK_BILLING_CHARGE_PERIOD_S": "1",
    "GPUDOCK_BILLING_TICK_S": "0.2",
    "GPUDOCK_SSH_ENABLED": "false",
}


@pytest.fixture
def pair(
    server_factory: ServerFactory, tmp_path: Path, postgres_url: str
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two servers, own data dirs, one database and one volume directory (both
    mount the same data volumes: the topology needs shared storage)."""
    env = {**SHARED_ENV, "GPUDOCK_VOLUME_DIR": str(tmp_path / "volumes")}
    first = server_factory(tmp_path / "a", FLEET, database_url=postgres_url, env=dict(env))
    second = server_factory(tmp_path / "b", FLEET, database_url=postgres_url, env=dict(env))
    yield first, second


def _tenant(admin: httpx.Client, name: str) -> str:
    assert admin.put("/admin/prices", json={"gpu_model": "A100-80GB", "amount": "36"}).is_success
    token: str = admin.post("/users", json={"name": name}).json()["token"]
    assert admin.post("/admin/topups", json={"user": name, "amount": "1000"}).is_success
    return token


def _owner_of(server: ServerProcess) -> str:
    return (server.data_dir / SERVER_ID_FILE).read_text().strip()


def _assert_charged_once(server: ServerProcess, token: str) -> None:
    """Every compute charge of an interval follows the last one: no second twice."""
    engine, sessions, _cluster = server.database()
    with sessions() as session:
        assert ledger.verify_balances(session) == {}
    engine.dispose()
    with server.client(token) as user:
        lines = user.get("/billing/ledger", params={"limit": 1000}).json()["lines"]
    pieces: defaultdict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for line in lines:
        if line["kind"] == "compute":
            pieces[line["instance_id"]].append((line["from"], line["to"]))
    assert pieces, "nothing was charged"
    for spans in pieces.values():
        for (_a, end), (start, _b) in itertools.pairwise(sorted(spans)):
            assert start == end, spans


def test_parallel_creates_on_two_servers_share_no_gpu_and_charge_once(
    pair: tuple[ServerProcess, ServerProcess], engine: docker.DockerClient
) -> None:
    first, second = pair
    first.start()
    second.start()
    assert _owner_of(first) != _owner_of(second)
    with first.client() as admin:
        token = _tenant(admin, "hana")
    made: list[str] = []
    errors: list[str] = []

    def create(server: ServerProcess) -> None:
        with server.client(token) as user:
            response = user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1})
        if response.status_code == 201:
            made.append(response.json()["id"])
        else:
            errors.append(f"{response.status_code} {response.text}")

    threads = [threading.Thread(target=create, args=(s,)) for s in [first, second] * 4]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(made) == 8
    wait_settled(first, token)
    with second.client(token) as user:
        listed = user.get("/instances").json()
    running = [i for i in listed if i["status"] == "running"]
    assert len(running) == 4  # the fleet's four GPUs, each given once
    gpus = [g for i in running for g in i["gpus"]]
    assert len(set(gpus)) == len(gpus) == 4
    time.sleep(2.5)  # a few charging periods with both charging threads at work
    _assert_charged_once(first, token)
    _, sessions, cluster = first.database()
    assert_converged_on(sessions, cluster, engine)


def test_the_survivor_takes_over_a_killed_servers_leases(
    pair: tuple[ServerProcess, ServerProcess], engine: docker.DockerClient
) -> None:
    first, second = pair
    second.start(GPUDOCK_RECONCILE_INTERVAL_S="5")  # slow to notice: the first takes the step
    first.start(GPUDOCK_CRASH_POINTS="after_volume")
    with first.client(second.admin_token()) as admin:  # made by the server started first
        token = _tenant(admin, "ivan")
    with first.client(token) as user:
        created = user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 2}).json()
    assert first.wait_for_death() == -9  # killed holding the create's lease
    _, sessions, cluster = first.database()
    with sessions() as session:
        row = session.scalar(select(InstanceModel).where(InstanceModel.id == created["id"]))
        assert row is not None and row.lock_token is not None
        assert row.lock_token.startswith(_owner_of(first) + ".")

    with second.client(token) as user:
        running = wait_for(user, created["id"], "running", timeout_s=60)
    assert len(running["gpus"]) == 2
    with sessions() as session:
        row = session.scalar(select(InstanceModel).where(InstanceModel.id == created["id"]))
        assert row is not None
        assert row.lock_token is None or row.lock_token.startswith(_owner_of(second) + ".")
    assert_converged_on(sessions, cluster, engine)
    time.sleep(1.5)  # the survivor charges the instance on its own
    _assert_charged_once(second, token)
