"""Downsampling: averages that equal the raw rows they replace, and a table
whose size stops growing however long the instances run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from gpudock.db.models.metrics import HOUR, MINUTE, RAW, InstanceSampleModel
from gpudock.platform import Platform
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.metrics import gpu_utilisation_since
from gpudock.services.metrics.downsampling import Retention, downsample, table_rows
from gpudock.services.metrics.queries import samples_since
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


def an_instance(platform: Platform, name: str) -> str:
    user = users.create_user(platform.ctx, f"owner-{name}").user
    request = InstanceRequest(gpu_model="A100-80GB", gpu_count=2, name=name)
    return actions.create_instance(platform.ctx, user, request).id


def rows_by_resolution(platform: Platform) -> dict[int, int]:
    with platform.ctx.reader() as session:
        counted = session.execute(
            select(InstanceSampleModel.resolution_s, func.count()).group_by(
                InstanceSampleModel.resolution_s
            )
        ).all()
    return {resolution: count for resolution, count in counted}


def test_a_minute_of_raw_rows_becomes_their_average(platform: Platform) -> None:
    instance_id = an_instance(platform, "box")
    raw = [
        Sample(instance_id, T0, None, 100, gpus=(GpuFigure(None, None), GpuFigure(10.0, 100))),
        Sample(
            instance_id,
            T0 + timedelta(seconds=20),
            50.0,
            200,
            net_rx_bps=1000.0,
            gpus=(GpuFigure(40.0, 300), GpuFigure(30.0, 200)),
        ),
        Sample(
            instance_id,
            T0 + timedelta(seconds=40),
            100.0,
            300,
            net_rx_bps=3000.0,
            gpus=(GpuFigure(60.0, 500), GpuFigure(50.0, 300)),
        ),
        Sample(instance_id, T0 + timedelta(seconds=60), 7.0, 7),  # the next minute
    ]
    with platform.ctx.sessions.begin() as session:
        record_samples(session, raw)
    # the first minute is wholly more than a day old, the second is not yet
    done = downsample(platform.ctx, T0 + timedelta(days=1, seconds=90), Retention())
    assert (done.rolled_up, done.written) == (3, 1)
    with platform.ctx.reader() as session:
        minute, newest = samples_since(session, instance_id, T0)
        utilisation = gpu_utilisation_since(session, instance_id, T0)
    assert minute == Sample(
        instance_id,
        T0,
        cpu_percent=75.0,  # the first reading had no CPU figure
        memory_bytes=200,
        net_rx_bps=2000.0,
        gpus=(GpuFigure(50.0, 400.0), GpuFigure(30.0, 200.0)),
        resolution_s=MINUTE,
        samples=3,
    )
    assert newest == raw[3]
    # the busiest GPU averaged per sample: (10 + 40 + 60) / 3
    assert utilisation[0] == (T0, pytest.approx(110 / 3))


def test_hours_weigh_minutes_by_their_samples(platform: Platform) -> None:
    instance_id = an_instance(platform, "box")
    minutes = [
        Sample(instance_id, T0, 10.0, 0, resolution_s=MINUTE, samples=1),
        Sample(instance_id, T0 + timedelta(minutes=5), 50.0, 0, resolution_s=MINUTE, samples=3),
    ]
    with platform.ctx.sessions.begin() as session:
        record_samples(session, minutes)
    downsample(platform.ctx, T0 + timedelta(days=30, hours=1), Retention())
    with platform.ctx.reader() as session:
        (hour,) = samples_since(session, instance_id, T0)
    assert (hour.resolution_s, hour.samples, hour.cpu_percent) == (HOUR, 4, 40.0)


def test_the_table_stops_growing(platform: Platform) -> None:
    """Two instances sampled every minute for 5 simulated days, downsampled
    every simulated hour, under a scaled policy (raw 2 h, minutes to 1 day,
    hours to 3 days): the table reaches its bound and stays there."""
    ids = [an_instance(platform, "a"), an_instance(platform, "b")]
    retention = Retention(raw=timedelta(hours=2), minute=timedelta(days=1), hour=timedelta(days=3))
    # raw rows for 2 h, minute rows for the 22 h before, hour rows for the 2 days before that
    per_instance = {RAW: 120, MINUTE: 22 * 60, HOUR: 2 * 24}
    sizes = []
    for hour in range(5 * 24):
        start = T0 + timedelta(hours=hour)
        batch = [
            Sample(i, start + timedelta(minutes=n), 50.0, 2**30, gpus=(GpuFigure(50.0, 1),))
            for i in ids
            for n in range(60)
        ]
        with platform.ctx.sessions.begin() as session:
            record_samples(session, batch)
        downsample(platform.ctx, start + timedelta(hours=1), retention)
        with platform.ctx.reader() as session:
            sizes.append(table_rows(session))
    assert max(sizes) == len(ids) * sum(per_instance.values())
    # past the hour rows' retention (day 3) the size no longer changes
    assert set(sizes[3 * 24 :]) == {max(sizes)}
    assert rows_by_resolution(platform) == {r: len(ids) * n for r, n in per_instance.items()}
