"""Auto-stop on the fake runtime with an injected clock: the idle stop and its
10-minute warning, what keeps an instance busy, the time stop, the exit stop.
No test waits: the clock moves and the passes run one at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import (
    InstanceEventModel,
    InstanceStatus,
    NotificationModel,
    SshSessionModel,
    SshSessionOutcome,
    UserModel,
)
from gpudock.errors import InvalidRequest
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.instances.auto_stop import AutoStopPolicy, auto_stop_pass
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples
from gpudock.settings import Settings
from tests.support.clocks import FakeClock

S = InstanceStatus
MINUTE = 60.0


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Platform, FakeRuntime, FakeClock]]:
    clock = FakeClock()
    runtime = FakeRuntime(clock=clock)
    settings = Settings(
        data_dir=tmp_path / "d", simulate="1x2xA100-80GB", runtime="fake", image_pull="never"
    )
    platform = open_platform(settings, runtime=runtime, clock=clock)
    try:
        yield platform, runtime, clock
    finally:
        platform.close()


def running(platform: Platform, user: UserModel, policy: AutoStopPolicy) -> str:
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name="job", auto_stop=policy)
    instance = actions.create_instance(platform.ctx, user, request)
    platform.reconciler.drain()
    assert actions.get_instance(platform.ctx, user, instance.id).status == S.RUNNING
    return instance.id


def sample(platform: Platform, instance_id: str, clock: FakeClock, utilisation: float) -> None:
    """One sample now, as the sampler writes it (both GPUs of a two-GPU view alike)."""
    figure = GpuFigure(utilisation_percent=utilisation, memory_used_mb=100.0)
    with platform.ctx.sessions.begin() as session:
        record_samples(session, [Sample(instance_id, clock.now, 1.0, 1 << 20, gpus=(figure,))])


def minutes_of(platform: Platform, instance_id: str, clock: FakeClock, n: int, util: float) -> None:
    """n minutes of samples (one a minute), the auto-stop pass after each."""
    for _ in range(n):
        clock.advance(MINUTE)
        sample(platform, instance_id, clock, util)
        auto_stop_pass(platform.ctx)


def notes(platform: Platform, user: UserModel, kind: str) -> list[NotificationModel]:
    with platform.ctx.sessions() as session:
        return list(
            session.scalars(
                select(NotificationModel).where(
                    NotificationModel.user_id == user.id, NotificationModel.kind == kind
                )
            )
        )


def test_idle_instance_is_warned_ten_minutes_before_it_stops(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, runtime, clock = world
    user = users.create_user(platform.ctx, "ida").user
    instance_id = running(platform, user, AutoStopPolicy(idle_after_s=1800, idle_below_pct=5))
    started = clock.now
    sample(platform, instance_id, clock, 2.0)  # the sampler's first look, as it starts
    minutes_of(platform, instance_id, clock, 19, util=2.0)
    assert notes(platform, user, "instance.idle_warning") == []  # 19 min idle: nothing yet
    minutes_of(platform, instance_id, clock, 1, util=2.0)
    [warning] = notes(platform, user, "instance.idle_warning")
    assert warning.created_at == started + timedelta(minutes=20)
    assert "stops in 10 min" in warning.message
    minutes_of(platform, instance_id, clock, 9, util=2.0)
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    minutes_of(platform, instance_id, clock, 1, util=2.0)  # 30 min idle, warned 10 min ago
    stopped_at = clock.now
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.desired_state == "stopped"
    platform.reconciler.drain()
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert instance.status_reason.startswith("auto-stop: stopped: idle for 30 min")
    assert instance.status_reason.endswith("data kept")
    assert not instance.placed  # GPUs released
    assert instance.data_volume in runtime.volumes  # data kept
    [stopped] = notes(platform, user, "instance.stopped")
    assert json.loads(stopped.data)["cause"] == "idle"
    assert stopped.created_at == stopped_at
    assert len(notes(platform, user, "instance.idle_warning")) == 1  # warned once


def test_a_busy_gpu_or_an_ssh_session_keeps_it_running(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, _, clock = world
    user = users.create_user(platform.ctx, "bo").user
    instance_id = running(platform, user, AutoStopPolicy(idle_after_s=1800))
    minutes_of(platform, instance_id, clock, 25, util=1.0)
    assert len(notes(platform, user, "instance.idle_warning")) == 1
    minutes_of(platform, instance_id, clock, 1, util=80.0)  # work again: the count restarts
    minutes_of(platform, instance_id, clock, 15, util=1.0)
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    login = SshSessionModel(
        instance_id=instance_id,
        user_id=user.id,
        login="job",
        client_address="127.0.0.1",
        outcome=SshSessionOutcome.OPEN,
        started_at=clock.now,
    )
    with platform.ctx.sessions.begin() as session:  # someone logs in over SSH
        session.add(login)
    minutes_of(platform, instance_id, clock, 40, util=0.0)
    assert len(notes(platform, user, "instance.idle_warning")) == 1  # an open session: not idle
    with platform.ctx.sessions.begin() as session:  # they log out; idleness counts from here
        row = session.get(SshSessionModel, login.id)
        assert row is not None
        row.outcome, row.ended_at = SshSessionOutcome.CLOSED, clock.now
    minutes_of(platform, instance_id, clock, 19, util=0.0)
    assert len(notes(platform, user, "instance.idle_warning")) == 1
    minutes_of(platform, instance_id, clock, 1, util=0.0)
    assert len(notes(platform, user, "instance.idle_warning")) == 2
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    assert notes(platform, user, "instance.stopped") == []


def test_no_samples_means_nothing_is_known_and_nothing_stops(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, _, clock = world
    user = users.create_user(platform.ctx, "nil").user
    instance_id = running(platform, user, AutoStopPolicy(idle_after_s=600))
    for _ in range(30):
        clock.advance(MINUTE)
        auto_stop_pass(platform.ctx)
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    assert notes(platform, user, "instance.idle_warning") == []


def test_stop_after_a_duration_then_change_it_on_the_running_instance(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, _, clock = world
    user = users.create_user(platform.ctx, "tim").user
    instance_id = running(platform, user, AutoStopPolicy(stop_after_s=3600))
    actions.change_auto_stop(
        platform.ctx, user, instance_id, AutoStopPolicy(stop_at=clock.now + timedelta(hours=2))
    )
    clock.advance(3601)
    auto_stop_pass(platform.ctx)
    assert actions.get_instance(platform.ctx, user, instance_id).status == S.RUNNING
    clock.advance(3600)
    assert auto_stop_pass(platform.ctx).stopped == [instance_id]
    platform.reconciler.drain()
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert "the stop time 2026-11-29T14:00+00:00 was reached" in instance.status_reason
    with platform.ctx.sessions() as session:
        timeline = [e.message for e in session.scalars(select(InstanceEventModel))]
    assert "auto-stop: stops at 2026-11-29T14:00+00:00" in timeline
    actions.start_instance(platform.ctx, user, instance_id)  # a stop time in the past …
    platform.reconciler.drain()
    assert auto_stop_pass(platform.ctx).stopped == []  # … does not stop the new run
    restarted = actions.get_instance(platform.ctx, user, instance_id)
    assert restarted.status == S.RUNNING
    policy = actions.view(platform.ctx, restarted).auto_stop
    assert policy is not None and policy.stop_at is None  # cleared, with a note saying so


def test_exit_stop_stops_instead_of_restarting(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, runtime, clock = world
    user = users.create_user(platform.ctx, "ex").user
    instance_id = running(platform, user, AutoStopPolicy(on_exit=True))
    clock.advance(30)
    [container] = runtime.containers.values()
    runtime.stop_container(container.state.id, 0)  # its main process ended (code 0)
    clock.advance(5)
    platform.reconciler.make_due("liveness")
    platform.reconciler.drain()
    instance = actions.get_instance(platform.ctx, user, instance_id)
    assert instance.status == S.STOPPED
    assert "the main process exited with code 0" in instance.status_reason
    assert not instance.placed


def test_bad_policies_are_refused_with_what_to_do(
    world: tuple[Platform, FakeRuntime, FakeClock],
) -> None:
    platform, _, clock = world
    user = users.create_user(platform.ctx, "bad").user
    with pytest.raises(InvalidRequest, match="between 60 s"):
        running(platform, user, AutoStopPolicy(idle_after_s=10))
    with pytest.raises(InvalidRequest, match="not within the next year"):
        running(platform, user, AutoStopPolicy(stop_at=clock.now - timedelta(minutes=1)))
    with pytest.raises(InvalidRequest, match="not both"):
        running(platform, user, AutoStopPolicy(stop_at=clock.now, stop_after_s=60))
