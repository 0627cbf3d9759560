"""GPU faults against the real server, real Docker and the real OpenSSH client
(issue 6): the instance keeps its id, its SSH endpoint, its data volume and
its writable layer; a kill -9 in the middle of a move converges without loss.

Two simulated hosts share this machine's Docker Engine; a move between them
still goes the cross-host way (a new data volume, copied, the old one removed).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from gpudock.services.instances import container_spec as containers
from tests.support.docker import assert_converged_on
from tests.support.key_proof import post_with_proof
from tests.support.server_process import ServerProcess, wait_for
from tests.support.servers import ServerFactory
from tests.support.ssh_options import SSH_OPTIONS

FLEET = "2x2xA100-80GB"


def _user_with_key(server: ServerProcess, tmp_path: Path) -> tuple[httpx.Client, Path]:
    with server.client() as admin:
        token = admin.post("/users", json={"name": "erin"}).json()["token"]
    key = tmp_path / "id_erin"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    user = server.client(token)
    added = post_with_proof(user, key, prefix="")
    assert added.status_code == 201, added.text
    return user, key


def _ssh(instance: dict[str, Any], key: Path, command: str) -> str:
    """Run COMMAND through the gateway with the ssh command the API printed."""
    match = re.search(r"-p (\d+) (\S+)@", instance["ssh_command"])
    assert match, instance["ssh_command"]
    port, login = match.groups()
    argv = ["ssh", "-p", port, "-i", str(key), *SSH_OPTIONS, f"{login}@127.0.0.1", command]
    result = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


def _exec(engine: docker.DockerClient, name: str, command: str) -> str:
    exit_code, output = engine.containers.get(name).exec_run(["sh", "-c", command])
    assert exit_code == 0, output
    return str(output.decode())


def _fill(engine: docker.DockerClient, cluster: str, instance_id: str) -> str:
    """Data on the volume and in the writable layer; returns the data's checksum."""
    name = containers.container_name(cluster, instance_id)
    _exec(engine, name, "head -c 8388608 /dev/urandom > /root/data/blob && echo kept > /opt/layer")
    return _exec(engine, name, "sha256sum /root/data/blob")


def _fault(server: ServerProcess, gpu: str, xid: int) -> None:
    with server.client() as admin, contextlib.suppress(httpx.RemoteProtocolError):
        admin.post(f"/admin/gpus/{gpu}/faults", json={"xid": xid})


def _wait_moved(user: httpx.Client, instance_id: str, away_from: str) -> dict[str, Any]:
    def moved() -> dict[str, Any] | None:
        found = wait_for(user, instance_id, "running", timeout_s=120)
        return found if away_from not in found["gpus"] else None

    for _ in range(50):  # 'running' may still be the old container for a moment
        result = moved()
        if result is not None:
            return result
    raise AssertionError(f"{instance_id} never left GPU {away_from}")


def test_reset_class_fault_moves_the_instance_with_its_files_and_endpoint(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    server.start()
    user, key = _user_with_key(server, tmp_path)
    created = user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1}).json()
    before = wait_for(user, created["id"], "running")
    checksum = _fill(engine, server.cluster_id, created["id"])

    _fault(server, before["gpus"][0], 48)
    after = _wait_moved(user, created["id"], before["gpus"][0])

    assert after["id"] == before["id"] and after["host"] == before["host"]  # same host first
    assert after["ssh_command"] == before["ssh_command"]
    assert _ssh(after, key, "sha256sum /root/data/blob") == checksum
    assert _ssh(after, key, "cat /opt/layer") == "kept\n"
    name = containers.container_name(server.cluster_id, created["id"])
    labels = engine.containers.get(name).labels
    assert labels["gpudock.gpus"] == after["gpus"][0]
    with server.client() as admin:
        hosts = admin.get("/hosts").json()
        states = {g["uuid"]: g["state"] for h in hosts for g in h["gpus"]}
        assert states[before["gpus"][0]] == "unhealthy"
        report = admin.get("/admin/reliability").json()
    [a100] = report["models"]
    assert a100["failures"] == 1 and a100["interruption_p50_s"] is not None
    _, sessions, cluster = server.database()
    assert_converged_on(sessions, cluster, engine)


def test_xid_79_moves_every_tenant_to_the_other_host_with_their_data(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    server.start()
    user, key = _user_with_key(server, tmp_path)
    ids = [
        user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1}).json()["id"]
        for _ in range(2)
    ]
    first = [wait_for(user, i, "running") for i in ids]
    assert first[0]["host"] == first[1]["host"]
    sums = {i: _fill(engine, server.cluster_id, i) for i in ids}
    old_volumes = {containers.volume_name(server.cluster_id, i) for i in ids}

    _fault(server, first[0]["gpus"][0], 79)
    for instance_id, old in zip(ids, first, strict=True):
        moved = _wait_moved(user, instance_id, old["gpus"][0])
        assert moved["host"] != old["host"]
        assert _ssh(moved, key, "sha256sum /root/data/blob") == sums[instance_id]
        assert _ssh(moved, key, "cat /opt/layer") == "kept\n"
    remaining = {v.name for v in engine.volumes.list(filters={"label": "gpudock.managed"})}
    assert not old_volumes & remaining  # the old host's copies are gone
    _, sessions, cluster = server.database()
    assert_converged_on(sessions, cluster, engine)


@pytest.mark.parametrize("point", ["after_evacuate", "after_data_copy", "after_data_move"])
def test_kill_during_a_move_converges_without_loss(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient, point: str
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    server.start(GPUDOCK_CRASH_POINTS=point)
    user, key = _user_with_key(server, tmp_path)
    token = user.headers["Authorization"].removeprefix("Bearer ")
    created = user.post("/instances", json={"gpu_model": "A100-80GB", "gpu_count": 1}).json()
    before = wait_for(user, created["id"], "running")
    checksum = _fill(engine, server.cluster_id, created["id"])

    _fault(server, before["gpus"][0], 79)  # cross-host: every crash point is on the way
    assert server.wait_for_death() == -9

    server.start()
    user = server.client(token)
    after = _wait_moved(user, created["id"], before["gpus"][0])
    assert after["host"] != before["host"]
    assert _ssh(after, key, "sha256sum /root/data/blob") == checksum
    assert _ssh(after, key, "cat /opt/layer") == "kept\n"
    _, sessions, cluster = server.database()
    assert_converged_on(sessions, cluster, engine)
