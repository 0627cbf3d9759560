from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.docker_helpers import docker_client, remove_cluster_objects
from tests.server_process import ServerProcess


@pytest.fixture
def engine() -> docker.DockerClient:
    return docker_client()


@pytest.fixture
def server_factory(tmp_path: Path, engine: docker.DockerClient) -> Iterator[type[ServerProcess]]:
    made: list[ServerProcess] = []

    class Tracked(ServerProcess):
        def __post_init__(self) -> None:
            made.append(self)

    yield Tracked
    for server in made:
        server.kill()
        if (server.data_dir / "gpudock.db").exists() or server.database_url:
            engine_, _sessions, cluster = server.database()
            engine_.dispose()
            remove_cluster_objects(engine, cluster)
