"""Real-Docker helpers for tests: the engine, the base image, cleanup, invariants."""

from __future__ import annotations

from collections import Counter
from typing import Any

import docker
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gpudock.db.models import GpuAllocationModel, InstanceModel, InstanceStatus
from gpudock.images.base_image import BASE_IMAGE
from gpudock.runtime.base import LABEL_CLUSTER
from gpudock.services import containers
from gpudock.services.context import ServiceContext

TRANSITIONAL = {
    InstanceStatus.PENDING,
    InstanceStatus.CREATING,
    InstanceStatus.STOPPING,
    InstanceStatus.STARTING,
    InstanceStatus.DELETING,
}


def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"these tests need a running Docker Engine (start dockerd): {exc}")
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{BASE_IMAGE} is missing: run `gpudock images build-base` first")
    return client


def remove_cluster_objects(client: docker.DockerClient, cluster_id: str) -> None:
    label = f"{LABEL_CLUSTER}={cluster_id}"
    for container in client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)
    for volume in client.volumes.list(filters={"label": label}):
        volume.remove(force=True)


def cluster_objects(client: docker.DockerClient, cluster_id: str) -> tuple[list[Any], list[Any]]:
    label = f"{LABEL_CLUSTER}={cluster_id}"
    return (
        client.containers.list(all=True, filters={"label": label}),
        client.volumes.list(filters={"label": label}),
    )


def _waiting_for_capacity(instance: InstanceModel) -> bool:
    """Queued for GPUs that are all taken: a legitimate place to stay."""
    return (
        instance.status in (InstanceStatus.PENDING, InstanceStatus.STARTING)
        and not instance.placed
        and instance.status_reason.startswith("waiting for")
    )


def assert_converged(ctx: ServiceContext, client: docker.DockerClient) -> list[InstanceModel]:
    return assert_converged_on(ctx.sessions, ctx.cluster_id, client)


def assert_converged_on(
    sessions: sessionmaker[Session], cluster_id: str, client: docker.DockerClient
) -> list[InstanceModel]:
    """The crash-safety invariants: nothing stuck, nothing orphaned, nothing shared."""
    with sessions() as session:
        instances = list(session.scalars(select(InstanceModel)))
        allocations = list(session.scalars(select(GpuAllocationModel)))
    stuck = [
        (i.id, i.status, i.status_reason)
        for i in instances
        if i.status in TRANSITIONAL and not _waiting_for_capacity(i)
    ]
    assert not stuck, f"instances stuck in a transitional state: {stuck}"
    by_id = {i.id: i for i in instances}
    gpu_counts = Counter(a.gpu_id for a in allocations)
    assert all(n == 1 for n in gpu_counts.values()), "a GPU held by two instances"
    for allocation in allocations:
        holder = by_id[allocation.instance_id]
        assert holder.placed and holder.status == InstanceStatus.RUNNING, holder.id
    found_containers, found_volumes = cluster_objects(client, cluster_id)
    live = {i.id for i in instances if i.status != InstanceStatus.DELETED}
    for container in found_containers:
        assert container.labels["gpudock.instance"] in live, f"orphan container {container.name}"
    volume_names = {v.name for v in found_volumes}
    for volume in found_volumes:
        assert volume.attrs["Labels"]["gpudock.instance"] in live, f"orphan volume {volume.name}"
    for instance in instances:
        name = containers.container_name(cluster_id, instance.id)
        if instance.status == InstanceStatus.RUNNING:
            assert client.containers.get(name).status == "running", instance.id
        ever_ran = instance.container_id is not None  # stopped before placement: no volume yet
        if instance.status in (InstanceStatus.RUNNING, InstanceStatus.STOPPED) and ever_ran:
            assert containers.volume_name(cluster_id, instance.id) in volume_names, instance.id
    return instances
