"""Read-only questions the web console asks that no other service answers yet.

Each is one short query (or none) and returns plain values: the console's
pages stay thin and never open a database session themselves.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import InstrumentedAttribute

from gpudock.billing.ledger import PostingKind
from gpudock.db.models import (
    BillingPostingModel,
    HostModel,
    InstanceModel,
    InstanceStatus,
    UserModel,
)
from gpudock.images import compat
from gpudock.runtime.base import ContainerStats
from gpudock.services.billing import intervals as metering
from gpudock.services.billing.statements import Line
from gpudock.services.context import ServiceContext
from gpudock.services.images import catalog as images
from gpudock.services.instances import actions as instances

MAX_CHART_DAYS = 90


@dataclass(frozen=True)
class Estimate:
    """What an instance of this shape would cost per hour if it started now."""

    unit_price: int  # per GPU-hour, or per hour without GPUs (micro-units)
    per_hour: int  # the whole instance (micro-units)


def estimate(ctx: ServiceContext, gpu_model: str | None, gpu_count: int) -> Estimate:
    """The price the metering would freeze on the interval if it opened now."""
    with ctx.reader() as session:
        unit, rate = metering.rate_for(session, gpu_model, gpu_count)
    return Estimate(unit_price=unit, per_hour=rate.per_hour)


@dataclass(frozen=True)
class DaySpend:
    day: date
    amount: int  # charges minus refunds that day (micro-units), never negative


def _day(session_dialect: str, column: InstrumentedAttribute[datetime]) -> ColumnElement[str]:
    if session_dialect == "postgresql":  # the session's time zone must not move the day
        return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")
    return func.strftime("%Y-%m-%d", column)  # SQLite keeps UTC text


def daily_spend(
    ctx: ServiceContext, user: UserModel, days: int, now: datetime | None = None
) -> list[DaySpend]:
    """The user's spending per UTC day over the last `days` days (today included),
    oldest first, one entry per day even when nothing was spent: summed by the database."""
    days = max(1, min(days, MAX_CHART_DAYS))
    now = (now or ctx.clock()).astimezone(UTC)
    first = now.date() - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    p = BillingPostingModel
    with ctx.reader() as session:
        day = _day(session.get_bind().dialect.name, p.at)
        rows = session.execute(
            select(day, p.kind, func.sum(p.amount_micro))
            .where(p.user_id == user.id, p.at >= start, p.kind != PostingKind.TOPUP.value)
            .group_by(day, p.kind)
        ).all()
    totals: dict[str, int] = {}
    for label, kind, amount in rows:
        sign = -1 if kind == PostingKind.REFUND.value else 1
        totals[str(label)] = totals.get(str(label), 0) + sign * int(amount)
    return [
        DaySpend(d, max(0, totals.get(d.isoformat(), 0)))
        for d in (first + timedelta(days=n) for n in range(days))
    ]


def latest_lines(ctx: ServiceContext, user: UserModel, limit: int) -> list[Line]:
    """The user's newest ledger lines first (the statement pages go oldest first)."""
    p = BillingPostingModel
    with ctx.reader() as session:
        rows = session.execute(
            select(p, InstanceModel.name)
            .outerjoin(InstanceModel, InstanceModel.id == p.instance_id)
            .where(p.user_id == user.id)
            .order_by(p.id.desc())
            .limit(limit)
        ).all()
    return [Line(posting, name) for posting, name in rows]


@dataclass(frozen=True)
class ImageHint:
    """Whether an image runs on a GPU model here, and what would instead."""

    image: str
    gpu_model: str | None
    known: bool  # in the catalog (else the engine is asked at create time)
    ok: bool  # not refused; `unchecked` says what, if anything, could not be checked
    reason: str
    unchecked: str
    models: list[str]  # GPU models of this fleet that can run the image
    alternatives: list[str]  # catalog images with CUDA that run on `gpu_model`


