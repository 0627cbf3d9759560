"""Fixtures of the runtime tests: the fake Kubernetes cluster and platforms on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from gpudock.platform import Platform, default_runtime, open_platform
from gpudock.settings import Settings
from tests.support.kube_fake import FakeKubeCluster, tag_test_image
from tests.support.kube_fake.platforms import DEADLINE_S


@pytest.fixture
def cluster(engine: docker.DockerClient) -> Iterator[FakeKubeCluster]:
    tag_test_image(engine.api)
    with FakeKubeCluster(engine.api) as made:
        made.add_node("gpu-a", gpus=2, product="NVIDIA-A100-SXM4-80GB", hami_memory_mb=81920)
        yield made


@pytest.fixture
def kube_with(cluster: FakeKubeCluster, tmp_path: Path) -> Iterator[Callable[..., Platform]]:
    """Platforms whose runtime and GPU inventory are the fake cluster, with
    these settings changed."""
    made: list[Platform] = []

    def make(**settings: object) -> Platform:
        chosen = Settings(
            data_dir=tmp_path / "data",
            runtime="kubernetes",
            kubeconfig=cluster.kubeconfig(tmp_path),
            kubernetes_start_timeout_s=DEADLINE_S,
            volume_copy_timeout_s=DEADLINE_S,
            image_pull="missing",
            **settings,
        )
        made.append(open_platform(chosen, runtime=default_runtime(chosen)))
        return made[-1]

    yield make
    for platform in made:
        platform.close()


@pytest.fixture
def kube(kube_with: Callable[..., Platform]) -> Platform:
    """HAMi on."""
    return kube_with(kubernetes_hami=True)
