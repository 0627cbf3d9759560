"""Host loss of an agent host, on the injected clock: no heartbeat for
GPUDOCK_HOST_LOST_AFTER_S and the host is lost (GPUs unhealthy, billing stopped
at the last heartbeat, owners told, each instance's policy applied); heartbeats
again and it is back. Agents are driven through the link's own service calls
(enrollment, heartbeats) on real SQLite; their containers run on the fake runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from gpudock.db.models import (
    GpuDeviceModel,
    GpuState,
    HostLossPolicy,
    InstanceModel,
    NotificationModel,
)
from gpudock.link.wire import GpuReport, HostReport, JoinRequest
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.agents import enrollment, hosts, links
from gpudock.services.billing import balances
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings
from tests.support.billing import FLEET, new_user, price, topup
from tests.support.billing import compute_intervals as billing_intervals
from tests.support.clocks import T0, FakeClock

LOST_AFTER_S = 60
H200 = "H200-140GB"


@pytest.fixture
def world(tmp_path: Path, database_url: str | None) -> Iterator[tuple[Platform, FakeClock]]:
    """On SQLite and on PostgreSQL: the loss is declared with guarded updates, and
    the billing it stops is the ledger's."""
    clock = FakeClock()
    settings = Settings(
        data_dir=tmp_path / "d",
        database_url=database_url,
        simulate=FLEET,
        runtime="fake",
        image_pull="never",
        agent_link_port=7443,
        agent_link_host="127.0.0.1",
        host_lost_after_s=LOST_AFTER_S,
        billing_tick_s=0.001,  # the charging pass runs at every drain
    )
    platform = open_platform(settings, runtime=FakeRuntime(clock=clock), clock=clock)
    try:
        yield platform, clock
    finally:
        platform.close()


def report(gpu_uuid: str) -> HostReport:
    gpu = GpuReport(uuid=gpu_uuid, index=0, model=H200, memory_mb=143771)
    return HostReport(agent_version="test", cpus=32, memory_gb=256, cuda_version="12.8", gpus=[gpu])


def enroll(platform: Platform, name: str) -> str:
    """Host `name` with one H200, enrolled as its agent's hello would; its id."""
    token = hosts.add_host(platform.ctx, name).token
    join = JoinRequest(token_id=token.token_id, secret=token.secret)
    key = f"ssh-ed25519 AAAA{name}"
    return enrollment.redeem(platform.ctx, join, key, report(f"GPU-{name}"), "127.0.0.1").id


def heartbeat(platform: Platform, host_id: str, name: str) -> None:
    assert links.record_heartbeat(platform.ctx, host_id, report(f"GPU-{name}"))


def instance(platform: Platform, instance_id: str) -> InstanceModel:
    with platform.ctx.reader() as session:
        row = session.get(InstanceModel, instance_id)
        assert row is not None
        return row


def gpu_state(platform: Platform, uuid: str) -> GpuState:
    with platform.ctx.reader() as session:
        gpu = session.get(GpuDeviceModel, uuid)
        assert gpu is not None
        return gpu.state


def compute_intervals(platform: Platform, instance_id: str) -> list[tuple[int, int | None, int]]:
    """(opened, closed, charged seconds) of each compute interval, in seconds since T0."""
    with platform.ctx.reader() as session:
        rows = billing_intervals(session, instance_id)
    return [
        (
            int((r.opened_at - T0).total_seconds()),
            None if r.closed_at is None else int((r.closed_at - T0).total_seconds()),
            r.charged_seconds,
        )
        for r in rows
    ]


def kinds_told(platform: Platform, user_id: str) -> list[str]:
    with platform.ctx.reader() as session:
        return list(
            session.scalars(
                select(NotificationModel.kind)
                .where(NotificationModel.user_id == user_id)
                .order_by(NotificationModel.created_at)
            )
        )