def image_hint(
    ctx: ServiceContext, user: UserModel, image: str, gpu_model: str | None, limit: int = 5
) -> ImageHint:
    """The create form's hint: the catalog's verdict for `image` on `gpu_model` (no GPU
    model: no constraint), the fleet's models that can run it, and up to `limit` images
    that can run on the model. An image outside the catalog is `known=False`."""
    specs = images.list_images(ctx, user)
    table = images.compatibility_table(ctx, user, specs)
    row = table.get(image)
    verdict = row.get(gpu_model, "ok") if row is not None and gpu_model else "ok"
    unknown = f"{compat.UNKNOWN}: "
    unchecked = verdict.removeprefix(unknown) if verdict.startswith(unknown) else ""
    refused = verdict != "ok" and not unchecked
    alternatives = [
        s.reference
        for s in specs
        if s.reference != image
        and s.cuda is not None
        and table[s.reference].get(gpu_model or "") == "ok"
    ]
    return ImageHint(
        image=image,
        gpu_model=gpu_model,
        known=row is not None,
        ok=not refused,
        reason=verdict if refused else "",
        unchecked="" if refused else unchecked,
        models=[m for m, v in (row or {}).items() if v == "ok"],
        alternatives=alternatives[:limit],
    )


# The previous reading of each container, to compute CPU % from two: a bounded
# cache (oldest dropped first), per process. Keys: (cluster id, container id).
MAX_READINGS = 4096
_readings: OrderedDict[tuple[str, str], ContainerStats] = OrderedDict()
_readings_lock = threading.Lock()


@dataclass(frozen=True)
class InstanceUsage:
    """What a running instance uses now. No per-GPU utilisation: the fleet's
    GPU sources do not measure it (simulated GPUs have none to measure)."""

    cpu_percent: float | None  # 100 = one core busy; None until a second reading
    cpu_limit: float | None  # CPUs it may use
    memory_bytes: int  # page cache excluded
    memory_limit_bytes: int | None
    pids: int
    gpus: list[str]  # the allocated GPUs' UUIDs
    gpus_simulated: bool
    read_at: datetime


def instance_usage(ctx: ServiceContext, user: UserModel, ref: str) -> InstanceUsage | None:
    """The instance's CPU, memory and process use now, or None unless it is
    running. CPU % compares this reading with the previous one for the same
    container (None on the first). `NotFound` for another user's instance."""
    instance = instances.get_instance(ctx, user, ref)
    if instance.status != InstanceStatus.RUNNING or not instance.container_id:
        return None
    stats = ctx.runtime.container_stats(instance.container_id)
    if stats is None:
        return None
    view = instances.view(ctx, instance)
    with ctx.reader() as session:
        host = session.get(HostModel, instance.host_id) if instance.host_id else None
    return InstanceUsage(
        cpu_percent=_cpu_percent((ctx.cluster_id, instance.container_id), stats),
        cpu_limit=stats.cpu_limit,
        memory_bytes=stats.memory_bytes,
        memory_limit_bytes=stats.memory_limit_bytes,
        pids=stats.pids,
        gpus=view.gpus,
        gpus_simulated=host.simulated if host is not None else False,
        read_at=stats.read_at,
    )


def _cpu_percent(key: tuple[str, str], stats: ContainerStats) -> float | None:
    """Δcpu / Δwall × 100 against the previous reading, which this one replaces.
    None on the first reading, or when the counters went back (a restart)."""
    with _readings_lock:
        previous = _readings.pop(key, None)
        _readings[key] = stats
        while len(_readings) > MAX_READINGS:
            _readings.popitem(last=False)
    if previous is None:
        return None
    wall_ns = (stats.read_at - previous.read_at) / timedelta(microseconds=1) * 1000
    cpu_ns = stats.cpu_total_ns - previous.cpu_total_ns
    if wall_ns <= 0 or cpu_ns < 0:
        return None
    return cpu_ns / wall_ns * 100
