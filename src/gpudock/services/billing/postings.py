"""The ledger in the database: accounts, append-only postings, cached balances.

`post_many()` is the one writer of `billing_postings`, of
`billing_accounts.balance_micro` and of `billing_month_totals`: it inserts
postings and moves the cached balances and each user's monthly totals in the
caller's transaction, so neither cache can disagree with the postings it sums
(`verify_balances()` proves it; the tests call it).
The unique `key` column makes a replayed posting impossible, whatever the timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, case, func, insert, literal, select, union_all, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from gpudock import messages
from gpudock.billing.ledger import Posting, user_account
from gpudock.db.models import BillingAccountModel, BillingMonthTotalModel, BillingPostingModel
from gpudock.db.models.base import Base

POSTINGS = cast(Table, BillingPostingModel.__table__)  # declarative maps it to a Table


@dataclass(frozen=True)
class PostingDetails:
    """What a statement line needs to explain itself, beyond the money."""

    from_at: datetime | None = None
    to_at: datetime | None = None
    gpu_model: str | None = None
    gpu_count: int = 0
    rate_micro: int | None = None
    rate_per_s: int | None = None
    description: str = ""
    created_by: str | None = None
    request_digest: str | None = None


def ensure_account(session: Session, account_id: str, now: datetime) -> None:
    """Create the account row unless it exists (safe against a concurrent creator)."""
    ensure_accounts(session, [account_id], now)


def ensure_accounts(session: Session, account_ids: list[str], now: datetime) -> None:
    existing = set(
        session.scalars(
            select(BillingAccountModel.id).where(BillingAccountModel.id.in_(account_ids))
        )
    )
    missing = [a for a in account_ids if a not in existing]
    if not missing:
        return
    values = [
        {
            "id": a,
            "user_id": a.removeprefix("user:") if a.startswith("user:") else None,
            "balance_micro": 0,
            "created_at": now,
        }
        for a in missing
    ]
    session.execute(_upsert(session, BillingAccountModel).values(values).on_conflict_do_nothing())


def _upsert(session: Session, model: type[Base]) -> Any:
    """INSERT … ON CONFLICT in the session's dialect (both have it; the builders differ)."""
    dialect = session.get_bind().dialect.name
    return (postgresql_insert if dialect == "postgresql" else sqlite_insert)(model)


def month_of(at: datetime) -> str:
    """The calendar month (UTC) a posting at `at` counts in: "2026-12"."""
    return at.astimezone(UTC).strftime("%Y-%m")


def find(session: Session, key: str) -> BillingPostingModel | None:
    return session.scalar(select(BillingPostingModel).where(BillingPostingModel.key == key))


def post_many(session: Session, items: list[tuple[Posting, PostingDetails]], now: datetime) -> int:
    """Record postings and move the cached balances, in the caller's transaction;
    returns how many were recorded (`find` reads one back by its key).

    Either the postings and the balance moves commit together with whatever
    else the caller changed, or nothing does. A key posted before makes the
    insert fail (unique constraint) and the transaction with it: top-ups look
    for their key with `find` first and retry after such a race; metering
    never replays, because each charge starts where the interval's last ended.
    The rows go in as one executemany of plain values: the charging pass posts
    one per running instance and period, and ORM objects for them cost it half
    its time.
    """
    if not items:
        return 0
    deltas: dict[str, int] = {}
    rows = []
    for posting, details in items:
        deltas[posting.debit] = deltas.get(posting.debit, 0) - posting.amount
        deltas[posting.credit] = deltas.get(posting.credit, 0) + posting.amount
        rows.append(_values(posting, details, now))
    ensure_accounts(session, sorted(deltas), now)
    session.execute(insert(POSTINGS), rows)  # the unique key speaks now
    _move(session, deltas)
    _add_to_months(session, [posting for posting, _details in items])
    return len(rows)


def _add_to_months(session: Session, postings: list[Posting]) -> None:
    """`amount = amount + added` per (user, month, kind), inserting the rows a month
    starts with; an upsert, so two servers posting for one user both count."""
    added: dict[tuple[str, str, str], int] = {}
    for posting in postings:
        key = (posting.user_id, month_of(posting.at), posting.kind.value)
        added[key] = added.get(key, 0) + posting.amount
    statement = _upsert(session, BillingMonthTotalModel).values(
        [
            {"user_id": user_id, "month": month, "kind": kind, "amount_micro": amount}
            for (user_id, month, kind), amount in sorted(added.items())
        ]
    )
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["user_id", "month", "kind"],
            set_={
                "amount_micro": BillingMonthTotalModel.amount_micro
                + statement.excluded.amount_micro
            },
        )
    )


