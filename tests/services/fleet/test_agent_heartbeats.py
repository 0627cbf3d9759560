"""A heartbeat that reports what the inventory already holds writes nothing to it
and reads two rows, whatever the GPU count; one that reports a change syncs it.
Real SQLite, the services the agent gateway calls (`services.agents.links`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sqlalchemy import event, select

from gpudock.db.models import GpuDeviceModel, HostModel
from gpudock.link.wire import GpuReport, HostReport, JoinRequest
from gpudock.platform import Platform
from gpudock.services.agents import enrollment, hosts, links
from tests.support.clocks import FakeClock
from tests.support.platforms import PlatformFactory

GPUS = 8


def _report(gpus: int = GPUS, cpus: int = 64) -> HostReport:
    return HostReport(
        agent_version="test",
        cpus=cpus,
        memory_gb=512,
        cuda_version="12.8",
        gpus=[
            GpuReport(uuid=f"GPU-beat-{i}", index=i, model="H200-140GB", memory_mb=143771)
            for i in range(gpus)
        ],
    )


def _enroll(platform: Platform) -> str:
    token = hosts.add_host(platform.ctx, "beat-1").token
    join = JoinRequest(token_id=token.token_id, secret=token.secret)
    return enrollment.redeem(platform.ctx, join, "ssh-ed25519 AAAAbeat", _report(), "127.0.0.1").id


@contextmanager
def _statements(platform: Platform) -> Iterator[list[str]]:
    seen: list[str] = []
    engine = platform.ctx.sessions.kw["bind"]

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement.split(None, 1)[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _present_gpus(platform: Platform, host_id: str) -> int:
    with platform.ctx.reader() as session:
        return len(
            session.scalars(
                select(GpuDeviceModel.id).where(
                    GpuDeviceModel.host_id == host_id, GpuDeviceModel.present.is_(True)
                )
            ).all()
        )


def test_an_unchanged_heartbeat_reads_two_rows_and_writes_only_its_time(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory(agent_link_port=7443, agent_link_host="127.0.0.1")
    host_id = _enroll(platform)
    assert links.record_heartbeat(platform.ctx, host_id, _report())  # settles the first sync
    with _statements(platform) as seen:
        assert links.record_heartbeat(platform.ctx, host_id, _report())
    # the agent host's row, the hosts row, the count of present GPUs; one UPDATE (its time)
    assert seen.count("SELECT") == 3, seen
    assert seen.count("UPDATE") == 1 and "INSERT" not in seen, seen


def test_a_heartbeat_that_reports_a_change_still_syncs_it(
    platform_factory: PlatformFactory,
) -> None:
    platform = platform_factory(agent_link_port=7443, agent_link_host="127.0.0.1")
    host_id = _enroll(platform)
    assert links.record_heartbeat(platform.ctx, host_id, _report())
    assert links.record_heartbeat(platform.ctx, host_id, _report(gpus=GPUS - 1))
    assert _present_gpus(platform, host_id) == GPUS - 1  # the one left out is marked missing
    assert links.record_heartbeat(platform.ctx, host_id, _report(gpus=GPUS - 1, cpus=96))
    with platform.ctx.reader() as session:
        host = session.get(HostModel, host_id)
        assert host is not None and host.cpus == 96
    assert links.record_heartbeat(platform.ctx, host_id, _report())
    assert _present_gpus(platform, host_id) == GPUS  # back when reported again


def test_the_last_heartbeat_never_goes_back(platform_factory: PlatformFactory) -> None:
    """Two reports of one host may be written in either order (each waits its turn for
    the write lock); the host-loss pass may already have closed billing at the later."""
    platform = platform_factory(agent_link_port=7443, agent_link_host="127.0.0.1")
    host_id = _enroll(platform)
    clock = FakeClock(platform.ctx.clock())  # after the enrollment's own time
    ctx = replace(platform.ctx, clock=clock)
    later = clock.advance(5)
    assert links.record_heartbeat(ctx, host_id, _report())
    clock.now = later - timedelta(milliseconds=70)  # written after, measured before
    assert links.record_heartbeat(ctx, host_id, _report())
    assert links.record_link_up(ctx, host_id, _report(), "10.0.0.9") is not None
    assert hosts.get_host(platform.ctx, "beat-1").last_heartbeat_at == later
