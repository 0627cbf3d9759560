"""The real gateway on 127.0.0.1 (port 0), real containers, the real OpenSSH client.

One platform, gateway and running instance ("train", owned by alice) serve the
whole package: starting a container costs seconds, and every test here either
only reads that instance or works in paths of its own. Tests that change an
instance's state create their own instance."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpudock.platform import open_platform
from gpudock.runtime.docker import DockerRuntime
from gpudock.settings import Settings
from gpudock.sshgw.gateway import SshGateway
from tests.support.docker import docker_client, remove_cluster_objects
from tests.support.sshgw import (
    FLEET,
    GatewayThread,
    World,
    populate_world,
)


@pytest.fixture(scope="package")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    engine = docker_client()
    tmp = tmp_path_factory.mktemp("sshgw")
    settings = Settings(
        data_dir=tmp / "data",
        simulate=FLEET,
        image_pull="never",
        ssh_port=0,
        ssh_keepalive_interval_s=0.5,
        ssh_keepalive_count_max=3,
        # One client address makes every connection of the whole package here;
        # the limits have their own tests (test_rate_limits.py).
        rate_limits_enabled=False,
        # The package's many no-GPU instances share one simulated host, which has
        # no more memory than this machine: 1 GB each leaves room for them all.
        no_gpu_memory_gb=1,
    )
    platform = open_platform(settings, runtime=DockerRuntime())
    gateway = GatewayThread(SshGateway(platform.ctx))
    try:
        world = populate_world(platform, gateway, engine, tmp)
        gateway.start()
        yield world
    finally:
        gateway.stop()
        remove_cluster_objects(engine, platform.ctx.cluster_id)
        platform.close()
