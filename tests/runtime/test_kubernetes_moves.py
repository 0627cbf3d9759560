"""Moves on the Kubernetes runtime against the fake cluster: off a lost node,
off a pod the cluster evicted, with the home kept, on shared storage (the
same claim), and on node-local storage (streamed between nodes, or waiting
for the data's node)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from sqlalchemy import select

from gpudock.db.models import HostModel, InstanceModel, InstanceStatus, MigrationModel
from gpudock.platform import Platform, default_runtime, open_platform
from gpudock.reconcile import gpu_health
from gpudock.services.fleet import inventory
from gpudock.services.instances import actions as instances
from gpudock.settings import Settings
from tests.support.billing import compute_intervals
from tests.support.kube_fake import FakeKubeCluster
from tests.support.kube_fake.platforms import DEADLINE_S, drain_until, run_instance, running_on
from tests.support.sshgw import wait_for

pytestmark = pytest.mark.docker


def test_an_instance_on_a_lost_node_moves_to_another_with_its_data(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    ctx = kube.ctx
    started = run_instance(kube, "carol", "mover")
    created, namespace, name = started.row, started.namespace, started.pod
    cluster.exec(namespace, name, ["sh", "-c", "echo travels > /root/data/f"])
    cluster.add_node("gpu-b", gpus=2, product="NVIDIA-A100-SXM4-80GB")
    inventory.sync_inventory(ctx, ctx.gpu_source.discover())
    cluster.set_node_ready("gpu-a", False)
    gpu_health.health_pass(ctx, gpu_health.HealthWatch())

    def on_b() -> dict[str, object] | None:
        kube.reconciler.drain()
        pods = cluster.objects("Pod", namespace)
        running = [p for p in pods if p["metadata"]["name"] == name]
        if running and running[0]["spec"]["nodeName"] == "gpu-b":
            return running[0] if running[0]["status"].get("phase") == "Running" else None
        return None

    wait_for(on_b, "the instance's pod on gpu-b", DEADLINE_S)
    drain_until(kube, created.id, InstanceStatus.RUNNING)
    assert cluster.exec(namespace, name, ["cat", "/root/data/f"]) == "travels\n"


@pytest.fixture
def kube_home(kube_with: Callable[..., Platform]) -> Platform:
    return kube_with(kubernetes_home=True)


def test_root_survives_a_stop_with_the_home_option_and_an_eviction_moves_all_of_it(
    kube_home: Platform, cluster: FakeKubeCluster
) -> None:
    ctx = kube_home.ctx
    started = run_instance(kube_home, "erin", "homely")
    created, namespace, name = started.row, started.namespace, started.pod
    [claim] = cluster.objects("PersistentVolumeClaim", namespace)
    assert claim["metadata"]["annotations"]["gpudock.layout"] == "home"
    [pod] = cluster.objects("Pod", namespace)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["seed-home"]
    mounts = {
        m["mountPath"]: m.get("subPath") for m in pod["spec"]["containers"][0]["volumeMounts"]
    }
    assert mounts["/root"] == "home" and mounts["/root/data"] == "data"
    # Seeded from the image's /root; what the user adds there is kept.
    cluster.exec(namespace, name, ["sh", "-c", "test -s /root/.bashrc && touch /root/sys"])
    cluster.exec(namespace, name, ["sh", "-c", "echo kept > /root/data/f"])

    instances.stop_instance(ctx, started.user, created.id)
    drain_until(kube_home, created.id, InstanceStatus.STOPPED)
    instances.start_instance(ctx, started.user, created.id)
    drain_until(kube_home, created.id, InstanceStatus.RUNNING)
    assert "sys" in cluster.exec(namespace, name, ["ls", "/root"]).split()
    assert cluster.exec(namespace, name, ["ls", "-A", "/root/data"]).split() == ["f"]

    # Evicted: a fault, not an exit. gpu-a still has a free GPU, but the node that
    # evicted it is avoided for a while: with no other node, the instance waits.
    cluster.evict_pod(namespace, name, "The node was low on resource: memory.")

    def waiting_elsewhere() -> InstanceModel | None:
        kube_home.reconciler.drain()
        with ctx.sessions() as session:
            row = session.get(InstanceModel, created.id)
            assert row is not None and row.status != InstanceStatus.FAILED, row
            return row if "another host than gpu-a" in (row.status_reason or "") else None

    waiting = wait_for(waiting_elsewhere, "the instance to wait for another node", DEADLINE_S)
    assert waiting.status == InstanceStatus.MIGRATING and not waiting.placed
    with ctx.sessions() as session:
        [move] = session.scalars(select(MigrationModel)).all()
        assert move.trigger == "evicted" and "Evicted" in move.reason
        assert "low on resource: memory" in move.reason
        intervals = compute_intervals(session, created.id)
        assert all(i.closed_at is not None for i in intervals)  # billed to the pod's end

    cluster.add_node("gpu-b", gpus=2, product="NVIDIA-A100-SXM4-80GB")
    inventory.sync_inventory(ctx, ctx.gpu_source.discover())
    moved = wait_for(
        lambda: running_on(kube_home, created.id, "gpu-b"), "the move to gpu-b", DEADLINE_S
    )
    [pod] = [p for p in cluster.objects("Pod", namespace) if p["metadata"]["name"] == name]
    assert pod["spec"]["nodeName"] == "gpu-b"
    assert moved.data_volume != claim["metadata"]["name"]  # a copy, laid out as its source
    assert "sys" in cluster.exec(namespace, name, ["ls", "/root"]).split()
    assert cluster.exec(namespace, name, ["cat", "/root/data/f"]) == "kept\n"


def test_on_shared_storage_a_move_takes_the_same_claim_along(
    kube_with: Callable[..., Platform], cluster: FakeKubeCluster
) -> None:
    kube = kube_with(kubernetes_shared_storage=True)
    ctx = kube.ctx
    started = run_instance(kube, "fay", "networked")
    first, namespace, name = started.row, started.namespace, started.pod
    cluster.exec(namespace, name, ["sh", "-c", "echo same > /root/data/f"])
    cluster.add_node("gpu-b", gpus=2, product="NVIDIA-A100-SXM4-80GB")
    inventory.sync_inventory(ctx, ctx.gpu_source.discover())
    cluster.evict_pod(namespace, name, "The node was low on resource: memory.")
    moved = wait_for(lambda: running_on(kube, first.id, "gpu-b"), "the move", DEADLINE_S)
    assert moved.data_volume == first.data_volume  # no copy: the claim attaches on gpu-b
    [claim] = cluster.objects("PersistentVolumeClaim", namespace)
    assert claim["metadata"]["name"] == first.data_volume
    helpers = [e for e in cluster.objects("Event", namespace) if "-move" in str(e)]
    assert helpers == []  # no helper pod ran
    assert cluster.exec(namespace, name, ["cat", "/root/data/f"]) == "same\n"


def test_on_node_local_storage_a_move_streams_the_data_or_waits_for_its_node(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Claims mount only on their own node: a move streams the data between a
    pod on each node, and while the data's node is down the move waits, saying why."""
    with FakeKubeCluster(engine.api, local_volumes=True) as cluster:
        cluster.add_node("gpu-a", gpus=1, product="NVIDIA-A100-SXM4-80GB")
        cluster.add_node("gpu-b", gpus=1, product="NVIDIA-A100-SXM4-80GB")
        settings = Settings(
            data_dir=tmp_path / "data",
            runtime="kubernetes",
            kubeconfig=cluster.kubeconfig(tmp_path),
            kubernetes_start_timeout_s=6.0,  # how long a copy's pod may wait to mount
            volume_copy_timeout_s=DEADLINE_S,
            image_pull="missing",
        )
        kube = open_platform(settings, runtime=default_runtime(settings))
        try:
            _stream_then_wait(kube, cluster)
        finally:
            kube.close()


