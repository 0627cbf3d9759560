"""Reading samples back: an instance's series since a moment, the latest
sample of each running instance, and the GPU utilisation the idle stop reads.

A series mixes resolutions without overlap: raw rows cover the last day,
minute rows the 30 days before, hour rows what is older (downsampling moves a
bucket from one to the next in one transaction), so "every row since T,
oldest first" is the curve at the finest resolution kept for each moment.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.db.models.metrics import RAW, InstanceSampleModel
from gpudock.services.metrics.store import Sample, sample_of


def gpu_utilisation_since(
    session: Session, instance_id: str, since: datetime
) -> list[tuple[datetime, float]]:
    """(time, utilisation % of the instance's busiest GPU) for every sample at or
    after `since`, oldest first; samples without a GPU figure are left out, so
    the list is empty for an instance without GPUs or without samples.

    Minute and hour rows carry averages: a burst shorter than their bucket is
    flattened in them, which matters only past a day (raw rows are kept 24 h)."""
    rows = session.execute(
        select(InstanceSampleModel.at, InstanceSampleModel.gpu_utilisation_max)
        .where(InstanceSampleModel.instance_id == instance_id)
        .where(InstanceSampleModel.at >= since)
        .where(InstanceSampleModel.gpu_utilisation_max.is_not(None))
        .order_by(InstanceSampleModel.at, InstanceSampleModel.id)
    ).all()
    return [(at, float(utilisation)) for at, utilisation in rows if utilisation is not None]


def samples_since(session: Session, instance_id: str, since: datetime) -> list[Sample]:
    """Every sample of the instance at or after `since`, oldest first."""
    rows = session.scalars(
        select(InstanceSampleModel)
        .where(InstanceSampleModel.instance_id == instance_id)
        .where(InstanceSampleModel.at >= since)
        .order_by(InstanceSampleModel.at, InstanceSampleModel.id)
    ).all()
    return [sample_of(row) for row in rows]


def latest_raw_samples(
    session: Session, instance_ids: list[str], since: datetime
) -> dict[str, Sample]:
    """The newest raw sample at or after `since` of each of the instances that has one."""
    if not instance_ids:
        return {}
    rows = session.scalars(
        select(InstanceSampleModel)
        .where(InstanceSampleModel.instance_id.in_(instance_ids))
        .where(InstanceSampleModel.resolution_s == RAW)
        .where(InstanceSampleModel.at >= since)
        .order_by(InstanceSampleModel.at, InstanceSampleModel.id)
    ).all()
    return {row.instance_id: sample_of(row) for row in rows}
