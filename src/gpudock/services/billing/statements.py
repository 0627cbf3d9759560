"""Statements: a user's ledger lines, usage per instance and spending per day, each
line explaining itself.

Amounts are signed from the user's side: a top-up or a refund is positive,
a charge negative. Only the subject's own postings are ever read.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import InstrumentedAttribute

from gpudock.billing.ledger import PostingKind
from gpudock.billing.metering import SECONDS_PER_DAY
from gpudock.billing.money import format_amount
from gpudock.db.models import BillingPostingModel, InstanceModel, UserModel
from gpudock.errors import InvalidRequest
from gpudock.services.context import ServiceContext

MAX_PAGE = 1000
MAX_SPEND_DAYS = 90
CSV_LIMIT = 1_000_000
LEDGER_COLUMNS = [
    "id",
    "at",
    "kind",
    "amount",
    "currency",
    "instance_id",
    "instance_name",
    "gpu_model",
    "gpu_count",
    "from",
    "to",
    "seconds",
    "rate",
    "rate_unit",
    "description",
]
USAGE_COLUMNS = [
    "instance_id",
    "instance_name",
    "gpu_model",
    "gpu_count",
    "seconds",
    "gpu_seconds",
    "compute_amount",
    "storage_seconds",
    "storage_amount",
    "amount",
    "currency",
]


@dataclass(frozen=True)
class Line:
    posting: BillingPostingModel
    instance_name: str | None

    @property
    def signed_amount(self) -> int:
        charge = self.posting.kind in (PostingKind.COMPUTE.value, PostingKind.STORAGE.value)
        return -self.posting.amount_micro if charge else self.posting.amount_micro

    @property
    def rate_unit(self) -> str | None:
        if self.posting.rate_per_s is None:
            return None
        return "per day" if self.posting.rate_per_s == SECONDS_PER_DAY else "per hour"


@dataclass(frozen=True)
class Page:
    lines: list[Line]
    next_cursor: int | None


def _query(
    user: UserModel, start: datetime | None, end: datetime | None, after: int | None
) -> Select[BillingPostingModel, str]:
    query = (
        select(BillingPostingModel, InstanceModel.name)
        .outerjoin(InstanceModel, InstanceModel.id == BillingPostingModel.instance_id)
        .where(BillingPostingModel.user_id == user.id)
        .order_by(BillingPostingModel.id)
    )
    if start is not None:
        query = query.where(BillingPostingModel.at >= start)
    if end is not None:
        query = query.where(BillingPostingModel.at < end)
    if after is not None:
        query = query.where(BillingPostingModel.id > after)
    return query


def ledger_page(
    ctx: ServiceContext,
    user: UserModel,
    start: datetime | None,
    end: datetime | None,
    limit: int,
    cursor: int | None,
) -> Page:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(f"limit must be 1..{MAX_PAGE}", field="limit")
    with ctx.reader() as session:
        rows = session.execute(_query(user, start, end, cursor).limit(limit + 1)).all()
    lines = [Line(p, name) for p, name in rows[:limit]]
    more = len(rows) > limit
    return Page(lines, lines[-1].posting.id if more and lines else None)


def all_lines(
    ctx: ServiceContext, user: UserModel, start: datetime | None, end: datetime | None
) -> list[Line]:
    with ctx.reader() as session:
        rows = session.execute(_query(user, start, end, None).limit(CSV_LIMIT)).all()
    return [Line(p, name) for p, name in rows]


def latest_lines(ctx: ServiceContext, user: UserModel, limit: int) -> list[Line]:
    """The user's newest ledger lines first (the statement pages go oldest first)."""
    oldest_first = _query(user, None, None, None)
    newest_first = oldest_first.order_by(None).order_by(BillingPostingModel.id.desc())
    with ctx.reader() as session:
        rows = session.execute(newest_first.limit(limit)).all()
    return [Line(p, name) for p, name in rows]


@dataclass
class Usage:
    instance_id: str
    instance_name: str | None
    gpu_model: str | None
    gpu_count: int
    seconds: int = 0
    gpu_seconds: int = 0
    compute_amount: int = 0
    storage_seconds: int = 0
    storage_amount: int = 0

    @property
    def amount(self) -> int:
        return self.compute_amount + self.storage_amount


