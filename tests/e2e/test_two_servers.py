"""Two `gpudock server` processes on one PostgreSQL database (the HA topology):
parallel creates against both give no GPU twice and charge no second twice;
one killed with SIGKILL leaves its leases to expire, and the survivor takes
them over and converges — also when it is killed in the middle of a load on
both, which the survivor keeps answering without an error."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gpudock.db.models import InstanceModel
from gpudock.platform import SERVER_ID_FILE
from gpudock.services.billing import postings as ledger
from tests.support import invariants
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
        assert ledger.verify_month_totals(session) == {}
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
    wait_settled(first, token, others=(second,))
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
    # The survivor starts once the first is dead: a live peer could take the
    # create's step first (CI saw it), and then nothing is left to take over.
    # A peer alive throughout is the load test's below.
    first.start(GPUDOCK_CRASH_POINTS="after_volume")
    with first.client() as admin:
        token = _tenant(admin, "ivan")
    with first.client(token) as user:
        created = user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 2}).json()
    assert first.wait_for_death() == -9  # killed holding the create's lease
    _, sessions, cluster = first.database()
    with sessions() as session:
        row = session.scalar(select(InstanceModel).where(InstanceModel.id == created["id"]))
        assert row is not None and row.lock_token is not None
        assert row.lock_token.startswith(_owner_of(first) + ".")

    second.start()
    assert _owner_of(second) != _owner_of(first)
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


class _Load:
    """Clients looping on one server each until told to stop: a few creates of
    their own, then stops, starts, shows, lists and balances; every answer's
    status is kept per server, and a dropped connection ends that client."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.stop = threading.Event()
        self.codes: defaultdict[int, list[int]] = defaultdict(list)
        self.dropped: defaultdict[int, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []

    def answered(self, port: int) -> int:
        with self.lock:
            return len(self.codes[port])

    def run(self, server: ServerProcess, seed: int) -> None:
        thread = threading.Thread(target=self._loop, args=(server, random.Random(seed)))
        self.threads.append(thread)
        thread.start()

    def _loop(self, server: ServerProcess, rng: random.Random) -> None:
        mine: list[str] = []
        with server.client(self.token) as user:
            while not self.stop.is_set():
                method, path, body = self._next(rng, mine)
                try:
                    response = user.request(method, path, json=body)
                except httpx.TransportError:
                    with self.lock:
                        self.dropped[server.port] += 1
                    return
                with self.lock:
                    self.codes[server.port].append(response.status_code)
                if method == "POST" and path == "/instances" and response.status_code == 201:
                    mine.append(response.json()["id"])

    @staticmethod
    def _next(rng: random.Random, mine: list[str]) -> tuple[str, str, Any]:
        if len(mine) < 2 and rng.random() < 0.3:
            return "POST", "/instances", {"gpu_model": "A100-80GB", "gpu_count": 1}
        if mine and rng.random() < 0.3:
            verb = rng.choice(["stop", "start"])
            return "POST", f"/instances/{rng.choice(mine)}/{verb}", None
        if mine and rng.random() < 0.5:
            return "GET", f"/instances/{rng.choice(mine)}", None
        return "GET", rng.choice(["/instances", "/billing/balance", "/billing/ledger"]), None

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _compute_charges(server: ServerProcess, token: str) -> int:
    """The tenant's compute postings. Its clients keep its token busy, so the API's
    per-token rate limit may answer 429: then wait as it says and ask again."""
    deadline = time.monotonic() + 60.0
    with server.client(token) as user:
        while (answer := user.get("/billing/ledger", params={"limit": 1000})).status_code == 429:
            assert time.monotonic() < deadline, "the ledger stayed rate-limited for 60 s"
            time.sleep(min(float(answer.headers.get("Retry-After", "1")), 5.0))
    assert answer.status_code == 200, answer.text
    return sum(1 for line in answer.json()["lines"] if line["kind"] == "compute")


def test_killing_one_server_under_load_leaves_the_other_serving_and_consistent(
    pair: tuple[ServerProcess, ServerProcess], engine: docker.DockerClient, postgres_url: str
) -> None:
    first, second = pair
    first.start(GPUDOCK_VOLUME_QUOTA="off")
    second.start(GPUDOCK_VOLUME_QUOTA="off")
    with first.client() as admin:
        token = _tenant(admin, "jun")
    load = _Load(token)
    for n, server in enumerate([first, second, first, second]):
        load.run(server, n)
    try:
        _wait_until(lambda: min(load.answered(s.port) for s in pair) >= 20, "load on both")
        _wait_until(lambda: _compute_charges(second, token) >= 4, "both servers charging")
        first.kill()  # SIGKILL, mid-load: whatever it held is left to its leases' expiry
        answered, charged = load.answered(second.port), _compute_charges(second, token)
        _wait_until(lambda: load.answered(second.port) >= answered + 40, "the survivor's answers")
        _wait_until(lambda: _compute_charges(second, token) >= charged + 4, "the survivor charging")
    finally:
        load.finish()
    assert load.dropped[second.port] == 0
    assert [c for c in load.codes[second.port] if c >= 500] == []
    assert [c for c in load.codes[first.port] if c >= 500] == []
    _, sessions, cluster = second.database()
    _settled_and_converged(second, token, first, sessions, cluster, engine)
    assert invariants.check(postgres_url) == []


def _settled_and_converged(
    server: ServerProcess,
    token: str,
    killed: ServerProcess,
    sessions: sessionmaker[Session],
    cluster: str,
    engine: docker.DockerClient,
) -> None:
    """Settled, then converged; settled again if an instance moved on after the settle
    check (seen in CI: placed and starting once the survivor had finished what the
    killed server held), but never more than three times."""
    for attempt in range(3):
        wait_settled(server, token, others=(killed,))
        try:
            assert_converged_on(sessions, cluster, engine)
            return
        except AssertionError as exc:
            if "stuck in a transitional state" not in str(exc) or attempt == 2:
                raise
