"""How the Kubernetes runtime's pods behave across retries, on a fake cluster
without a kubelet (its pods stay Pending): a start that timed out waits for
the same pod next time, and a create for another placement replaces the pod."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.errors import RuntimeUnavailable
from gpudock.runtime.base import ContainerSpec
from gpudock.runtime.kubernetes import KubernetesRuntime
from tests.support.kube_fake import FakeKubeCluster

LABELS = {
    "gpudock.managed": "true",
    "gpudock.cluster": "c1",
    "gpudock.instance": "i-1",
    "gpudock.user": "u1",
    "gpudock.host": "gpu-a",
    "gpudock.gpus": "GPU-1",
}
SPEC = ContainerSpec(
    name="gpudock-c1-i-1",
    hostname="one",
    image="registry.example/x:1",
    labels=LABELS,
    env={},
    gpu_uuids=("GPU-1",),
    real_gpus=True,
    cpus=1,
    memory_mb=512,
    pids_limit=256,
    volume_name="gpudock-c1-i-1-data",
)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[KubernetesRuntime, FakeKubeCluster]]:
    with FakeKubeCluster() as cluster:
        cluster.add_node("gpu-a", gpus=2, product="NVIDIA-A100-SXM4-80GB")
        made = KubernetesRuntime(cluster.kubeconfig(tmp_path), start_timeout_s=1)
        made.ensure_volume(SPEC.volume_name, LABELS, 1)
        yield made, cluster


def test_a_start_that_timed_out_waits_for_the_same_pod_again(
    runtime: tuple[KubernetesRuntime, FakeKubeCluster],
) -> None:
    kube, cluster = runtime
    created = kube.create_container(SPEC)
    with pytest.raises(RuntimeUnavailable, match="not running after 1 s"):
        kube.start_container(created.id)
    [first] = cluster.objects("Pod")
    with pytest.raises(RuntimeUnavailable):
        kube.start_container(created.id)
    [again] = cluster.objects("Pod")
    assert again["metadata"]["uid"] == first["metadata"]["uid"]  # not made anew


def test_a_create_for_other_gpus_replaces_the_pod_and_its_record(
    runtime: tuple[KubernetesRuntime, FakeKubeCluster],
) -> None:
    kube, cluster = runtime
    with pytest.raises(RuntimeUnavailable):
        kube.start_container(kube.create_container(SPEC).id)
    assert kube.create_container(SPEC).labels["gpudock.gpus"] == "GPU-1"  # the same: kept
    assert len(cluster.objects("Pod")) == 1
    moved = dataclasses.replace(SPEC, labels={**LABELS, "gpudock.gpus": "GPU-2"})
    state = kube.create_container(moved)
    assert state.labels["gpudock.gpus"] == "GPU-2" and not state.running
    assert cluster.objects("Pod") == []
    [record] = cluster.objects("ConfigMap")
    assert record["metadata"]["annotations"]["gpudock.gpus"] == "GPU-2"
