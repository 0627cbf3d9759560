"""Keeping the samples table bounded: raw rows for a day, minute averages for
30 days, hour averages after that until `GPUDOCK_METRICS_HOUR_RETENTION_DAYS`.

A pass rolls every complete bucket past its level's age into one row of the
next level and deletes the rows it averaged, in one transaction per batch of
instances, so a reader sees either the fine rows or their average, never both
and never neither. Averages are weighted by how many raw samples each row
stands for, so an hour made of minute rows equals the hour of raw rows; a
figure missing from some rows (no GPU reading, the first CPU reading) is
averaged over the rows that have it. Per instance the table then holds at
most a day of raw rows, 43,200 minute rows and 24 per retained day of hours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpudock.db.models.metrics import HOUR, MINUTE, RAW, InstanceSampleModel
from gpudock.services.context import ServiceContext

INSTANCES_PER_TRANSACTION = 50
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Retention:
    """How long each level is kept before it is rolled into the next (or deleted)."""

    raw: timedelta = timedelta(hours=24)
    minute: timedelta = timedelta(days=30)
    hour: timedelta = timedelta(days=400)


@dataclass(frozen=True)
class Downsampled:
    rolled_up: int  # rows replaced by averages
    written: int  # averages written
    expired: int  # hour rows deleted past retention


def retention_of(ctx: ServiceContext) -> Retention:
    return Retention(hour=timedelta(days=ctx.settings.metrics_hour_retention_days))


def downsample(ctx: ServiceContext, now: datetime, retention: Retention) -> Downsampled:
    """One pass over every level; safe to repeat and to run beside the sampler."""
    rolled = written = 0
    for source, target, age in ((RAW, MINUTE, retention.raw), (MINUTE, HOUR, retention.minute)):
        boundary = _bucket_start(now - age, target)
        for batch in _batches(_instances_with_rows(ctx, source, boundary)):
            with ctx.sessions.begin() as session:
                r, w = _roll_up(session, batch, source, target, boundary)
            rolled, written = rolled + r, written + w
    with ctx.sessions.begin() as session:
        result = session.execute(
            delete(InstanceSampleModel)
            .where(InstanceSampleModel.resolution_s == HOUR)
            .where(InstanceSampleModel.at < now - retention.hour)
        )
    return Downsampled(rolled, written, int(getattr(result, "rowcount", 0) or 0))


def _bucket_start(at: datetime, resolution_s: int) -> datetime:
    seconds = int((at - _EPOCH).total_seconds()) // resolution_s * resolution_s
    return _EPOCH + timedelta(seconds=seconds)


def _instances_with_rows(ctx: ServiceContext, resolution_s: int, before: datetime) -> list[str]:
    with ctx.reader() as session:
        return list(
            session.scalars(
                select(InstanceSampleModel.instance_id)
                .where(InstanceSampleModel.resolution_s == resolution_s)
                .where(InstanceSampleModel.at < before)
                .group_by(InstanceSampleModel.instance_id)
            )
        )


def _batches(ids: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), INSTANCES_PER_TRANSACTION):
        yield ids[start : start + INSTANCES_PER_TRANSACTION]


def _roll_up(
    session: Session, instance_ids: list[str], source: int, target: int, boundary: datetime
) -> tuple[int, int]:
    level = (
        (InstanceSampleModel.instance_id.in_(instance_ids)),
        (InstanceSampleModel.resolution_s == source),
        (InstanceSampleModel.at < boundary),
    )
    rows = session.scalars(
        select(InstanceSampleModel)
        .where(*level)
        .order_by(InstanceSampleModel.instance_id, InstanceSampleModel.at)
    ).all()
    buckets: dict[tuple[str, datetime], list[InstanceSampleModel]] = {}
    for row in rows:
        buckets.setdefault((row.instance_id, _bucket_start(row.at, target)), []).append(row)
    averages = [_average(iid, start, target, part) for (iid, start), part in buckets.items()]
    session.execute(delete(InstanceSampleModel).where(*level))
    session.add_all(averages)
    return len(rows), len(averages)


_AVERAGED = (
    "cpu_percent",
    "disk_read_bps",
    "disk_write_bps",
    "net_rx_bps",
    "net_tx_bps",
    "gpu_utilisation_max",
    "gpu_utilisation_mean",
)
_AVERAGED_BYTES = ("memory_bytes", "data_disk_bytes", "system_disk_bytes")


def _average(
    instance_id: str, start: datetime, resolution_s: int, rows: Sequence[InstanceSampleModel]
) -> InstanceSampleModel:
    weights = [row.samples for row in rows]
    figures: dict[str, float | int | None] = {
        name: _weighted([getattr(row, name) for row in rows], weights) for name in _AVERAGED
    }
    for name in _AVERAGED_BYTES:
        value = _weighted([getattr(row, name) for row in rows], weights)
        figures[name] = None if value is None else round(value)
    return InstanceSampleModel(
        instance_id=instance_id,
        at=start,
        resolution_s=resolution_s,
        samples=sum(weights),
        gpus=_average_gpus([row.gpus for row in rows], weights),
        **figures,
    )


def _weighted(values: Sequence[float | int | None], weights: Sequence[int]) -> float | None:
    known = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None


def _average_gpus(encoded: Sequence[str], weights: Sequence[int]) -> str:
    """Per GPU position, the weighted average of each figure that is known."""
    lists = [json.loads(text or "[]") for text in encoded]
    width = max((len(gpus) for gpus in lists), default=0)
    averaged = []
    for position in range(width):
        pairs = [gpus[position] if position < len(gpus) else [None, None] for gpus in lists]
        utilisation = _weighted([p[0] for p in pairs], weights)
        memory = _weighted([p[1] for p in pairs], weights)
        averaged.append([_rounded(utilisation), _rounded(memory)])
    return json.dumps(averaged, separators=(",", ":"))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def table_rows(session: Session) -> int:
    """How many rows the samples table holds now (the benchmark's and tests' measure)."""
    return int(session.scalar(select(func.count()).select_from(InstanceSampleModel)) or 0)
