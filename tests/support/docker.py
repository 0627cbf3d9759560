"""Real-Docker helpers for tests: the engine, the base image, cleanup, invariants."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gpudock.db.models import GpuAllocationModel, InstanceModel, InstanceStatus
from gpudock.images.base_image import BASE_IMAGE
from gpudock.runtime.base import LABEL_CLUSTER, LABEL_OWNER
from gpudock.runtime.docker import ALLOWED_CAPABILITIES
from gpudock.runtime.docker.volumes import LoopVolumes
from gpudock.services.context import ServiceContext
from gpudock.services.instances import container_spec as containers

# Linux's bit for each capability an instance keeps (linux/capability.h).
CAPABILITY_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "NET_BIND_SERVICE": 10,
}


def allowed_capability_mask() -> int:
    """The capability set (as /proc/<pid>/status shows it) of an instance's processes."""
    assert set(CAPABILITY_BITS) == set(ALLOWED_CAPABILITIES)
    return sum(1 << CAPABILITY_BITS[name] for name in ALLOWED_CAPABILITIES)


ENGINE_SOCKET = "/var/run/docker.sock"


class EngineRelay:
    """A Unix socket of its own relaying to the suite's engine, until `cut()`:
    then the engine is gone for whoever connected through it."""

    def __init__(self) -> None:
        self._directory = tempfile.mkdtemp(prefix="gdr-", dir="/tmp")  # socket paths are short
        self.url = f"unix://{self._directory}/engine.sock"
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(f"{self._directory}/engine.sock")
        self._listener.listen()
        self._open: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        for sock in self._open:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                engine = socket.socket(socket.AF_UNIX)
                engine.connect(ENGINE_SOCKET)
                self._open += [client, engine]
                for source, target in ((client, engine), (engine, client)):
                    threading.Thread(target=_relay, args=(source, target), daemon=True).start()


def _relay(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(1 << 16):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def engine_relay() -> Iterator[EngineRelay]:
    relay = EngineRelay()
    try:
        yield relay
    finally:
        relay.cut()


TRANSITIONAL = {
    InstanceStatus.PENDING,
    InstanceStatus.CREATING,
    InstanceStatus.STOPPING,
    InstanceStatus.STARTING,
    InstanceStatus.DELETING,
    InstanceStatus.MIGRATING,
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
        device = (volume.attrs.get("Options") or {}).get("device")
        volume.remove(force=True)
        if device:  # a size-limited volume: <root>/<name>/data, loop-mounted
            LoopVolumes(Path(device).parent.parent).remove(volume.name)
    for network in client.networks.list(filters={"label": label}):
        network.remove()


def unmount_everything_under(root: Path) -> None:
    """Unmount what is still mounted below `root`, deepest first: a loop volume a
    killed server mounted before the engine knew the volume (or after it forgot
    it) has no engine object for `remove_cluster_objects` to find, and would keep
    its loop device after the test."""
    prefix = f"{root.resolve()}/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for target in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", target], check=False, capture_output=True)


def remove_images_tagged(client: docker.DockerClient, prefixes: tuple[str, ...]) -> None:
    """Remove every tag starting with one of `prefixes` (an image goes with its last tag)."""
    if not prefixes:
        return
    for image in client.images.list():
        for tag in image.tags:
            if tag.startswith(prefixes):
                client.images.remove(tag, force=True)


def cluster_objects(client: docker.DockerClient, cluster_id: str) -> tuple[list[Any], list[Any]]:
    label = f"{LABEL_CLUSTER}={cluster_id}"
    return (
        client.containers.list(all=True, filters={"label": label}),
        client.volumes.list(filters={"label": label}),
    )


def cluster_networks(client: docker.DockerClient, cluster_id: str) -> list[Any]:
    return list(client.networks.list(filters={"label": f"{LABEL_CLUSTER}={cluster_id}"}))


def _waiting_for_capacity(instance: InstanceModel) -> bool:
    """Queued for GPUs that are all taken: a legitimate place to stay."""
    return (
        instance.status
        in (InstanceStatus.PENDING, InstanceStatus.STARTING, InstanceStatus.MIGRATING)
        and not instance.placed
        and instance.status_reason.startswith(("waiting for", "moving: waiting for"))
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
    tenants = {i.user_id for i in instances if i.status != InstanceStatus.DELETED}
    networks_in_use = {c.attrs["HostConfig"]["NetworkMode"] for c in found_containers}
    for network in cluster_networks(client, cluster_id):
        owner = network.attrs["Labels"].get(LABEL_OWNER)
        assert owner in tenants or network.name in networks_in_use, f"orphan network {network.name}"
    for instance in instances:
        name = containers.container_name(cluster_id, instance.id)
        if instance.status == InstanceStatus.RUNNING:
            container = client.containers.get(name)
            assert container.status == "running", instance.id
            tenant_network = containers.network_name(cluster_id, instance.user_id)
            assert container.attrs["HostConfig"]["NetworkMode"] == tenant_network, instance.id
        ever_ran = instance.container_id is not None  # stopped before placement: no volume yet
        if instance.status in (InstanceStatus.RUNNING, InstanceStatus.STOPPED) and ever_ran:
            # issue 6: its data volume, wherever it moved, and no copy left behind
            data_volume = containers.data_volume_of(cluster_id, instance)
            assert data_volume in volume_names, instance.id
            left = {
                v.name
                for v in found_volumes
                if v.attrs["Labels"]["gpudock.instance"] == instance.id
            }
            assert left == {data_volume}, f"stale volumes of {instance.id}: {left}"
    return instances
