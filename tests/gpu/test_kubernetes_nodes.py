"""GPU nodes of a cluster become hosts, read over the fake API server as the
device plugin and GPU feature discovery label them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.gpu.base import GpuDiscoveryError
from gpudock.gpu.kubernetes_nodes import KubernetesNodeSource, model_of
from tests.support.kube_fake import FakeKubeCluster


@pytest.fixture
def cluster() -> Iterator[FakeKubeCluster]:
    with FakeKubeCluster() as made:
        yield made


@pytest.fixture
def source(cluster: FakeKubeCluster, tmp_path: Path) -> KubernetesNodeSource:
    return KubernetesNodeSource.connect(cluster.kubeconfig(tmp_path), None)


@pytest.mark.parametrize(
    ("labels", "model", "memory_mb"),
    [
        ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, "A100-80GB", 81920),
        ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "H100-80GB", 81920),
        (
            {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090", "nvidia.com/gpu.memory": "24564"},
            "RTX4090-24GB",
            24564,
        ),
        (
            {"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.memory": "143771"},
            "H200-140GB",
            143771,
        ),
        ({"nvidia.com/gpu.product": "Acme-Tensor-X"}, "Acme-Tensor-X", 0),  # kept as it is
    ],
)
def test_products_map_to_gpudock_model_names(
    labels: dict[str, str], model: str, memory_mb: int
) -> None:
    assert model_of(labels) == (model, memory_mb)


def test_gpu_nodes_become_hosts_with_count_driver_and_cuda(
    cluster: FakeKubeCluster, source: KubernetesNodeSource
) -> None:
    cluster.add_node("gpu-a", gpus=8, product="NVIDIA-A100-SXM4-80GB", cpu="96", memory="1024Gi")
    cluster.add_node("gpu-b", gpus=2, product="Acme-Tensor-X")
    cluster.add_node("cpu-only")
    cluster.add_node("cordoned", gpus=4, product="NVIDIA-A100-SXM4-80GB")
    cluster.store.update(
        cluster.store_node(), "", "cordoned", lambda n: {**n, "spec": {"unschedulable": True}}
    )
    hosts = {h.name: h for h in source.discover()}
    assert set(hosts) == {"gpu-a", "gpu-b"}
    a = hosts["gpu-a"]
    assert (a.cpus, a.memory_gb, a.driver_version, a.cuda_version) == (
        96,
        1024,
        "550.54.15",
        "12.4",
    )
    assert [g.model for g in a.gpus] == ["A100-80GB"] * 8 and not a.simulated
    assert len({g.uuid for g in a.gpus}) == 8
    assert [g.uuid for g in source.discover()[0].gpus] == [g.uuid for g in a.gpus]  # stable
    assert [g.model for g in hosts["gpu-b"].gpus] == ["Acme-Tensor-X"] * 2


def test_a_node_not_ready_or_offering_fewer_gpus_reports_them_lost(
    cluster: FakeKubeCluster, source: KubernetesNodeSource
) -> None:
    cluster.add_node("gpu-a", gpus=4, product="NVIDIA-A100-SXM4-80GB")
    cluster.add_node("gpu-b", gpus=2, product="NVIDIA-A100-SXM4-80GB")
    assert source.poll_health(0) == []
    uuids = {h.name: [g.uuid for g in h.gpus] for h in source.discover()}
    cluster.set_node_ready("gpu-a", False)

    def fewer(node: dict[str, object]) -> dict[str, object]:
        node["status"]["allocatable"]["nvidia.com/gpu"] = "1"  # type: ignore[index]
        return node

    cluster.store.update(cluster.store_node(), "", "gpu-b", fewer)
    lost = source.poll_health(0)
    assert {e.kind for e in lost} == {"gpu_lost"}
    assert sorted(e.gpu_uuid for e in lost) == sorted(uuids["gpu-a"] + uuids["gpu-b"][1:])


def test_an_unreachable_cluster_is_a_discovery_error(tmp_path: Path) -> None:
    with FakeKubeCluster() as gone:
        kubeconfig = gone.kubeconfig(tmp_path)
    with pytest.raises(GpuDiscoveryError, match="unreachable"):
        KubernetesNodeSource.connect(kubeconfig, None).discover()
