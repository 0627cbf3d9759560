"""The sampler against the fake NVML (whole GPUs and shares) and the simulated
fleet's model, on the fake runtime with a driven clock."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpudock.db.models import InstanceModel, InstanceStatus, UserModel
from gpudock.gpu.nvml import NvmlGpuSource
from gpudock.platform import Platform, open_platform
from gpudock.runtime.base import ContainerStats
from gpudock.runtime.fake import FakeRuntime, FakeUsage
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.metrics import gpu_utilisation_since, sampling
from gpudock.services.metrics.sampling import SamplerState, sample_running
from gpudock.services.metrics.store import GpuFigure, Sample
from gpudock.settings import Settings
from tests.gpu.fake_pynvml import MIB, FakeNvml, h200_1x, rtx4090_4x
from tests.support.foreground import CountingForeground
from tests.support.platforms import PlatformFactory

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class World:
    """A platform on the fake runtime whose clock the test drives."""

    def __init__(self, platform: Platform, runtime: FakeRuntime) -> None:
        self.platform, self.runtime = platform, runtime
        self.now = T0
        runtime.clock = lambda: self.now
        self.user: UserModel = users.create_user(platform.ctx, "sam").user
        self.state = SamplerState()

    def run(self, name: str, model: str, count: int, share: str | None = None) -> InstanceModel:
        request = InstanceRequest(
            gpu_model=model,
            gpu_count=count,
            name=name,
            gpu_share=None if share is None else Decimal(share),
        )
        actions.create_instance(self.platform.ctx, self.user, request)
        self.platform.reconciler.drain()
        instance = actions.get_instance(self.platform.ctx, self.user, name)
        assert instance.status == InstanceStatus.RUNNING and instance.container_id
        return instance

    def sample(self) -> dict[str, Sample]:
        return {s.instance_id: s for s in sample_running(self.platform.ctx, self.state)}

    def gpus_of(self, instance: InstanceModel) -> list[str]:
        return [g for g in instance.container_gpus.split(",") if g]


@pytest.fixture
def nvml_world(tmp_path: Path) -> Iterator[Callable[[FakeNvml], World]]:
    opened: list[Platform] = []

    def make(nvml: FakeNvml) -> World:
        runtime = FakeRuntime()
        platform = open_platform(
            Settings(data_dir=tmp_path / f"d{len(opened)}", runtime="fake", image_pull="never"),
            runtime=runtime,
            gpu_source=NvmlGpuSource(nvml, host_name="gpu0"),
        )
        opened.append(platform)
        return World(platform, runtime)

    yield make
    for platform in opened:
        platform.close()


def test_a_share_sees_only_its_own_processes(nvml_world: Callable[[FakeNvml], World]) -> None:
    nvml = h200_1x()
    world = nvml_world(nvml)
    greedy = world.run("greedy", "H200-140GB", 1, share="0.5")
    modest = world.run("modest", "H200-140GB", 1, share="0.5")
    nvml.set_utilisation(0, 95, used_bytes=140_000 * MIB)  # the whole card: not a share's figure
    processes = [(greedy, 100, 60_000, 50), (greedy, 101, 20_000, 30), (modest, 200, 30_000, 10)]
    for instance, pid, mib, sm in processes:
        assert instance.container_id is not None
        world.runtime.add_process(instance.container_id, pid)
        nvml.run_process(0, pid, mib * MIB)
        nvml.sample_process(0, pid, sm)
    nvml.run_process(0, 300, 50_000 * MIB)  # in no instance's container
    nvml.sample_process(0, 300, 90)

    samples = world.sample()
    assert samples[greedy.id].gpus == (GpuFigure(80.0, 80_000),)
    assert samples[modest.id].gpus == (GpuFigure(10.0, 30_000),)

    # No new driver samples since: the processes' memory still counts, their SM % is unknown.
    world.now += timedelta(seconds=10)
    assert world.sample()[modest.id].gpus == (GpuFigure(0.0, 30_000),)


def test_whole_gpus_report_each_gpu_in_the_containers_order(
    nvml_world: Callable[[FakeNvml], World],
) -> None:
    nvml = rtx4090_4x()
    world = nvml_world(nvml)
    pair = world.run("pair", "RTX4090-24GB", 2)
    index_of = {gpu.uuid: i for i, gpu in enumerate(nvml.devices)}
    first, second = (index_of[u] for u in world.gpus_of(pair))
    nvml.set_utilisation(first, 40, used_bytes=1000 * MIB)
    nvml.set_utilisation(second, 70, used_bytes=2000 * MIB)

    sample = world.sample()[pair.id]
    assert sample.gpus == (GpuFigure(40.0, 1000), GpuFigure(70.0, 2000))
    with world.platform.ctx.reader() as session:
        assert gpu_utilisation_since(session, pair.id, T0) == [(T0, 70.0)]


def test_a_broken_nvml_leaves_gpu_figures_unknown_not_the_sample(
    nvml_world: Callable[[FakeNvml], World],
) -> None:
    nvml = rtx4090_4x()
    world = nvml_world(nvml)
    one = world.run("one", "RTX4090-24GB", 1)
    nvml.fail["nvmlDeviceGetUtilizationRates"] = nvml.NVMLError_Unknown
    sample = world.sample()[one.id]
    assert sample.gpus == (GpuFigure(None, None),) and sample.memory_bytes > 0


def test_a_lasting_failure_is_warned_once_not_every_round(
    nvml_world: Callable[[FakeNvml], World], caplog: pytest.LogCaptureFixture
) -> None:
    nvml = rtx4090_4x()
    world = nvml_world(nvml)
    world.run("one", "RTX4090-24GB", 1)
    nvml.fail["nvmlDeviceGetUtilizationRates"] = nvml.NVMLError_Unknown
    with caplog.at_level(logging.DEBUG, logger="gpudock.services.metrics.sampling"):
        for _ in range(3):
            world.sample()
    said = [r.levelno for r in caplog.records if "could not read the GPUs" in r.getMessage()]
    assert said == [logging.WARNING, logging.DEBUG, logging.DEBUG]


def test_simulated_gpus_follow_the_containers_cpu(platform_factory: PlatformFactory) -> None:
    runtime = FakeRuntime()
    world = World(platform_factory(runtime=runtime), runtime)
    single = world.run("single", "A100-80GB", 1)
    double = world.run("double", "A100-80GB", 2)
    quiet = world.run("quiet", "RTX4090-24GB", 1)
    assert single.data_volume is not None
    runtime.volume_sizes[single.data_volume] = 5 * 2**30

    first = world.sample()
    assert first[single.id].cpu_percent is None
    assert first[single.id].gpus == (GpuFigure(None, 64),)  # 64 MiB resident: the fake's default
    assert first[single.id].data_disk_bytes == 5 * 2**30

    world.now += timedelta(seconds=10)
    busy = FakeUsage(
        cpu_total_ns=10 * 10**9,  # one core for 10 s
        memory_bytes=8 * 2**30,
        block_read_bytes=10**6,
        net_tx_bytes=5 * 10**5,
    )
    runtime.set_usage(single.container_id or "", busy)
    runtime.set_usage(double.container_id or "", busy)
    second = world.sample()
    assert second[single.id].cpu_percent == pytest.approx(100.0)
    assert second[single.id].gpus == (GpuFigure(100.0, 8192),)
    assert second[double.id].gpus == (GpuFigure(50.0, 4096), GpuFigure(50.0, 4096))
    assert second[quiet.id].gpus == (GpuFigure(0.0, 64),)
    assert second[single.id].disk_read_bps == pytest.approx(10**5)
    assert second[single.id].net_tx_bps == pytest.approx(5 * 10**4)
    assert second[single.id].disk_write_bps == 0.0


def test_a_round_steps_aside_for_requests_between_chunks_and_samples_all(
    platform_factory: PlatformFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = FakeRuntime()
    world = World(platform_factory(runtime=runtime), runtime)
    ran = {world.run(name, "A100-80GB", 1).id for name in ("one", "two", "three")}
    monkeypatch.setattr(sampling, "SAMPLE_CHUNK", 2)
    world.platform.ctx.foreground = counting = CountingForeground()
    counting.enter()  # a request in flight for the whole round
    assert set(world.sample()) == ran
    assert len(counting.waits) == 2 and min(counting.waits) >= 0.01  # before each chunk


def test_a_simulated_share_is_busy_for_its_fraction_of_the_card(
    platform_factory: PlatformFactory,
) -> None:
    runtime = FakeRuntime()
    world = World(platform_factory(runtime=runtime), runtime)
    quarter = world.run("quarter", "A100-80GB", 1, share="0.25")
    world.sample()
    world.now += timedelta(seconds=10)
    runtime.set_usage(
        quarter.container_id or "", FakeUsage(cpu_total_ns=20 * 10**9, memory_bytes=40 * 2**30)
    )
    assert world.sample()[quarter.id].gpus == (GpuFigure(25.0, 20480),)  # a quarter of 80 GB


class BlockingStats(FakeRuntime):
    """A fake engine whose stats call waits until the test lets it go."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.entered, self.release = threading.Event(), threading.Event()

    def container_stats(self, container_id: str) -> ContainerStats | None:
        self.entered.set()
        assert self.release.wait(timeout=60)
        return super().container_stats(container_id)


def test_a_slow_sampling_round_does_not_hold_up_placement(
    platform_factory: PlatformFactory,
) -> None:
    runtime = BlockingStats()
    world = World(platform_factory(runtime=runtime), runtime)
    world.run("first", "A100-80GB", 1)
    reconciler = world.platform.reconciler
    sampler = threading.Thread(target=reconciler.metrics_tick)
    sampler.start()
    try:
        assert runtime.entered.wait(timeout=30)  # the round is stuck in the engine
        second = world.run("second", "A100-80GB", 1)  # placed and started meanwhile
        assert second.status == InstanceStatus.RUNNING
    finally:
        runtime.release.set()
        sampler.join(timeout=30)
    assert "samples" in reconciler.durations
