"""The Kubernetes runtime against the fake cluster, whose kubelet runs pods as
real containers: an instance's lifecycle through the server's own path
(services and reconciler), its data across a stop, garbage collection by
label, and the API's errors in gpudock's terms."""

from __future__ import annotations

import select as io_select
import socket
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import (
    GpuDeviceModel,
    GpuState,
    HostModel,
    InstanceStatus,
)
from gpudock.errors import RuntimeFailure, RuntimeUnavailable
from gpudock.platform import Platform
from gpudock.reconcile import gpu_health
from gpudock.reconcile.garbage import collect_garbage
from gpudock.runtime.base import ContainerSpec
from gpudock.runtime.kubernetes import KubernetesRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions as instances
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from tests.support.kube_fake import TEST_IMAGE, FakeKubeCluster
from tests.support.kube_fake.platforms import DEADLINE_S, drain_until, run_instance
from tests.support.sshgw import wait_for

pytestmark = pytest.mark.docker


def test_lifecycle_pod_on_the_placed_node_and_data_across_a_stop(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    ctx = kube.ctx
    alice = users.create_user(ctx, "alice").user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="train", image=TEST_IMAGE)
    created = instances.create_instance(ctx, alice, request)
    row = drain_until(kube, created.id, InstanceStatus.RUNNING)
    with ctx.sessions() as session:
        host = session.get(HostModel, row.host_id)
        assert host is not None and host.name == "gpu-a"
    namespace = f"gpudock-{ctx.cluster_id}-u-{alice.id}"
    name = containers.container_name(ctx.cluster_id, created.id)
    [pod] = cluster.objects("Pod", namespace)
    assert pod["metadata"]["name"] == name and pod["spec"]["nodeName"] == "gpu-a"
    assert pod["status"]["phase"] == "Running"
    assert pod["metadata"]["labels"]["gpudock.instance"] == created.id
    assert pod["metadata"]["labels"]["gpudock.cluster"] == ctx.cluster_id
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    [policy] = cluster.objects("NetworkPolicy", namespace)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    [claim] = cluster.objects("PersistentVolumeClaim", namespace)
    assert claim["spec"]["resources"]["requests"]["storage"] == f"{row.disk_gb}Gi"
    cluster.exec(namespace, name, ["sh", "-c", "echo kept > /root/data/f && touch /root/sys"])

    instances.stop_instance(ctx, alice, created.id)
    drain_until(kube, created.id, InstanceStatus.STOPPED)
    assert cluster.objects("Pod", namespace) == []
    assert len(cluster.objects("PersistentVolumeClaim", namespace)) == 1

    instances.start_instance(ctx, alice, created.id)
    drain_until(kube, created.id, InstanceStatus.RUNNING)
    assert cluster.exec(namespace, name, ["cat", "/root/data/f"]) == "kept\n"
    listing = cluster.exec(namespace, name, ["ls", "/root"]).split()
    assert "sys" not in listing  # the system disk does not survive a stop on Kubernetes

    instances.delete_instance(ctx, alice, created.id)
    drain_until(kube, created.id, InstanceStatus.DELETED)
    for kind in ("Pod", "PersistentVolumeClaim", "ConfigMap"):
        assert cluster.objects(kind, namespace) == [], kind


def test_a_share_asks_hami_for_its_memory_and_cores_and_keeps_them_in_etc_environment(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    ctx = kube.ctx
    bob = users.create_user(ctx, "bob").user
    request = InstanceRequest(
        gpu_model="A100-80GB",
        gpu_count=1,
        gpu_share=Decimal("0.25"),
        name="part",
        image=TEST_IMAGE,
    )
    created = instances.create_instance(ctx, bob, request)
    drain_until(kube, created.id, InstanceStatus.RUNNING)
    namespace = f"gpudock-{ctx.cluster_id}-u-{bob.id}"
    [pod] = cluster.objects("Pod", namespace)
    container = pod["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpumem"]) == ("1", "20480")
    assert limits["nvidia.com/gpucores"] == "25"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CUDA_DEVICE_MEMORY_LIMIT"] == "20480m" and env["CUDA_DEVICE_SM_LIMIT"] == "25"
    etc_environment = cluster.exec(namespace, pod["metadata"]["name"], ["cat", "/etc/environment"])
    assert 'CUDA_DEVICE_MEMORY_LIMIT="20480m"' in etc_environment
    assert 'CUDA_DEVICE_SM_LIMIT="25"' in etc_environment


