"""The crash soak, short: ~60 s of lifecycle calls from two clients while the
server is SIGKILLed at random moments (`bench/crash_soak.py` runs it long)."""

from __future__ import annotations

from pathlib import Path

import docker
from bench.crash_soak import FLEET, run_soak

from tests.support.servers import ServerFactory


def test_crash_soak_keeps_every_invariant(
    server_factory: ServerFactory, tmp_path: Path, engine: docker.DockerClient
) -> None:
    server = server_factory(tmp_path / "data", FLEET)
    result = run_soak(
        server.data_dir,
        engine,
        operations=14,
        clients=2,
        seed=20261129,
        kill_after=(3, 6),
        kill_within_s=0.5,
        max_seconds=45.0,  # then it stops issuing calls, however few it made
        server=server,
    )
    assert result.kills >= 2, result  # at least one mid-run, and the last one
    assert result.answered >= 4, result  # restarts are slow on a loaded 2-core machine
    assert result.violations == [], result.violations
