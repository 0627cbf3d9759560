"""The figures Prometheus scrapes and the operator's utilisation page shows:
the fleet's GPUs by model, host and use, instances by status, the wait queue,
ledger totals, open SSH sessions, and each running instance's latest sample.

Read in one read-only session per call; nothing here writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from gpudock.db.models import (
    BillingPostingModel,
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    GpuState,
    HostModel,
    InstanceModel,
    InstanceStatus,
    SshSessionModel,
    SshSessionOutcome,
    UserModel,
)
from gpudock.db.models.metrics import InstanceSampleModel
from gpudock.services.context import ServiceContext
from gpudock.services.metrics.queries import latest_raw_samples
from gpudock.services.metrics.store import Sample

# A sample older than this many intervals is stale: the instance is not reported.
FRESH_INTERVALS = 3


@dataclass(frozen=True)
class GpuCount:
    model: str
    host: str
    use: str  # free | used | unhealthy
    count: int


@dataclass(frozen=True)
class InstanceFigures:
    instance_id: str
    name: str
    owner: str
    gpu_model: str | None
    host: str
    sample: Sample


@dataclass(frozen=True)
class FleetFigures:
    gpus: list[GpuCount]
    instances_by_status: dict[str, int]
    queue_length: int
    ledger_micro_by_kind: dict[str, int]
    ssh_sessions_open: int
    instances: list[InstanceFigures]


def fleet_figures(ctx: ServiceContext) -> FleetFigures:
    fresh_since = ctx.clock() - timedelta(seconds=FRESH_INTERVALS * ctx.settings.metrics_interval_s)
    with ctx.reader() as session:
        return FleetFigures(
            gpus=_gpu_counts(session),
            instances_by_status=_instances_by_status(session),
            queue_length=int(
                session.scalar(
                    select(func.count())
                    .select_from(InstanceModel)
                    .where(InstanceModel.status == InstanceStatus.PENDING)
                )
                or 0
            ),
            ledger_micro_by_kind={
                kind: int(total or 0)
                for kind, total in session.execute(
                    select(
                        BillingPostingModel.kind, func.sum(BillingPostingModel.amount_micro)
                    ).group_by(BillingPostingModel.kind)
                ).all()
            },
            ssh_sessions_open=int(
                session.scalar(
                    select(func.count())
                    .select_from(SshSessionModel)
                    .where(SshSessionModel.outcome == SshSessionOutcome.OPEN)
                )
                or 0
            ),
            instances=running_instance_figures(session, fresh_since),
        )


def _gpu_counts(session: Session) -> list[GpuCount]:
    allocated = select(GpuAllocationModel.gpu_id)
    shared = select(GpuShareModel.gpu_id)
    rows = session.execute(
        select(
            GpuDeviceModel.model,
            HostModel.name,
            GpuDeviceModel.state,
            GpuDeviceModel.id.in_(allocated) | GpuDeviceModel.id.in_(shared),
        )
        .join(HostModel, HostModel.id == GpuDeviceModel.host_id)
        .where(GpuDeviceModel.present.is_(True))
    ).all()
    counts: Counter[tuple[str, str, str]] = Counter()
    for model, host, state, in_use in rows:
        use = "unhealthy" if state != GpuState.HEALTHY else "used" if in_use else "free"
        counts[(model, host, use)] += 1
    return [GpuCount(m, h, u, n) for (m, h, u), n in sorted(counts.items())]


def _instances_by_status(session: Session) -> dict[str, int]:
    rows = session.execute(
        select(InstanceModel.status, func.count())
        .where(InstanceModel.status != InstanceStatus.DELETED)
        .group_by(InstanceModel.status)
    ).all()
    found = {str(status.value): int(n) for status, n in rows}
    return {s.value: found.get(s.value, 0) for s in InstanceStatus if s != InstanceStatus.DELETED}


def running_instance_figures(
    session: Session, fresh_since: datetime, user_id: str | None = None
) -> list[InstanceFigures]:
    """Each running instance (of `user_id`, or everyone's) with a sample since
    `fresh_since`, by owner and name."""
    query = (
        select(
            InstanceModel.id,
            InstanceModel.name,
            UserModel.name,
            InstanceModel.gpu_model,
            HostModel.name,
        )
        .join(UserModel, UserModel.id == InstanceModel.user_id)
        .join(HostModel, HostModel.id == InstanceModel.host_id)
        .where(InstanceModel.status == InstanceStatus.RUNNING)
        .order_by(UserModel.name, InstanceModel.name)
    )
    if user_id is not None:
        query = query.where(InstanceModel.user_id == user_id)
    rows = session.execute(query).all()
    latest = latest_raw_samples(session, [row[0] for row in rows], fresh_since)
    return [
        InstanceFigures(iid, name, owner, model, host, latest[iid])
        for iid, name, owner, model, host in rows
        if iid in latest
    ]


@dataclass(frozen=True)
class ModelUtilisation:
    """One GPU model on one host over a window: how many GPUs it has, how many
    are held by instances now, and the mean utilisation of the GPUs held
    while they were held (None: no sample in the window)."""

    model: str
    host: str
    gpus: int
    used: int
    mean_utilisation_percent: float | None


def utilisation_by_model_and_host(ctx: ServiceContext, window: timedelta) -> list[ModelUtilisation]:
    """Every GPU of every sample counts, weighted by the raw samples a row
    stands for (a minute row is six raw ones). A share's figure is its
    processes' part of the whole card, so it weighs its fraction of a GPU: two
    half shares each 50 % busy make one card 100 % busy, as NVML would say."""
    since = ctx.clock() - window
    share = InstanceModel.gpu_share_milli
    held = case((share.is_(None), InstanceModel.gpu_count * 1.0), else_=share / 1000.0)
    busy = case((share.is_(None), InstanceModel.gpu_count * 1.0), else_=1.0)
    weight = InstanceSampleModel.samples
    with ctx.reader() as session:
        counts = _gpu_counts(session)
        means = session.execute(
            select(
                InstanceModel.gpu_model,
                HostModel.name,
                func.sum(InstanceSampleModel.gpu_utilisation_mean * busy * weight),
                func.sum(held * weight),
            )
            .join(InstanceModel, InstanceModel.id == InstanceSampleModel.instance_id)
            .join(HostModel, HostModel.id == InstanceModel.host_id)
            .where(InstanceSampleModel.at >= since)
            .where(InstanceSampleModel.gpu_utilisation_mean.is_not(None))
            .group_by(InstanceModel.gpu_model, HostModel.name)
        ).all()
    mean_of = {
        (model, host): min(float(busy_sum) / float(held_sum), 100.0)
        for model, host, busy_sum, held_sum in means
        if held_sum
    }
    totals: dict[tuple[str, str], list[int]] = {}
    for count in counts:
        total = totals.setdefault((count.model, count.host), [0, 0])
        total[0] += count.count
        total[1] += count.count if count.use == "used" else 0
    return [
        ModelUtilisation(model, host, gpus, used, mean_of.get((model, host)))
        for (model, host), (gpus, used) in sorted(totals.items())
    ]
