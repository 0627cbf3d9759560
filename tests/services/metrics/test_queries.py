"""Samples written and read back, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpudock.db.models.metrics import MINUTE
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.metrics import gpu_utilisation_since
from gpudock.services.metrics.queries import samples_since
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def an_instance(platform: Platform, name: str) -> str:
    user = users.create_user(platform.ctx, f"owner-{name}").user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=2, name=name)
    return actions.create_instance(platform.ctx, user, request).id


def test_gpu_utilisation_is_the_busiest_gpu_per_sample_oldest_first(platform: Platform) -> None:
    mine, other = an_instance(platform, "mine"), an_instance(platform, "other")
    two_gpus = (GpuFigure(30.0, 1000), GpuFigure(80.0, 2000))
    with platform.ctx.sessions.begin() as session:
        record_samples(
            session,
            [
                Sample(mine, T0 + timedelta(seconds=20), 50.0, 2**30, gpus=two_gpus),
                Sample(mine, T0, None, 2**30, gpus=(GpuFigure(None, None), GpuFigure(5.0, 10))),
                Sample(mine, T0 + timedelta(seconds=10), 10.0, 2**30),  # no GPU figure
                Sample(mine, T0 - timedelta(seconds=10), 10.0, 2**30, gpus=two_gpus),
                Sample(other, T0 + timedelta(seconds=30), 10.0, 2**30, gpus=two_gpus),
            ],
        )
    with platform.ctx.reader() as session:
        assert gpu_utilisation_since(session, mine, T0) == [
            (T0, 5.0),
            (T0 + timedelta(seconds=20), 80.0),
        ]
        assert gpu_utilisation_since(session, mine, T0 + timedelta(hours=1)) == []
        assert gpu_utilisation_since(session, "no-such-instance", T0) == []


def test_a_sample_reads_back_as_written(platform: Platform) -> None:
    instance_id = an_instance(platform, "box")
    written = Sample(
        instance_id,
        T0,
        cpu_percent=150.0,
        memory_bytes=3 * 2**30,
        data_disk_bytes=5 * 2**30,
        system_disk_bytes=2**29,
        disk_read_bps=1e6,
        disk_write_bps=2e6,
        net_rx_bps=3e3,
        net_tx_bps=4e3,
        gpus=(GpuFigure(99.5, 40960.0), GpuFigure(None, 12.0)),
        resolution_s=MINUTE,
        samples=6,
    )
    with platform.ctx.sessions.begin() as session:
        record_samples(session, [written])
    with platform.ctx.reader() as session:
        assert samples_since(session, instance_id, T0) == [written]