def _orphan_spec(platform: Platform, instance_id: str) -> ContainerSpec:
    labels = {
        **containers.cluster_labels(platform.ctx.cluster_id),
        "gpudock.instance": instance_id,
        "gpudock.user": "ghost",
        "gpudock.host": "gpu-a",
    }
    return ContainerSpec(
        name=containers.container_name(platform.ctx.cluster_id, instance_id),
        hostname="ghost",
        image=TEST_IMAGE,
        labels=labels,
        env={"NVIDIA_VISIBLE_DEVICES": "void"},
        gpu_uuids=(),
        real_gpus=True,
        cpus=1,
        memory_mb=256,
        pids_limit=256,
        volume_name=containers.volume_name(platform.ctx.cluster_id, instance_id),
    )


def test_garbage_collection_by_label_removes_what_no_instance_owns(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    runtime = kube.ctx.runtime
    spec = _orphan_spec(kube, "i-00000ghost")
    runtime.ensure_volume(spec.volume_name, spec.labels, 1)
    runtime.start_container(runtime.create_container(spec).id)
    labels = containers.cluster_labels(kube.ctx.cluster_id)
    assert [c.name for c in runtime.list_containers(labels)] == [spec.name]
    assert [v.name for v in runtime.list_volumes(labels)] == [spec.volume_name]

    assert collect_garbage(kube.ctx) >= 2
    assert runtime.list_containers(labels) == [] and runtime.list_volumes(labels) == []
    assert cluster.objects("ConfigMap") == [] and cluster.objects("PersistentVolumeClaim") == []


def test_what_cannot_run_is_a_runtime_failure_with_the_kubelets_reason(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    runtime = kube.ctx.runtime
    missing = _orphan_spec(kube, "i-0000noimage")
    missing = ContainerSpec(**{**missing.__dict__, "image": "localhost/kfake-absent:1"})
    runtime.ensure_volume(missing.volume_name, missing.labels, 1)
    with pytest.raises(RuntimeFailure, match="ErrImageNeverPull"):
        runtime.start_container(runtime.create_container(missing).id)

    greedy = _orphan_spec(kube, "i-00000greedy")
    greedy = ContainerSpec(**{**greedy.__dict__, "gpu_uuids": ("a", "b", "c")})
    runtime.ensure_volume(greedy.volume_name, greedy.labels, 1)
    with pytest.raises(RuntimeFailure, match=r"OutOfnvidia\.com/gpu"):
        runtime.start_container(runtime.create_container(greedy).id)
    assert runtime.stop_container(greedy.name, 1) is not None  # the record stays
    runtime.remove_container(greedy.name)
    assert runtime.inspect_container(greedy.name) is None
    assert runtime.stop_container(greedy.name, 1) is None


def test_an_unreachable_api_is_runtime_unavailable(tmp_path: Path) -> None:
    with FakeKubeCluster() as gone:
        kubeconfig = gone.kubeconfig(tmp_path)
    runtime = KubernetesRuntime(kubeconfig, timeout_s=5)
    with pytest.raises(RuntimeUnavailable, match="unreachable"):
        runtime.list_containers({"gpudock.managed": "true"})
    with pytest.raises(RuntimeUnavailable):
        runtime.engine_info()


def test_a_node_that_goes_not_ready_takes_its_gpus_out_of_service(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    def states() -> set[GpuState]:
        with kube.ctx.sessions() as session:
            return {gpu.state for gpu in session.scalars(select(GpuDeviceModel))}

    gpu_health.health_pass(kube.ctx, gpu_health.HealthWatch())
    assert states() == {GpuState.HEALTHY}
    cluster.set_node_ready("gpu-a", False)
    gpu_health.health_pass(kube.ctx, gpu_health.HealthWatch())
    assert GpuState.HEALTHY not in states()


def _read_to_end(sock: socket.socket, deadline: float) -> bytes:
    data = b""
    while time.monotonic() < deadline:
        readable, _, _ = io_select.select([sock], [], [], deadline - time.monotonic())
        if not readable:
            break
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"no end of output; read {data!r}")


def test_a_session_is_pod_exec_over_websocket(kube: Platform, cluster: FakeKubeCluster) -> None:
    runtime = kube.ctx.runtime
    spec = _orphan_spec(kube, "i-000session")
    runtime.ensure_volume(spec.volume_name, spec.labels, 1)
    state = runtime.start_container(runtime.create_container(spec).id)
    script = 'read line; echo "got $line as $WHO"; echo oops >&2; exit 3'
    session = runtime.open_exec_stream(
        state.id, ["sh", "-c", script], tty=False, env={"WHO": "alice"}
    )
    assert session.err_sock is not None
    session.sock.sendall(b"hello\n")
    session.sock.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + DEADLINE_S
    assert _read_to_end(session.sock, deadline) == b"got hello as alice\n"
    assert _read_to_end(session.err_sock, deadline) == b"oops\n"
    assert wait_for(lambda: runtime.exec_exit_code(session.exec_id), "the exit code") == 3
    paths = {p.partition("?")[0] for _, p in cluster.api.requests}
    assert not any(p.endswith("/exec") for p in paths)  # a WebSocket, not a REST call
    session.sock.close()
    session.err_sock.close()


def test_commands_and_files_go_into_a_pod_through_exec(kube: Platform) -> None:
    runtime = kube.ctx.runtime
    spec = _orphan_spec(kube, "i-0000putfile")
    runtime.ensure_volume(spec.volume_name, spec.labels, 1)
    state = runtime.start_container(runtime.create_container(spec).id)
    runtime.put_file(state.id, "/usr/local/lib/gpudock/tool.sh", b"#!/bin/sh\necho tool ran\n")
    ran = runtime.exec_in_container(spec.name, ["/usr/local/lib/gpudock/tool.sh"])
    assert (ran.exit_code, ran.output) == (0, b"tool ran\n")
    failed = runtime.exec_in_container(spec.name, ["sh", "-c", "echo no >&2; exit 4"])
    assert (failed.exit_code, failed.output) == (4, b"no\n")


def test_port_socket_reaches_the_pods_loopback_through_port_forward(kube: Platform) -> None:
    runtime = kube.ctx.runtime
    spec = _orphan_spec(kube, "i-00000ports")
    runtime.ensure_volume(spec.volume_name, spec.labels, 1)
    state = runtime.start_container(runtime.create_container(spec).id)
    server = (
        "import socket\n"
        "s = socket.create_server(('127.0.0.1', 8123))\n"
        "c, _ = s.accept()\n"
        "c.sendall(b'pong:' + c.recv(10))\n"
    )
    runtime.put_file(state.id, "/root/echo.py", server.encode())
    session = runtime.open_exec_stream(state.id, ["python3", "/root/echo.py"], tty=False, env={})

    def exchange() -> bytes | None:
        made = runtime.port_socket(state.id, 8123)
        with made.sock:
            made.sock.settimeout(10)
            made.sock.connect(made.address)
            made.sock.sendall(b"ping")
            answer = made.sock.recv(100)
        return answer or None  # empty: the server was not listening yet

    assert wait_for(exchange, "an answer through port-forward", DEADLINE_S) == b"pong:ping"
    assert wait_for(lambda: runtime.exec_exit_code(session.exec_id) == 0, "the server to end")
    session.sock.close()


def test_a_data_volume_is_copied_by_a_helper_pod_mounting_both_claims(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    runtime = kube.ctx.runtime
    spec = _orphan_spec(kube, "i-000000copy")
    runtime.ensure_volume(spec.volume_name, spec.labels, 1)
    state = runtime.start_container(runtime.create_container(spec).id)
    runtime.put_file(state.id, "/root/data/model/weights.bin", b"w" * 100_000, 0o640)
    target = f"{spec.volume_name}-elsewhere"
    runtime.ensure_volume(target, spec.labels, 1)
    copied = runtime.copy_volume(
        spec.volume_name,
        target,
        image=TEST_IMAGE,
        helper_name=f"{spec.name}-move",
        labels=spec.labels,
    )
    assert copied >= 100_000
    assert [p for p in cluster.objects("Pod") if p["metadata"]["name"].endswith("-move")] == []
    moved = ContainerSpec(**{**spec.__dict__, "name": f"{spec.name}-b", "volume_name": target})
    there = runtime.start_container(runtime.create_container(moved).id)
    listing = runtime.exec_in_container(
        there.id, ["stat", "-c", "%s %a", "/root/data/model/weights.bin"]
    )
    assert listing.output == b"100000 640\n"


def test_without_hami_a_share_gets_the_smallest_mig_slice_that_holds_it(
    kube_with: Callable[..., Platform], cluster: FakeKubeCluster
) -> None:
    cluster.offer(
        "gpu-a",
        {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-3g.40gb": "1"},
        {"nvidia.com/mig.strategy": "mixed"},
    )
    kube = kube_with()  # no HAMi
    ctx = kube.ctx
    gus = users.create_user(ctx, "gus").user
    namespace = f"gpudock-{ctx.cluster_id}-u-{gus.id}"
    asked = {}
    for share, name in ((Decimal("0.25"), "quarter"), (Decimal("0.1"), "tenth")):
        request = InstanceRequest(
            gpu_model="A100-80GB", gpu_count=1, gpu_share=share, name=name, image=TEST_IMAGE
        )
        created = instances.create_instance(ctx, gus, request)
        drain_until(kube, created.id, InstanceStatus.RUNNING)
        pod_name = containers.container_name(ctx.cluster_id, created.id)
        [pod] = [p for p in cluster.objects("Pod", namespace) if p["metadata"]["name"] == pod_name]
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert "nvidia.com/gpu" not in limits and pod["status"]["phase"] == "Running"
        asked[name] = sorted(k for k in limits if k.startswith("nvidia.com/mig-"))
    # A quarter needs 2 of 7 compute slices and 20 GB: 3g.40gb; a tenth fits 1g.10gb.
    assert asked == {"quarter": ["nvidia.com/mig-3g.40gb"], "tenth": ["nvidia.com/mig-1g.10gb"]}


def test_a_node_that_joins_is_placed_on_and_a_cordoned_one_no_longer(
    kube: Platform, cluster: FakeKubeCluster
) -> None:
    def present() -> set[str]:
        kube.reconciler.make_due("inventory")
        kube.reconciler.tick()
        with kube.ctx.sessions() as session:
            hosts = session.scalars(select(HostModel).where(HostModel.present.is_(True)))
            return {h.name for h in hosts}

    assert present() == {"gpu-a"}
    cluster.add_node("gpu-b", gpus=1, product="NVIDIA-A100-SXM4-80GB")
    assert present() == {"gpu-a", "gpu-b"}  # no restart: read again while it runs
    cluster.cordon("gpu-a")
    assert present() == {"gpu-b"}
    started = run_instance(kube, "ivy", "newcomer")
    with kube.ctx.sessions() as session:
        host = session.get(HostModel, started.row.host_id)
        assert host is not None and host.name == "gpu-b"
    cluster.cordon("gpu-a", False)
    assert present() == {"gpu-a", "gpu-b"}
