"""Read-only questions the web console asks that no other service answers yet.

Each is one short query (or none) and returns plain values: the console's
pages stay thin and never open a database session themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import InstrumentedAttribute

from gpudock.billing.ledger import PostingKind
from gpudock.db.models import BillingPostingModel, InstanceModel, UserModel
from gpudock.services import images, metering
from gpudock.services.context import ServiceContext
from gpudock.services.statements import Line

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
    ok: bool
    reason: str
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
        ok=verdict == "ok",
        reason="" if verdict == "ok" else verdict,
        models=[m for m, v in (row or {}).items() if v == "ok"],
        alternatives=alternatives[:limit],
    )
