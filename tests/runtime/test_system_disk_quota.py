"""The engine's own cap on the system disk, where its storage driver has one.

The suite's engine runs on the host's ext4, where nothing caps a writable layer
(the watchdog's case, tested in test_isolation.py); this test starts an engine
of its own on btrfs with quotas, so gpudock's probe finds `size=` honoured and
every container it creates carries its instance's system-disk size.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.services.instances import container_spec as containers
from tests.support.docker import remove_cluster_objects
from tests.support.factories import make_tenant
from tests.support.platforms import PlatformFactory
from tests.support.private_engine import btrfs_engine

pytestmark = pytest.mark.docker
API = "/api/v1"


@pytest.fixture
def engine_url(tmp_path: Path) -> Iterator[str]:
    with btrfs_engine(tmp_path) as url:
        yield url


@pytest.fixture
def capped(
    platform_factory: PlatformFactory, engine_url: str, tmp_path: Path
) -> Iterator[Platform]:
    runtime = DockerRuntime(engine_url, volume_root=tmp_path / "volumes", host_firewall=False)
    platform = platform_factory(runtime=runtime)
    yield platform
    client = docker.DockerClient(base_url=engine_url, timeout=120)
    remove_cluster_objects(client, platform.ctx.cluster_id)  # and the loop-mounted volume


def test_writes_past_the_system_disk_fail_and_the_instance_runs_on(
    capped: Platform, engine_url: str
) -> None:
    assert capped.ctx.runtime.limits_system_disks()
    api = TestClient(create_app(capped, run_reconciler=False))
    tenant = make_tenant(capped, "fay")
    body = {"gpu_count": 0, "disk_gb": 1, "system_disk_gb": 1, "name": "capped"}
    created = api.post(f"{API}/instances", json=body, headers=tenant.headers)
    assert created.status_code == 201, created.text
    capped.reconciler.drain()
    client = docker.DockerClient(base_url=engine_url, timeout=120)
    name = containers.container_name(capped.ctx.cluster_id, created.json()["id"])
    container = client.containers.get(name)
    assert container.attrs["HostConfig"]["StorageOpt"] == {"size": "1G"}
    code, output = container.exec_run(
        ["sh", "-c", "dd if=/dev/zero of=/var/tmp/fill bs=4M count=512 2>&1"]
    )
    assert code != 0 and b"Disk quota exceeded" in output, output
    size = int(container.exec_run(["stat", "-c", "%s", "/var/tmp/fill"]).output)
    assert size <= 2**30, size
    code, output = container.exec_run(["sh", "-c", "echo fine > /root/data/f && cat /root/data/f"])
    assert (code, output.strip()) == (0, b"fine")  # /root/data is a volume of its own
    shown = api.get(f"{API}/instances/capped", headers=tenant.headers).json()
    assert shown["status"] == "running" and shown["system_disk_gb"] == 1, shown
