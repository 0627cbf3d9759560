"""kill -9 the server in the middle of create, stop and delete; restart; converge.

Each case arms one crash point (the server SIGKILLs itself there, a real
SIGKILL at a known place) and then restarts the server without it.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path

import docker
import httpx
import pytest

from gpudock.services.instances import container_spec as containers
from tests.support.docker import assert_converged_on
from tests.support.server_process import ServerProcess, wait_for, wait_settled
from tests.support.servers import ServerFactory

FLEET = "1x4xA100-80GB"
CREATE_POINTS = ["after_placement", "after_volume", "after_create", "after_start"]


def _user(server: ServerProcess) -> httpx.Client:
    with server.client() as admin:
        token = admin.post("/users", json={"name": "dora"}).json()["token"]
    return server.client(token)


def _exec(engine: docker.DockerClient, name: str, command: str) -> str:
    exit_code, output = engine.containers.get(name).exec_run(["sh", "-c", command])
    assert exit_code == 0, output
    return str(output.decode().strip())


@pytest.mark.parametrize("point", CREATE_POINTS)
def test_crash_during_create_converges_to_running(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient, point: str
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    server.start(GPUDOCK_CRASH_POINTS=point)
    user = _user(server)
    # The crash can come before the response; the request must survive anyway.
    with contextlib.suppress(httpx.RemoteProtocolError):
        user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 2})
    assert server.wait_for_death() == -9

    server.start()
    user = server.client(user.headers["Authorization"].removeprefix("Bearer "))
    [created] = user.get("/instances").json()
    running = wait_for(user, created["id"], "running")
    assert len(running["gpus"]) == 2
    _, sessions, cluster = server.database()
    assert_converged_on(sessions, cluster, engine)


def test_crash_during_stop_keeps_the_data(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    server.start(GPUDOCK_CRASH_POINTS="after_stop")
    user = _user(server)
    token = user.headers["Authorization"].removeprefix("Bearer ")
    created = user.post("/instances", json={"gpu_model": "A100-80GB"}).json()
    wait_for(user, created["id"], "running")
    _, sessions, cluster = server.database()
    name = containers.container_name(cluster, created["id"])
    _exec(engine, name, "echo survives > /root/data/f")
    user.post(f"/instances/{created['id']}/stop")
    assert server.wait_for_death() == -9

    server.start()
    user = server.client(token)
    assert wait_for(user, created["id"], "stopped")["gpus"] == []
    assert_converged_on(sessions, cluster, engine)
    user.post(f"/instances/{created['id']}/start")
    wait_for(user, created["id"], "running")
    assert _exec(engine, name, "cat /root/data/f") == "survives"


@pytest.mark.parametrize("point", ["after_container_remove", "after_volume_remove"])
def test_crash_during_delete_leaves_nothing_behind(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient, point: str
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    server.start(GPUDOCK_CRASH_POINTS=point)
    user = _user(server)
    token = user.headers["Authorization"].removeprefix("Bearer ")
    created = user.post("/instances", json={"gpu_model": "A100-80GB"}).json()
    wait_for(user, created["id"], "running")
    user.delete(f"/instances/{created['id']}")
    assert server.wait_for_death() == -9

    server.start()
    user = server.client(token)
    wait_for(user, created["id"], "deleted")
    _, sessions, cluster = server.database()
    instances = assert_converged_on(sessions, cluster, engine)
    assert [i.status for i in instances] == ["deleted"]


def test_random_kills_under_load_converge(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient
) -> None:
    """Lifecycle calls from two clients while the server is SIGKILLed at random moments."""
    rng = random.Random(20261129)
    server = server_factory(tmp_path / "data", "1x8xA100-80GB")
    server.start()
    token = _user(server).headers["Authorization"].removeprefix("Bearer ")
    stop = threading.Event()
    calls = {"ok": 0, "refused": 0}

    def churn(seed: int) -> None:
        local = random.Random(seed)
        ids: list[str] = []
        while not stop.is_set():
            try:
                with server.client(token) as user:
                    verb = local.choice(["create", "create", "stop", "start", "delete"])
                    if (verb == "create" and len(ids) < 5) or not ids:
                        response = user.post("/instances", json={"gpu_model": "A100-80GB"})
                        if response.status_code == 201:
                            ids.append(response.json()["id"])
                    elif verb == "delete":
                        response = user.delete(f"/instances/{ids.pop(local.randrange(len(ids)))}")
                    else:
                        response = user.post(f"/instances/{local.choice(ids)}/{verb}")
                calls["ok" if response.status_code < 500 else "refused"] += 1
            except httpx.HTTPError:
                calls["refused"] += 1  # the server is down right now
                time.sleep(0.05)

    workers = [threading.Thread(target=churn, args=(seed,)) for seed in (1, 2)]
    for worker in workers:
        worker.start()
    try:
        for _ in range(3):
            time.sleep(rng.uniform(0.5, 2.5))  # a random moment, not a synchronisation
            server.kill()
            server.start()
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
    assert calls["ok"] > 10
    wait_settled(server, token)
    _, sessions, cluster = server.database()
    assert_converged_on(sessions, cluster, engine)
