from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.support.docker import remove_cluster_objects, unmount_everything_under
from tests.support.server_process import ServerProcess
from tests.support.servers import ServerFactory


@pytest.fixture
def server_factory(engine: docker.DockerClient, tmp_path: Path) -> Iterator[ServerFactory]:
    """Servers made here are always killed, their runtime objects removed and
    anything still mounted below the test's directory unmounted."""
    made: list[ServerProcess] = []

    def make(data_dir: Path, simulate: str, **kwargs: Any) -> ServerProcess:
        server = ServerProcess(data_dir, simulate, **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.kill()
    for server in made:
        if server.cluster_id:
            remove_cluster_objects(engine, server.cluster_id)
    unmount_everything_under(tmp_path)
