"""Container usage readings from the real Docker Engine (simulated GPUs)."""

from __future__ import annotations

import time

import docker
from fastapi.testclient import TestClient

from gpudock.api.app import create_app
from gpudock.platform import Platform
from gpudock.runtime.base import ContainerStats
from gpudock.runtime.docker import DockerRuntime
from gpudock.runtime.docker.translate import stats_of
from gpudock.services.instances import container_spec as containers
from tests.support.factories import make_tenant

API = "/api/v1"
BURN = ["sh", "-c", "while :; do :; done"]
DEADLINE_S = 15.0


def running_container(real: Platform) -> str:
    """A running instance's container name, made through the API as a tenant would."""
    api = TestClient(create_app(real, run_reconciler=False))
    carol = make_tenant(real, "carol")
    body = {"name": "burn", "gpu_model": "A100-80GB", "gpu_count": 1}
    created = api.post(f"{API}/instances", json=body, headers=carol.headers)
    assert created.status_code == 201, created.text
    real.reconciler.drain()
    return containers.container_name(real.ctx.cluster_id, created.json()["id"])


def reading(runtime: DockerRuntime, container: str) -> ContainerStats:
    stats = runtime.container_stats(container)
    assert stats is not None
    return stats


def test_a_busy_container_uses_growing_cpu_and_memory_within_its_limit(
    real: Platform, engine: docker.DockerClient
) -> None:
    runtime = real.ctx.runtime
    assert isinstance(runtime, DockerRuntime)
    name = running_container(real)
    engine.containers.get(name).exec_run(BURN, detach=True)
    attrs = engine.api.inspect_container(name)["HostConfig"]

    first = reading(runtime, name)
    assert first.cpu_limit == attrs["NanoCpus"] / 1e9
    limit = first.memory_limit_bytes
    assert limit is not None and limit == attrs["Memory"] > 0
    assert 0 < first.memory_bytes <= limit
    assert first.pids >= 1
    # Readings are the engine's samples: ask until a newer one shows the loop's work.
    deadline = time.monotonic() + DEADLINE_S
    later = reading(runtime, name)
    while later.cpu_total_ns <= first.cpu_total_ns and time.monotonic() < deadline:
        later = reading(runtime, name)
    assert later.cpu_total_ns > first.cpu_total_ns and later.read_at > first.read_at
    assert later.pids >= 2  # the keepalive and the loop at least


def test_stopped_or_missing_container_has_no_reading(real: Platform) -> None:
    runtime = real.ctx.runtime
    assert isinstance(runtime, DockerRuntime)
    name = running_container(real)
    assert runtime.stop_container(name, timeout_s=0) is not None
    assert runtime.container_stats(name) is None
    assert runtime.container_stats(f"{name}-never-made") is None


def test_memory_excludes_inactive_page_cache_on_cgroup_v1_and_v2() -> None:
    read = "2026-01-01T00:00:00.5Z"
    v1 = {"usage": 1000, "stats": {"total_inactive_file": 300, "inactive_file": 100}}
    v2 = {"usage": 1000, "stats": {"inactive_file": 400}}
    host = {"NanoCpus": 0, "CpuQuota": 150000, "CpuPeriod": 100000, "Memory": 0}
    for memory, used in ((v1, 700), (v2, 600), ({"usage": 50, "stats": {}}, 50)):
        stats = stats_of(host, {"read": read, "memory_stats": memory})
        assert stats is not None and stats.memory_bytes == used
        assert stats.cpu_limit == 1.5 and stats.memory_limit_bytes is None
    # What the engine answers for a container that stopped between inspect and stats
    assert stats_of(host, {"read": "0001-01-01T00:00:00Z", "memory_stats": {}}) is None


def test_block_io_and_network_counters_add_up_devices_and_interfaces() -> None:
    blkio = {
        "io_service_bytes_recursive": [
            {"major": 8, "minor": 0, "op": "read", "value": 4096},  # cgroup v2
            {"major": 8, "minor": 0, "op": "write", "value": 100},
            {"major": 8, "minor": 16, "op": "Read", "value": 1000},  # cgroup v1
            {"major": 8, "minor": 16, "op": "Total", "value": 5196},
        ]
    }
    networks = {"eth0": {"rx_bytes": 10, "tx_bytes": 20}, "eth1": {"rx_bytes": 1, "tx_bytes": 2}}
    body = {"read": "2026-01-01T00:00:00Z", "memory_stats": {}, "blkio_stats": blkio}
    stats = stats_of({}, {**body, "networks": networks})
    assert stats is not None
    assert (stats.block_read_bytes, stats.block_write_bytes) == (5096, 100)
    assert (stats.net_rx_bytes, stats.net_tx_bytes) == (11, 22)
    # an engine that counts nothing (rootless, or no network): null lists, zeros
    empty = stats_of({}, {**body, "blkio_stats": {"io_service_bytes_recursive": None}})
    assert empty is not None and (empty.block_read_bytes, empty.net_rx_bytes) == (0, 0)