def usage(
    ctx: ServiceContext, user: UserModel, start: datetime | None, end: datetime | None
) -> list[Usage]:
    """Per instance: billed running seconds, GPU-seconds, stopped-disk seconds, money
    (refunds subtract), summed by the database."""
    p = BillingPostingModel
    query = (
        select(
            p.instance_id,
            InstanceModel.name,
            p.kind,
            p.rate_per_s,
            p.gpu_model,
            p.gpu_count,
            func.sum(p.seconds),
            func.sum(p.seconds * p.gpu_count),
            func.sum(p.amount_micro),
        )
        .join(InstanceModel, InstanceModel.id == p.instance_id)
        .where(p.user_id == user.id)
        .group_by(p.instance_id, InstanceModel.name, p.kind, p.rate_per_s, p.gpu_model, p.gpu_count)
    )
    if start is not None:
        query = query.where(p.at >= start)
    if end is not None:
        query = query.where(p.at < end)
    with ctx.reader() as session:
        rows = session.execute(query).all()
    items: dict[str, Usage] = {}
    for instance_id, name, kind, per_s, model, count, seconds, gpu_s, amount in rows:
        if instance_id is None:  # top-ups: not usage
            continue
        item = items.setdefault(instance_id, Usage(instance_id, name, model, count))
        sign = -1 if kind == PostingKind.REFUND.value else 1
        if per_s == SECONDS_PER_DAY:
            item.storage_seconds += sign * int(seconds)
            item.storage_amount += sign * int(amount)
        else:
            item.seconds += sign * int(seconds)
            item.gpu_seconds += sign * int(gpu_s)
            item.compute_amount += sign * int(amount)
    return sorted(items.values(), key=lambda u: (u.instance_name or "", u.instance_id))


@dataclass(frozen=True)
class DaySpend:
    day: date
    amount: int  # charges minus refunds that day (micro-units), never negative


def _utc_day(dialect: str, column: InstrumentedAttribute[datetime]) -> ColumnElement[str]:
    if dialect == "postgresql":  # the session's time zone must not move the day
        return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")
    return func.strftime("%Y-%m-%d", column)  # SQLite keeps UTC text


def daily_spend(
    ctx: ServiceContext, user: UserModel, days: int, now: datetime | None = None
) -> list[DaySpend]:
    """The user's spending per UTC day over the last `days` days (today included,
    at most MAX_SPEND_DAYS), oldest first, one entry per day even when nothing was
    spent: summed by the database."""
    days = max(1, min(days, MAX_SPEND_DAYS))
    now = (now or ctx.clock()).astimezone(UTC)
    first = now.date() - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    p = BillingPostingModel
    with ctx.reader() as session:
        day = _utc_day(session.get_bind().dialect.name, p.at)
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


# -- CSV ---------------------------------------------------------------------------------
def _csv(header: list[str], rows: Iterable[list[object]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def ledger_csv(lines: list[Line], currency: str) -> Iterator[str]:
    return _csv(
        LEDGER_COLUMNS,
        (
            [
                line.posting.id,
                _iso(line.posting.at),
                line.posting.kind,
                format_amount(line.signed_amount),
                currency,
                line.posting.instance_id,
                line.instance_name,
                line.posting.gpu_model,
                line.posting.gpu_count if line.posting.instance_id else None,
                _iso(line.posting.from_at),
                _iso(line.posting.to_at),
                line.posting.seconds if line.posting.instance_id else None,
                format_amount(line.posting.rate_micro) if line.posting.rate_micro else None,
                line.rate_unit,
                line.posting.description,
            ]
            for line in lines
        ),
    )


def usage_csv(items: list[Usage], currency: str) -> Iterator[str]:
    return _csv(
        USAGE_COLUMNS,
        (
            [
                u.instance_id,
                u.instance_name,
                u.gpu_model,
                u.gpu_count,
                u.seconds,
                u.gpu_seconds,
                format_amount(u.compute_amount),
                u.storage_seconds,
                format_amount(u.storage_amount),
                format_amount(u.amount),
                currency,
            ]
            for u in items
        ),
    )