def _stream_then_wait(kube: Platform, cluster: FakeKubeCluster) -> None:
    ctx = kube.ctx
    started = run_instance(kube, "hal", "local")
    created, namespace, name = started.row, started.namespace, started.pod
    with ctx.sessions() as session:
        here = session.get(HostModel, created.host_id)
        assert here is not None
    there = "gpu-b" if here.name == "gpu-a" else "gpu-a"
    script = "mkdir -p /root/data/d && echo local > /root/data/d/f && chmod 640 /root/data/d/f"
    cluster.exec(namespace, name, ["sh", "-c", script])

    # The node is up: the data streams from a pod on it to a pod on the other.
    cluster.evict_pod(namespace, name, "The node was low on resource: memory.")
    wait_for(lambda: running_on(kube, created.id, there), f"the move to {there}", DEADLINE_S)
    assert cluster.exec(namespace, name, ["stat", "-c", "%a %s", "/root/data/d/f"]) == "640 6\n"
    holders = {e["involvedObject"]["name"] for e in cluster.objects("Event", namespace)}
    assert {f"{name}-move-from", f"{name}-move-to"} <= holders

    # Its node goes down: a copy cannot mount its claim elsewhere; the move waits.
    cluster.set_node_ready(there, False)
    gpu_health.health_pass(ctx, gpu_health.HealthWatch())

    def waiting() -> InstanceModel | None:
        with contextlib.suppress(TimeoutError):  # it retries: it never settles
            kube.reconciler.drain(timeout_s=5.0)
        with ctx.sessions() as session:
            row = session.get(InstanceModel, created.id)
            assert row is not None and row.status != InstanceStatus.FAILED, row.status_reason
            return row if "FailedMount" in (row.status_reason or "") else None

    stuck = wait_for(waiting, "the move to wait for the data's node", DEADLINE_S)
    assert f"on {there}" in (stuck.status_reason or "")  # says where the data is
    cluster.set_node_ready(there, True)  # back: the data streams off it
    back = here.name
    wait_for(lambda: running_on(kube, created.id, back), f"the move to {back}", DEADLINE_S)
    assert cluster.exec(namespace, name, ["cat", "/root/data/d/f"]) == "local\n"
