"""The outbox, as causes write it: a run after a wait in the queue, a balance
warning's one notification, deliveries only to the owner's own endpoints, and
nothing when the causing transaction rolls back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import (
    InstanceStatus,
    NotificationDeliveryModel,
    NotificationModel,
    QueueWaitModel,
)
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.fleet import gpu_health
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.notifications import endpoints
from gpudock.services.notifications.outbox import notify
from gpudock.settings import Settings
from tests.support.clocks import FakeClock


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Platform, FakeClock]]:
    clock = FakeClock()
    settings = Settings(
        data_dir=tmp_path / "d", simulate="1x1xA100-80GB", runtime="fake", image_pull="never"
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        yield platform, clock
    finally:
        platform.close()


def one_gpu(name: str) -> InstanceRequest:
    return InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name=name)


def kinds_of(platform: Platform, user_id: str) -> list[str]:
    with platform.ctx.sessions() as session:
        return list(
            session.scalars(
                select(NotificationModel.kind).where(NotificationModel.user_id == user_id)
            )
        )


def test_an_instance_that_waited_for_a_gpu_tells_its_owner_when_it_runs(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    first, second = (users.create_user(platform.ctx, n).user for n in ("one", "two"))
    actions.create_instance(platform.ctx, first, one_gpu("a"))
    platform.reconciler.drain()
    waiting = actions.create_instance(platform.ctx, second, one_gpu("b"))
    platform.reconciler.drain()
    assert actions.get_instance(platform.ctx, second, "b").status == InstanceStatus.PENDING
    with platform.ctx.sessions() as session:
        assert session.get(QueueWaitModel, waiting.id) is not None
    clock.advance(600)
    actions.stop_instance(platform.ctx, first, "a")
    platform.reconciler.drain()
    assert actions.get_instance(platform.ctx, second, "b").status == InstanceStatus.RUNNING
    assert kinds_of(platform, second.id) == ["instance.running"]
    assert kinds_of(platform, first.id) == []  # a ran at once: nothing to tell
    with platform.ctx.sessions() as session:
        note = session.scalars(select(NotificationModel)).one()
        assert "after waiting 10 min for GPUs" in note.message
        assert session.get(QueueWaitModel, waiting.id) is None


def test_deliveries_go_to_the_owners_endpoints_and_roll_back_with_their_cause(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    alice, bob = (users.create_user(platform.ctx, n).user for n in ("alice", "bob"))
    endpoints.create_webhook(platform.ctx, alice, "https://a.example/all", [])
    endpoints.create_webhook(platform.ctx, alice, "https://a.example/low", ["balance.low"])
    endpoints.create_webhook(platform.ctx, bob, "https://b.example/all", [])
    with platform.ctx.sessions.begin() as session:
        notify(session, alice.id, "gpu.available", "2 × A100-80GB free now", clock.now)
    with pytest.raises(RuntimeError), platform.ctx.sessions.begin() as session:
        notify(session, alice.id, "balance.low", "low", clock.now)
        raise RuntimeError("the cause failed: its transaction rolls back")
    with platform.ctx.sessions() as session:
        deliveries = session.scalars(select(NotificationDeliveryModel)).all()
    [delivery] = deliveries  # one endpoint takes every kind; the other only balance.low
    assert delivery.user_id == alice.id
    assert [v.target for v in endpoints.list_deliveries(platform.ctx, alice)] == [
        "https://a.example/all"
    ]
    assert endpoints.list_deliveries(platform.ctx, bob) == []
    assert kinds_of(platform, alice.id) == ["gpu.available"]


def test_a_gpu_fault_tells_the_owner_of_the_move_and_of_the_run_after_it(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    settings = Settings(
        data_dir=tmp_path / "d", simulate="1x2xA100-80GB", runtime="fake", image_pull="never"
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        owner = users.create_user(platform.ctx, "gina").user
        instance = actions.create_instance(platform.ctx, owner, one_gpu("train"))
        platform.reconciler.drain()
        [gpu] = actions.view(platform.ctx, actions.get_instance(platform.ctx, owner, "train")).gpus
        admin = users.create_user(platform.ctx, "ops", is_admin=True).user
        gpu_health.inject_fault(platform.ctx, admin, gpu, 48, "double-bit ECC error")
        platform.reconciler.make_due("GPU health")
        platform.reconciler.drain()
        moved = actions.get_instance(platform.ctx, owner, instance.id)
        assert moved.status == InstanceStatus.RUNNING
        assert kinds_of(platform, owner.id) == ["instance.gpu_fault", "instance.running"]
        with platform.ctx.sessions() as session:
            running = session.scalars(
                select(NotificationModel).where(NotificationModel.kind == "instance.running")
            ).one()
        assert "running again after moving off a failed GPU" in running.message
    finally:
        platform.close()
