"""A lifecycle step that outlives its lease is not taken over by a second worker:
the heartbeat extends the lease while the step's I/O runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.platform import Platform, open_platform
from gpudock.reconcile import lifecycle, placement
from gpudock.runtime.base import ContainerSpec, ContainerState
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances.actions import InstanceRequest, create_instance
from gpudock.settings import Settings
from tests.support.clocks import FakeClock

LEASE_S = 0.3
DEADLINE_S = 10.0


@dataclass
class SlowRuntime(FakeRuntime):
    """Creating a container takes as long as the test says (an image pull)."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    creates: int = 0

    def create_container(self, spec: ContainerSpec) -> ContainerState:
        self.creates += 1
        self.entered.set()
        assert self.release.wait(DEADLINE_S), "the test never released the step"
        return super().create_container(spec)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Platform, SlowRuntime, FakeClock]]:
    clock = FakeClock()
    runtime = SlowRuntime(clock=clock)
    settings = Settings(
        data_dir=tmp_path / "data",
        simulate="1x2xA100-80GB",
        runtime="fake",
        image_pull="never",
        lease_s=LEASE_S,
    )
    platform = open_platform(settings, runtime=runtime, clock=clock)
    try:
        yield platform, runtime, clock
    finally:
        runtime.release.set()
        platform.close()


def _expires_at(platform: Platform, instance_id: str) -> object:
    with platform.ctx.sessions() as session:
        row = session.get(InstanceModel, instance_id)
        assert row is not None
        return row.lock_expires_at


def test_a_step_that_outlives_its_lease_runs_once(
    world: tuple[Platform, SlowRuntime, FakeClock],
) -> None:
    platform, runtime, clock = world
    owner = users.create_user(platform.ctx, "lee").user
    instance = create_instance(platform.ctx, owner, InstanceRequest(gpu_model=None, gpu_count=0))
    placement.place_waiting(platform.ctx)
    first = threading.Thread(target=lifecycle.advance, args=(platform.ctx, instance.id))
    first.start()
    assert runtime.entered.wait(DEADLINE_S)
    clock.advance(60 * LEASE_S)  # far past the lease it took
    deadline = time.monotonic() + DEADLINE_S
    while (expires := _expires_at(platform, instance.id)) is None or expires <= clock.now:  # type: ignore[operator]
        assert time.monotonic() < deadline, "the heartbeat never extended the lease"
        time.sleep(0.01)
    second = threading.Thread(target=lifecycle.advance, args=(platform.ctx, instance.id))
    second.start()
    second.join(DEADLINE_S)
    assert not second.is_alive() and runtime.creates == 1  # it found the row leased
    runtime.release.set()
    first.join(DEADLINE_S)
    with platform.ctx.sessions() as session:
        row = session.get(InstanceModel, instance.id)
        assert row is not None and row.status == InstanceStatus.RUNNING
        assert row.lock_token is None  # released at the end of the step
    assert runtime.creates == 1
