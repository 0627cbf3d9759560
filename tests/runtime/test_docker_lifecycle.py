"""Instance lifecycle against the real Docker Engine (simulated GPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.platform import Platform
from gpudock.runtime.docker import ALLOWED_CAPABILITIES
from gpudock.services.instances import container_spec as containers
from tests.support.docker import assert_converged, remove_cluster_objects
from tests.support.factories import Tenant, make_tenant

API = "/api/v1"


@pytest.fixture
def carol(real: Platform) -> Tenant:
    return make_tenant(real, "carol")


def run(container: Any, command: str) -> str:
    exit_code, output = container.exec_run(["sh", "-c", command])
    assert exit_code == 0, output
    return str(output.decode().strip())


def instance(api: TestClient, tenant: Tenant, ref: str) -> dict[str, Any]:
    result: dict[str, Any] = api.get(f"{API}/instances/{ref}", headers=tenant.headers).json()
    return result


def test_create_stop_start_delete_with_real_containers(
    real: Platform, api: TestClient, carol: Tenant, engine: docker.DockerClient
) -> None:
    body = {"name": "train", "gpu_model": "A100-80GB", "gpu_count": 2, "env": {"WANDB_MODE": "off"}}
    created = api.post(f"{API}/instances", json=body, headers=carol.headers).json()
    real.reconciler.drain()
    shown = instance(api, carol, "train")
    assert shown["status"] == "running", shown
    name = containers.container_name(real.ctx.cluster_id, created["id"])
    container = engine.containers.get(name)
    _assert_hardened(container, shown)

    run(container, "echo precious > /root/data/keep.txt && echo sys > /root/outside.txt")
    api.post(f"{API}/instances/train/stop", headers=carol.headers)
    real.reconciler.drain()
    assert instance(api, carol, "train")["gpus"] == []
    container.reload()
    assert container.status == "exited"

    api.post(f"{API}/instances/train/start", headers=carol.headers)
    real.reconciler.drain()
    container = engine.containers.get(name)
    assert container.status == "running"
    assert run(container, "cat /root/data/keep.txt /root/outside.txt") == "precious\nsys"

    api.delete(f"{API}/instances/train", headers=carol.headers)
    real.reconciler.drain()
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(name)
    with pytest.raises(docker.errors.NotFound):
        engine.volumes.get(containers.volume_name(real.ctx.cluster_id, created["id"]))
    assert_converged(real.ctx, engine)


def _assert_hardened(container: Any, shown: dict[str, Any]) -> None:
    host_config = container.attrs["HostConfig"]
    assert host_config["Privileged"] is False
    assert host_config["CapDrop"] == ["ALL"]
    assert sorted(host_config["CapAdd"]) == sorted(ALLOWED_CAPABILITIES)
    assert "no-new-privileges:true" in host_config["SecurityOpt"]
    assert host_config["PidsLimit"] == 4096
    assert host_config["Memory"] == shown["memory_gb"] * 1024**3
    assert host_config["NanoCpus"] > 0 and host_config["Init"] is True
    assert not any("docker.sock" in b for b in host_config.get("Binds") or [])
    env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
    gpus = ",".join(shown["gpus"])
    assert env["GPUDOCK_GPUS"] == gpus and env["NVIDIA_VISIBLE_DEVICES"] == gpus
    assert env["WANDB_MODE"] == "off" and env["LD_PRELOAD"] == ""
    assert container.attrs["Config"]["Hostname"] == "train"
    labels = container.labels
    assert labels["gpudock.instance"] == shown["id"] and labels["gpudock.gpus"] == gpus
    assert labels["gpudock.host"] == shown["host"]
    status = run(container, "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status")
    assert "NoNewPrivs:\t1" in status


def test_start_on_other_gpus_carries_the_writable_layer(
    real: Platform, api: TestClient, carol: Tenant, engine: docker.DockerClient
) -> None:
    body = {"name": "a", "gpu_model": "RTX4090-24GB", "gpu_count": 1}
    api.post(f"{API}/instances", json=body, headers=carol.headers)
    real.reconciler.drain()
    first = instance(api, carol, "a")
    old = engine.containers.get(containers.container_name(real.ctx.cluster_id, first["id"]))
    run(old, "echo pip-installed > /opt/marker && echo data > /root/data/d")
    api.post(f"{API}/instances/a/stop", headers=carol.headers)
    real.reconciler.drain()
    # Someone else takes that card while "a" is stopped.
    taker = {"name": "b", "gpu_model": "RTX4090-24GB", "gpu_count": 1}
    api.post(f"{API}/instances", json=taker, headers=carol.headers)
    real.reconciler.drain()
    assert instance(api, carol, "b")["gpus"] == first["gpus"]
    api.post(f"{API}/instances/a/start", headers=carol.headers)
    real.reconciler.drain()
    moved = instance(api, carol, "a")
    assert moved["status"] == "running" and moved["gpus"] != first["gpus"]
    new = engine.containers.get(containers.container_name(real.ctx.cluster_id, first["id"]))
    assert new.id != old.id
    assert new.labels["gpudock.gpus"] == moved["gpus"][0]
    assert run(new, "cat /opt/marker /root/data/d") == "pip-installed\ndata"
    assert_converged(real.ctx, engine)
    api.delete(f"{API}/instances/a", headers=carol.headers)
    real.reconciler.drain()
    assert not engine.images.list(name=f"gpudock-sys/{real.ctx.cluster_id}-{first['id']}")


def test_image_env_cannot_reach_gpus_or_preload(
    real: Platform, api: TestClient, carol: Tenant, engine: docker.DockerClient, tmp_path: Path
) -> None:
    (tmp_path / "Dockerfile").write_text(
        "FROM gpudock/base:bookworm\nENV LD_PRELOAD=/tmp/evil.so NVIDIA_VISIBLE_DEVICES=all\n"
    )
    tag = f"gpudock-test/evil:{real.ctx.cluster_id}"
    engine.images.build(path=str(tmp_path), tag=tag, network_mode="none", rm=True, forcerm=True)
    try:
        body = {"name": "evil", "gpu_model": "RTX4090-24GB", "gpu_count": 1, "image": tag}
        response = api.post(f"{API}/instances", json=body, headers=carol.headers)
        assert response.status_code == 201, response.text
        real.reconciler.drain()
        shown = instance(api, carol, "evil")
        container = engine.containers.get(
            containers.container_name(real.ctx.cluster_id, shown["id"])
        )
        assert run(container, 'echo "[$LD_PRELOAD]"') == "[]"
        assert run(container, "echo $NVIDIA_VISIBLE_DEVICES") == shown["gpus"][0]
    finally:
        remove_cluster_objects(engine, real.ctx.cluster_id)
        engine.images.remove(tag, force=True)


def test_a_container_that_dies_is_brought_back(
    real: Platform, api: TestClient, carol: Tenant, engine: docker.DockerClient
) -> None:
    api.post(f"{API}/instances", json={"name": "c", "gpu_count": 0}, headers=carol.headers)
    real.reconciler.drain()
    shown = instance(api, carol, "c")
    container = engine.containers.get(containers.container_name(real.ctx.cluster_id, shown["id"]))
    run(container, "echo kept > /root/data/k")
    container.remove(force=True)  # an operator's mistake, or a crashed host daemon
    real.reconciler.make_due("liveness")
    real.reconciler.drain()
    assert instance(api, carol, "c")["status"] == "running"
    revived = engine.containers.get(container.name)
    assert run(revived, "cat /root/data/k") == "kept"
    events = api.get(f"{API}/instances/c/events", headers=carol.headers).json()
    assert any("disappeared" in e["message"] for e in events)


def test_orphans_are_removed_at_start(real: Platform, engine: docker.DockerClient) -> None:
    labels = {**containers.cluster_labels(real.ctx.cluster_id), "gpudock.instance": "i-nobody"}
    engine.volumes.create(name=f"gpudock-{real.ctx.cluster_id}-orphan", labels=labels)
    engine.containers.create("gpudock/base:bookworm", ["sleep", "1"], labels=labels)
    from gpudock.reconcile.garbage import collect_garbage

    assert collect_garbage(real.ctx) == 2
    assert_converged(real.ctx, engine)
