"""50 parallel creates for 16 GPUs against the real server: exactly 16 placed."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import httpx
import pytest
from sqlalchemy import select

from gpudock.db.models import GpuAllocationModel
from tests.support.docker import assert_converged_on
from tests.support.server_process import wait_settled
from tests.support.servers import ServerFactory


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_fifty_parallel_creates_for_sixteen_gpus(
    server_factory: ServerFactory,
    tmp_path: Path,
    engine: docker.DockerClient,
    database: str,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue("postgres_url") if database == "postgres" else None
    server = server_factory(tmp_path / "data", "2x8xA100-80GB", database_url=url)
    server.start()
    with server.client() as admin:
        token = admin.post("/users", json={"name": "eve"}).json()["token"]

    def create(_: int) -> int:
        with httpx.Client(
            base_url=server.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        ) as client:
            return client.post("/instances", json={"gpu_model": "A100-80GB"}).status_code

    with ThreadPoolExecutor(50) as pool:
        codes = list(pool.map(create, range(50)))
    assert codes == [201] * 50
    wait_settled(server, token, timeout_s=180)

    with server.client(token) as user:
        listed = user.get("/instances").json()
    statuses = Counter(i["status"] for i in listed)
    assert statuses == {"running": 16, "pending": 34}
    gpus = [g for i in listed for g in i["gpus"]]
    assert len(gpus) == 16 and len(set(gpus)) == 16
    _, sessions, cluster = server.database()
    with sessions() as session:
        assert len(set(session.scalars(select(GpuAllocationModel.gpu_id)))) == 16
    assert_converged_on(sessions, cluster, engine)
