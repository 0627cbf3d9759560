"""The share watchdog on a host whose GPU is the fake NVML (one H200) and whose
containers are the fake runtime's: a share's processes over its memory limit
record an event, and with GPUDOCK_SHARE_ENFORCE=stop the share is stopped,
its container and data kept."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from gpudock.db.models import InstanceModel, InstanceStatus, UserModel
from gpudock.gpu.nvml import NvmlGpuSource
from gpudock.platform import Platform, open_platform
from gpudock.reconcile.share_watch import ShareWatch, watch_shares
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.gpu.fake_pynvml import MIB, FakeNvml, h200_1x

MODEL = "H200-140GB"
LIMIT_MB = 143771 // 2  # half the card's 143771 MiB


class World:
    def __init__(self, platform: Platform, nvml: FakeNvml, runtime: FakeRuntime) -> None:
        self.platform, self.nvml, self.runtime = platform, nvml, runtime
        self.user: UserModel = users.create_user(platform.ctx, "sam").user
        self.watch = ShareWatch()

    def half(self, name: str) -> InstanceModel:
        request = InstanceRequest(gpu_model=MODEL, gpu_count=1, name=name, gpu_share=Decimal("0.5"))
        actions.create_instance(self.platform.ctx, self.user, request)
        self.platform.reconciler.drain()
        instance = actions.get_instance(self.platform.ctx, self.user, name)
        assert instance.status == InstanceStatus.RUNNING
        return instance

    def uses(self, instance: InstanceModel, pid: int, mib: int | None) -> None:
        """A process of the instance's container holding `mib` of GPU memory
        (None: the driver cannot say)."""
        assert instance.container_id is not None
        self.runtime.add_process(instance.container_id, pid)
        self.nvml.run_process(0, pid, None if mib is None else mib * MIB)

    def notes(self, name: str) -> list[str]:
        events = actions.list_events(self.platform.ctx, self.user, name)
        return [e.message for e in events if "over its share" in e.message]


@pytest.fixture
def make_world(tmp_path: Path) -> Iterator[Callable[..., World]]:
    opened: list[Platform] = []

    def make(**settings: Any) -> World:
        nvml, runtime = h200_1x(), FakeRuntime()
        values = {"data_dir": tmp_path / f"d{len(opened)}", "runtime": "fake", **settings}
        platform = open_platform(
            Settings(image_pull="never", **values),
            runtime=runtime,
            gpu_source=NvmlGpuSource(nvml, host_name="gpu0"),
        )
        opened.append(platform)
        return World(platform, nvml, runtime)

    yield make
    for platform in opened:
        platform.close()


def test_a_share_over_its_limit_gets_one_event_per_crossing(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    greedy, modest = world.half("greedy"), world.half("modest")
    world.uses(greedy, 100, 60_000)
    world.uses(greedy, 101, 20_000)  # 80,000 MiB together: over half the card
    world.uses(modest, 200, 30_000)
    world.uses(modest, 999, None)  # memory the driver cannot report counts as none
    world.nvml.run_process(0, 300, 50_000 * MIB)  # a process in no instance's container

    found = watch_shares(world.platform.ctx, world.watch)
    assert [(o.instance_id, o.used_mb, o.limit_mb, o.pids) for o in found] == [
        (greedy.id, 80_000, LIMIT_MB, (100, 101))
    ]
    assert world.notes("greedy") == [
        f"GPU memory over its share: its processes (100, 101) hold 80000 MiB of a "
        f"{LIMIT_MB} MiB limit; it may starve the share beside it"
    ]
    assert world.notes("modest") == []
    watch_shares(world.platform.ctx, world.watch)
    assert len(world.notes("greedy")) == 1  # still over: said once
    assert actions.get_instance(world.platform.ctx, world.user, "greedy").status == (
        InstanceStatus.RUNNING  # warn: nothing is stopped
    )
    world.nvml.processes[0] = []  # back under …
    watch_shares(world.platform.ctx, world.watch)
    world.uses(greedy, 102, 90_000)  # … and over again: a new event
    watch_shares(world.platform.ctx, world.watch)
    assert len(world.notes("greedy")) == 2


def test_with_stop_the_share_is_stopped_and_its_data_kept(
    make_world: Callable[..., World],
) -> None:
    world = make_world(share_enforce="stop")
    greedy, modest = world.half("greedy"), world.half("modest")
    world.uses(greedy, 100, 80_000)
    world.uses(modest, 200, 30_000)
    watch_shares(world.platform.ctx, world.watch)
    world.platform.reconciler.drain()
    stopped = actions.get_instance(world.platform.ctx, world.user, "greedy")
    assert stopped.status == InstanceStatus.STOPPED
    (why,) = world.notes("greedy")  # the stop's reason, on its timeline
    assert why.startswith("stopped: GPU memory over its share: its processes (100) hold 80000")
    assert "(GPUDOCK_SHARE_ENFORCE=stop); container and data kept" in why
    assert stopped.container_id in world.runtime.containers  # not removed
    assert any(v.endswith(f"{greedy.id}-data") for v in world.runtime.volumes)
    kept = actions.get_instance(world.platform.ctx, world.user, "modest")
    assert kept.status == InstanceStatus.RUNNING


def test_off_does_not_look(make_world: Callable[..., World]) -> None:
    world = make_world(share_enforce="off")
    world.uses(world.half("greedy"), 100, 80_000)
    assert watch_shares(world.platform.ctx, world.watch) == []
    assert world.nvml.count("nvmlDeviceGetComputeRunningProcesses") == 0
    assert world.notes("greedy") == []


def test_the_loop_runs_the_watchdog(make_world: Callable[..., World]) -> None:
    world = make_world(share_enforce="stop")
    world.uses(world.half("greedy"), 100, 80_000)
    world.platform.reconciler.make_due("share memory")
    world.platform.reconciler.drain()
    stopped = actions.get_instance(world.platform.ctx, world.user, "greedy")
    assert stopped.status == InstanceStatus.STOPPED