def _values(posting: Posting, extra: PostingDetails, now: datetime) -> dict[str, object]:
    return {
        "key": posting.key,
        "kind": posting.kind.value,
        "debit_account": posting.debit,
        "credit_account": posting.credit,
        "amount_micro": posting.amount,
        "user_id": posting.user_id,
        "at": posting.at,
        "recorded_at": now,
        "instance_id": posting.instance_id,
        "interval_id": posting.interval_id,
        "seconds": posting.seconds,
        "from_at": extra.from_at,
        "to_at": extra.to_at,
        "gpu_model": extra.gpu_model,
        "gpu_count": extra.gpu_count,
        "rate_micro": extra.rate_micro,
        "rate_per_s": extra.rate_per_s,
        "description": extra.description,
        "description_msg": messages.stored(extra.description),
        "created_by": extra.created_by,
        "request_digest": extra.request_digest,
    }


def _move(session: Session, deltas: dict[str, int]) -> None:
    """One UPDATE for all accounts: `balance = balance + delta`, never read-modify-write,
    so a concurrent top-up and charge on one wallet both count."""
    moving = {a: d for a, d in deltas.items() if d}
    if not moving:
        return
    session.execute(
        update(BillingAccountModel)
        .where(BillingAccountModel.id.in_(sorted(moving)))
        .values(
            balance_micro=BillingAccountModel.balance_micro
            + case(moving, value=BillingAccountModel.id, else_=0)
        )
        .execution_options(synchronize_session=False)
    )


def account(session: Session, user_id: str, *, lock: bool = False) -> BillingAccountModel | None:
    query = select(BillingAccountModel).where(BillingAccountModel.id == user_account(user_id))
    if lock:
        query = query.with_for_update()
    return session.scalar(query.execution_options(populate_existing=True))


def balance(session: Session, user_id: str) -> int:
    row = account(session, user_id)
    return row.balance_micro if row is not None else 0


def verify_balances(session: Session) -> dict[str, tuple[int, int]]:
    """Accounts whose cached balance differs from their postings: {id: (cached, derived)}.

    Empty when all is well; also checks that all balances sum to zero
    (reported under the key "Σ"). One statement, so on PostgreSQL's READ
    COMMITTED it compares one snapshot even while charges commit (two reads
    could see a posting without its balance update, or the other way round)."""
    amount = BillingPostingModel.amount_micro
    parts = union_all(
        select(
            BillingPostingModel.credit_account.label("account"),
            amount.label("derived"),
            literal(0).label("cached"),
        ),
        select(BillingPostingModel.debit_account, -amount, literal(0)),
        select(BillingAccountModel.id, literal(0), BillingAccountModel.balance_micro),
    ).subquery()
    rows = session.execute(
        select(parts.c.account, func.sum(parts.c.derived), func.sum(parts.c.cached)).group_by(
            parts.c.account
        )
    ).all()
    wrong = {
        account_id: (int(cached), int(derived))
        for account_id, derived, cached in rows
        if int(cached) != int(derived)
    }
    total = sum(int(derived) for _, derived, _ in rows)
    if total != 0:
        wrong["Σ"] = (0, total)
    return wrong


def verify_month_totals(session: Session) -> dict[tuple[str, str, str], tuple[int, int]]:
    """Monthly totals that differ from the postings they sum: {(user, month, kind):
    (kept, derived)}; empty when all is well. One statement, as `verify_balances`."""
    posted = BillingPostingModel
    if session.get_bind().dialect.name == "postgresql":
        month = func.to_char(func.timezone("UTC", posted.at), "YYYY-MM")
    else:  # SQLite keeps UTC text: "2026-12-08 02:10:00.000000"
        month = func.substr(posted.at, 1, 7)
    kept = BillingMonthTotalModel
    parts = union_all(
        select(
            posted.user_id.label("user_id"),
            month.label("month"),
            posted.kind.label("kind"),
            posted.amount_micro.label("derived"),
            literal(0).label("kept"),
        ),
        select(kept.user_id, kept.month, kept.kind, literal(0), kept.amount_micro),
    ).subquery()
    rows = session.execute(
        select(
            parts.c.user_id,
            parts.c.month,
            parts.c.kind,
            func.sum(parts.c.kept),
            func.sum(parts.c.derived),
        ).group_by(parts.c.user_id, parts.c.month, parts.c.kind)
    ).all()
    return {
        (user_id, month_, kind): (int(kept_sum), int(derived))
        for user_id, month_, kind, kept_sum, derived in rows
        if int(kept_sum) != int(derived)
    }