def test_a_silent_host_is_lost_unbilled_from_its_last_heartbeat_and_resumes_when_back(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    host_id = enroll(platform, "box-1")
    price(platform, H200, "3.6")  # 0.001 a second
    user = new_user(platform, "ann")
    topup(platform, user, "100")
    made = actions.create_instance(platform.ctx, user, InstanceRequest(gpu_model=H200, gpu_count=1))
    platform.reconciler.drain()
    assert (instance(platform, made.id).status.value, instance(platform, made.id).host_id) == (
        "running",
        host_id,
    )
    clock.advance(30)
    heartbeat(platform, host_id, "box-1")  # the last one
    clock.advance(50)
    platform.reconciler.drain()  # not lost yet: its first minute is charged
    assert compute_intervals(platform, made.id) == [(0, None, 60)]
    clock.advance(70)
    platform.reconciler.drain()
    lost = instance(platform, made.id)
    assert lost.status.value == "unreachable"
    assert "no heartbeat since" in lost.status_reason
    assert gpu_state(platform, "GPU-box-1") is GpuState.UNHEALTHY
    assert compute_intervals(platform, made.id) == [(0, 30, 30)]  # 30 s charged ahead refunded
    assert kinds_told(platform, user.id) == ["instance.host_lost"]
    clock.advance(600)  # the host stays away: nothing is charged
    platform.reconciler.drain()
    assert compute_intervals(platform, made.id) == [(0, 30, 30)]
    heartbeat(platform, host_id, "box-1")
    platform.reconciler.drain()
    assert instance(platform, made.id).status.value == "running"
    assert gpu_state(platform, "GPU-box-1") is GpuState.HEALTHY
    clock.advance(60)
    platform.reconciler.drain()
    # Billed again from the moment the host was back, never over the outage.
    assert compute_intervals(platform, made.id) == [(0, 30, 30), (750, None, 60)]
    assert kinds_told(platform, user.id) == ["instance.host_lost", "instance.running"]
    assert balances.summary(platform.ctx, user).balance == 100_000_000 - 90 * 1000


def test_a_server_just_started_gives_the_agents_time_before_declaring_them_lost(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    host_id = enroll(platform, "box-1")
    clock.advance(3600)  # as if the server had been down for an hour: nobody heard the agent
    platform.reconciler.drain()
    assert gpu_state(platform, "GPU-box-1") is GpuState.HEALTHY
    assert hosts.get_host(platform.ctx, "box-1").last_heartbeat_at == T0
    clock.advance(LOST_AFTER_S)
    platform.reconciler.drain()
    assert gpu_state(platform, "GPU-box-1") is GpuState.UNHEALTHY
    heartbeat(platform, host_id, "box-1")
    platform.reconciler.drain()
    assert gpu_state(platform, "GPU-box-1") is GpuState.HEALTHY


def test_an_instance_that_opted_in_restarts_elsewhere_with_an_empty_data_volume(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    user = new_user(platform, "ann")
    first = enroll(platform, "box-1")
    request = InstanceRequest(gpu_model=H200, gpu_count=1, on_host_loss=HostLossPolicy.ELSEWHERE)
    made = actions.create_instance(platform.ctx, user, request)
    platform.reconciler.drain()
    assert instance(platform, made.id).data_host_id == first
    second = enroll(platform, "box-2")
    clock.advance(LOST_AFTER_S + 1)
    heartbeat(platform, second, "box-2")  # box-1 stays silent
    platform.reconciler.drain()
    moved = instance(platform, made.id)
    assert (moved.status.value, moved.host_id, moved.data_host_id) == ("running", second, second)
    assert moved.container_gpus == "GPU-box-2"
    assert kinds_told(platform, user.id) == ["instance.host_lost"]
    opened, closed, _ = compute_intervals(platform, made.id)[0]
    reopened = compute_intervals(platform, made.id)[1][0]
    assert (opened, closed, reopened) == (0, 0, LOST_AFTER_S + 1)  # never two at once


def test_instances_of_a_removed_host_are_unbilled_and_run_again_when_it_is_enrolled_again(
    world: tuple[Platform, FakeClock],
) -> None:
    platform, clock = world
    host_id = enroll(platform, "box-1")
    user = new_user(platform, "ann")
    made = actions.create_instance(platform.ctx, user, InstanceRequest(gpu_model=H200, gpu_count=1))
    platform.reconciler.drain()
    clock.advance(20)
    hosts.remove_host(platform.ctx, "box-1")  # revoked while the instance ran there
    removed = instance(platform, made.id)
    assert (removed.status.value, removed.host_id) == ("unreachable", host_id)
    assert compute_intervals(platform, made.id) == [(0, 20, 20)]  # closed at the removal
    clock.advance(100)
    platform.reconciler.drain()
    assert instance(platform, made.id).status.value == "unreachable"
    assert enroll(platform, "box-1") == host_id  # the same host to its instances
    platform.reconciler.drain()
    assert instance(platform, made.id).status.value == "running"
    assert gpu_state(platform, "GPU-box-1") is GpuState.HEALTHY
    assert compute_intervals(platform, made.id) == [(0, 20, 20), (120, None, 0)]
