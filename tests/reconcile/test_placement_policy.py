"""The server's placement pass chooses with the configured policy
(GPUDOCK_PLACEMENT_POLICY, the house policy by default), over a simulated fleet
and real SQLite, and keeps the policy's learned workload from pass to pass and
across a restart."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.scheduler.hosts import HostPlacer
from gpudock.scheduler.names import DEFAULT_POLICY, POLICY_NAMES
from gpudock.scheduler.placement import place
from gpudock.scheduler.registry import make_policy
from gpudock.services.accounts import users
from gpudock.services.fleet.inventory import capacity_snapshot
from gpudock.services.instances import actions, queue
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.support.clocks import FakeClock

A100 = "A100-80GB"


def open_fleet(data_dir: Path, policy: str | None = None) -> Platform:
    clock = FakeClock()
    extra = {} if policy is None else {"placement_policy": policy}
    settings = Settings(
        data_dir=data_dir,
        simulate=f"2x4x{A100}",
        runtime="fake",
        image_pull="never",
        **extra,
    )
    return open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    platform = open_fleet(tmp_path / "d")
    try:
        yield platform
    finally:
        platform.close()


def placer_of(platform: Platform) -> HostPlacer:
    return platform.reconciler.placement.placer


def share(name: str) -> InstanceRequest:
    return InstanceRequest(A100, 1, name=name, gpu_share=Decimal("0.25"), cpu=1, memory_gb=1)


def test_the_default_is_the_house_policy_and_it_is_what_places(platform: Platform) -> None:
    """A host holding a share and a CPU-only instance has 15 GB of memory left
    for its three free GPUs. Best fit (the pass before the policies) puts a
    1-GPU, 10 GB request there, the host with fewest free GPUs; the house policy
    sees that it would strand two GPUs without memory and takes the empty host."""
    assert platform.ctx.settings.placement_policy == DEFAULT_POLICY == "gpudock"
    user = users.create_user(platform.ctx, "ann").user
    ctx = platform.ctx
    actions.create_instance(ctx, user, share("part"))
    platform.reconciler.drain()
    actions.create_instance(ctx, user, InstanceRequest(None, 0, name="cpu", cpu=2, memory_gb=8))
    platform.reconciler.drain()
    part = actions.get_instance(ctx, user, "part")
    cpu = actions.get_instance(ctx, user, "cpu")
    assert part.status == cpu.status == "running" and cpu.host_id == part.host_id

    big = actions.create_instance(ctx, user, InstanceRequest(A100, 1, name="big", memory_gb=10))
    with ctx.reader() as session:
        pending = actions.get_instance(ctx, user, "big")
        best_fit = place(capacity_snapshot(session), queue.placement_request(pending))
    assert best_fit is not None and best_fit.host_id == part.host_id  # the old choice
    platform.reconciler.drain()
    big = actions.get_instance(ctx, user, "big")
    assert big.status == "running" and big.host_id != part.host_id


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_each_policy_is_selectable_by_name_and_places(tmp_path: Path, name: str) -> None:
    platform = open_fleet(tmp_path / "d", name)
    try:
        user = users.create_user(platform.ctx, "ann").user
        actions.create_instance(platform.ctx, user, InstanceRequest(A100, 4, name="four"))
        actions.create_instance(platform.ctx, user, share("part"))
        platform.reconciler.drain()
        placer = placer_of(platform)
        assert placer.policy_name == name
        expected = type(make_policy(name, placer.snapshot))
        assert type(placer.policy) is expected
        four = actions.get_instance(platform.ctx, user, "four")
        part = actions.get_instance(platform.ctx, user, "part")
        assert four.status == part.status == "running"
        assert four.host_id != part.host_id  # four GPUs fill a host: the share is elsewhere
    finally:
        platform.close()


def test_an_unknown_policy_is_refused_at_start_naming_the_choices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDOCK_PLACEMENT_POLICY", "tetris")
    with pytest.raises(ValidationError) as refused:
        Settings(data_dir=tmp_path / "d")
    message = str(refused.value)
    assert "unknown placement policy 'tetris'" in message
    assert all(name in message for name in POLICY_NAMES)


def test_the_policy_is_kept_between_passes_and_relearns_after_a_restart(tmp_path: Path) -> None:
    platform = open_fleet(tmp_path / "d")
    try:
        user = users.create_user(platform.ctx, "ann").user
        actions.create_instance(platform.ctx, user, InstanceRequest(A100, 2, name="two"))
        platform.reconciler.drain()
        placer = placer_of(platform)
        snapshot = placer.snapshot
        actions.create_instance(platform.ctx, user, share("part"))
        platform.reconciler.drain()
        assert placer_of(platform) is placer and placer.snapshot is snapshot  # same fleet
        workload = placer.workload
        assert workload is not None
        learned = {(c.demand.gpus, c.demand.milli) for c in workload.classes()}
        assert learned == {(2, 1000), (1, 250)}
    finally:
        platform.close()

    platform = open_fleet(tmp_path / "d")  # the same database: a restart
    try:
        user = next(u for u in users.list_users(platform.ctx) if u.name == "ann")
        actions.create_instance(platform.ctx, user, InstanceRequest(A100, 1, name="one"))
        platform.reconciler.drain()
        workload = placer_of(platform).workload
        assert workload is not None
        relearned = {(c.demand.gpus, c.demand.milli) for c in workload.classes()}
        assert relearned == {(2, 1000), (1, 250), (1, 1000)}  # what ran, then the new one
    finally:
        platform.close()
