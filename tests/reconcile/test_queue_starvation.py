"""The server's wait queue: later, smaller requests overtake a big one that does
not fit, but only for GPUDOCK_QUEUE_OVERTAKE_LIMIT_S; then the big one holds the
host closest to fitting it and runs as soon as that host has room."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.support.clocks import FakeClock

LIMIT_S = 600


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Platform, FakeClock]]:
    clock = FakeClock()
    settings = Settings(
        data_dir=tmp_path / "d",
        simulate="2x4xA100-80GB",
        runtime="fake",
        image_pull="never",
        queue_overtake_limit_s=LIMIT_S,
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        yield platform, clock
    finally:
        platform.close()


def gpus(count: int, name: str) -> InstanceRequest:
    return InstanceRequest(gpu_model="A100-80GB", gpu_count=count, name=name)


def status(platform: Platform, user: object, name: str) -> str:
    return str(actions.get_instance(platform.ctx, user, name).status)  # type: ignore[arg-type]


def test_a_big_request_is_overtaken_only_until_the_limit_then_holds_a_host(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    user = users.create_user(platform.ctx, "ann").user
    actions.create_instance(platform.ctx, user, gpus(3, "three"))  # one host: 1 free
    actions.create_instance(platform.ctx, user, gpus(2, "two"))  # the other: 2 free
    platform.reconciler.drain()
    three = actions.get_instance(platform.ctx, user, "three")
    two = actions.get_instance(platform.ctx, user, "two")
    assert three.host_id != two.host_id
    clock.advance(1)
    actions.create_instance(platform.ctx, user, gpus(4, "big"))  # fits on neither
    clock.advance(1)
    early = actions.create_instance(platform.ctx, user, gpus(1, "early"))
    platform.reconciler.drain()
    assert status(platform, user, "big") == "pending"
    assert status(platform, user, "early") == "running"  # overtakes while 'big' is young
    actions.delete_instance(platform.ctx, user, early.id)
    platform.reconciler.drain()

    clock.advance(LIMIT_S + 1)
    actions.create_instance(platform.ctx, user, gpus(1, "late"))
    platform.reconciler.drain()
    big = actions.get_instance(platform.ctx, user, "big")
    assert big.status == "pending" and f"holds host {two.host_id}" in big.status_reason
    late = actions.get_instance(platform.ctx, user, "late")
    assert late.status == "running" and late.host_id == three.host_id  # not the held host
    actions.create_instance(platform.ctx, user, gpus(1, "later"))
    platform.reconciler.drain()
    assert status(platform, user, "later") == "pending"  # the only room is on the held host

    actions.stop_instance(platform.ctx, user, two.id)
    platform.reconciler.drain()
    big = actions.get_instance(platform.ctx, user, "big")
    assert big.status == "running" and big.host_id == two.host_id
    assert status(platform, user, "later") == "pending"
