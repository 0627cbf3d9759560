"""Billing for users and admins: prices, top-ups, balances, budgets, the funds check.

Free until priced: a fresh installation has no prices, every rate is zero,
and no balance is needed — convenient for a self-hosted lab. Once an admin
sets a price > 0 for what a request asks for, create and start need a balance
covering `GPUDOCK_BILLING_MIN_BALANCE_SECONDS` at that price (and a monthly
budget, if the user set one, not yet spent), checked again at placement.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpudock.billing.ledger import EXTERNAL_TOPUPS, Posting, PostingKind, user_account
from gpudock.billing.metering import (
    IntervalKind,
    Rate,
    required_for_start,
    runway_seconds,
)
from gpudock.billing.money import format_amount
from gpudock.db.models import (
    BillingIntervalModel,
    BillingMonthTotalModel,
    BillingPostingModel,
    BillingPriceModel,
    DesiredState,
    GpuDeviceModel,
    InstanceModel,
    InstanceStatus,
    UserModel,
)
from gpudock.errors import Conflict, InvalidRequest, NotFound, PaymentRequired
from gpudock.messages import Message
from gpudock.services.billing import intervals as metering
from gpudock.services.billing import postings as ledger
from gpudock.services.billing.postings import PostingDetails
from gpudock.services.context import ServiceContext
from gpudock.settings import Settings

PRICE_KINDS = ("gpu", "no_gpu", "disk")
# Asked to run, not running yet: no compute interval is open for these.
WAITING_TO_RUN = (
    InstanceStatus.PENDING,
    InstanceStatus.CREATING,
    InstanceStatus.STARTING,
    InstanceStatus.MIGRATING,
    InstanceStatus.UNREACHABLE,  # its host is lost: billed again once it runs there again
)
TOPUP_ATTEMPTS = 3
PRICE_UNITS = {"gpu": "per GPU-hour", "no_gpu": "per hour", "disk": "per GB-day"}


class Shape(Protocol):
    """What an instance (or a request for one) asks for, as far as its price goes."""

    @property
    def gpu_model(self) -> str | None: ...

    @property
    def gpu_count(self) -> int: ...

    @property
    def gpu_share_milli(self) -> int | None: ...


# -- prices ----------------------------------------------------------------------------
def list_prices(ctx: ServiceContext) -> list[BillingPriceModel]:
    with ctx.sessions() as session:
        return list(
            session.scalars(
                select(BillingPriceModel).order_by(BillingPriceModel.kind, BillingPriceModel.key)
            )
        )


def set_price(
    ctx: ServiceContext, admin: UserModel, kind: str, gpu_model: str | None, amount: int
) -> BillingPriceModel:
    """Set a price (zero = free). Intervals open at the price of their opening moment."""
    if kind not in PRICE_KINDS:
        raise InvalidRequest(f"kind must be one of {', '.join(PRICE_KINDS)}", field="kind")
    if (kind == "gpu") != (gpu_model is not None):
        raise InvalidRequest("gpu_model goes with kind 'gpu', and only with it", field="gpu_model")
    with ctx.sessions.begin() as session:
        if gpu_model is not None:
            _check_model(session, gpu_model)
        key = metering.gpu_price_key(gpu_model) if gpu_model else kind
        row = session.get(BillingPriceModel, key, with_for_update=True)
        if row is None:
            row = BillingPriceModel(key=key, kind=kind, gpu_model=gpu_model)
            session.add(row)
        row.amount_micro, row.updated_at, row.updated_by = amount, ctx.clock(), admin.id
    return row


def _check_model(session: Session, model: str) -> None:
    known = sorted(set(session.scalars(select(GpuDeviceModel.model))))
    if model not in known:
        raise InvalidRequest(
            f"unknown GPU model {model!r}; this cluster has: {', '.join(known) or 'none'}",
            field="gpu_model",
        )


def gpu_prices_per_hour(ctx: ServiceContext) -> dict[str, str]:
    """{model: price per GPU-hour as a decimal string}, for the GPU summary."""
    return {p.gpu_model: format_amount(p.amount_micro) for p in list_prices(ctx) if p.gpu_model}


@dataclass(frozen=True)
class Estimate:
    """What an instance of this shape would cost per hour if it started now."""

    unit_price: int  # per GPU-hour, or per hour without GPUs (micro-units)
    per_hour: int  # the whole instance (micro-units)


def estimate(
    ctx: ServiceContext, gpu_model: str | None, gpu_count: int, share_milli: int | None = None
) -> Estimate:
    """The price the metering would freeze on the interval if it opened now
    (a share of one GPU: its fraction of the GPU's)."""
    with ctx.reader() as session:
        unit, rate = metering.rate_for(session, gpu_model, gpu_count, share_milli)
    return Estimate(unit_price=unit, per_hour=rate.per_hour)


# -- top-ups -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Topup:
    posting: BillingPostingModel
    user: UserModel
    balance: int
    replayed: bool


def topup(
    ctx: ServiceContext,
    admin: UserModel,
    user_ref: str,
    amount: int,
    idempotency_key: str | None,
    note: str = "",
) -> Topup:
    """Credit a user's wallet from `external:topups`.

    With an idempotency key, a replay returns the first result (a reused key
    with another user or amount is refused); without one, each call credits.
    """
    digest = hashlib.sha256(json.dumps([user_ref, amount, note]).encode()).hexdigest()
    key = f"topup:{admin.id}:{idempotency_key}" if idempotency_key else None
    for attempt in range(TOPUP_ATTEMPTS):
        try:
            return _topup_once(ctx, admin, user_ref, amount, key, note, digest)
        except IntegrityError:  # the same key raced in: the next attempt returns the winner
            if attempt == TOPUP_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _topup_once(
    ctx: ServiceContext,
    admin: UserModel,
    user_ref: str,
    amount: int,
    key: str | None,
    note: str,
    digest: str,
) -> Topup:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        if key is not None and (seen := ledger.find(session, key)) is not None:
            if seen.request_digest != digest:
                raise Conflict(
                    "this Idempotency-Key was already used for a different top-up; "
                    "use a new key for a new top-up",
                    field="Idempotency-Key",
                )
            user = session.get(UserModel, seen.user_id)
            assert user is not None
            return Topup(seen, user, ledger.balance(session, user.id), replayed=True)
        user = _user_by_ref(session, user_ref, field="user")
        posting = Posting(
            key=key or f"topup:{admin.id}:auto-{secrets.token_hex(12)}",
            kind=PostingKind.TOPUP,
            debit=EXTERNAL_TOPUPS,
            credit=user_account(user.id),
            amount=amount,
            user_id=user.id,
            at=now,
        )
        details = PostingDetails(
            description=note or Message("top-up by {admin}", admin=admin.name),
            created_by=admin.id,
            request_digest=digest,
        )
        ledger.post_many(session, [(posting, details)], now)  # a raced key: IntegrityError
        row = ledger.find(session, posting.key)
        assert row is not None  # just inserted, in this transaction
        return Topup(row, user, ledger.balance(session, user.id), replayed=False)


def _user_by_ref(session: Session, ref: str, *, field: str | None = None) -> UserModel:
    user = session.scalar(select(UserModel).where(or_(UserModel.name == ref, UserModel.id == ref)))
    if user is None:
        message = f"no user {ref!r}: `gpudock users list` shows them (name or id)"
        raise InvalidRequest(message, field=field) if field else NotFound(message)
    return user


def resolve_subject(ctx: ServiceContext, caller: UserModel, user_ref: str | None) -> UserModel:
    """Whose statement to read: one's own; an admin may name another user."""
    if user_ref is None or user_ref in (caller.id, caller.name):
        return caller
    if not caller.is_admin:
        raise NotFound(f"no user {user_ref!r} visible to you: you can read your own statements")
    with ctx.reader() as session:
        return _user_by_ref(session, user_ref)


# -- balances, budgets and the funds check --------------------------------------------------
@dataclass(frozen=True)
class BalanceSummary:
    user: UserModel
    balance: int
    unposted: int
    burn_per_hour: int
    monthly_budget: int | None
    month_spent: int

    @property
    def available(self) -> int:
        return self.balance - self.unposted

    @property
    def runway_s(self) -> int | None:
        return runway_seconds(self.available, self.burn_per_hour)


def summary(ctx: ServiceContext, user: UserModel) -> BalanceSummary:
    now = ctx.clock()
    with ctx.reader() as session:
        return _summary(session, user, now)


def _summary(
    session: Session, user: UserModel, now: datetime, *, lock: bool = False
) -> BalanceSummary:
    """`lock`: the account's row is locked (one funds check per user at a time)."""
    account = ledger.account(session, user.id, lock=lock)
    states = [metering.state_of(r) for r in open_intervals(session, user.id)]
    unposted = metering.unposted(states, now)
    return BalanceSummary(
        user=user,
        balance=account.balance_micro if account else 0,
        unposted=unposted,
        burn_per_hour=sum(s.rate.per_hour for s in states),
        monthly_budget=account.monthly_budget_micro if account else None,
        month_spent=month_spent(session, user.id, now) + unposted,
    )


def set_budget(ctx: ServiceContext, user: UserModel, amount: int | None) -> BalanceSummary:
    """Set (or clear, with None) the user's monthly budget; running instances stop
    when this calendar month's charges (UTC) reach it."""
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        ledger.ensure_account(session, user_account(user.id), now)
        account = ledger.account(session, user.id, lock=True)
        assert account is not None
        account.monthly_budget_micro = amount
    ctx.wake_reconciler()
    return summary(ctx, user)


def open_intervals(session: Session, user_id: str) -> list[BillingIntervalModel]:
    return list(
        session.scalars(
            select(BillingIntervalModel)
            .where(
                BillingIntervalModel.user_id == user_id,
                BillingIntervalModel.closed_at.is_(None),
            )
            .order_by(BillingIntervalModel.id)
        )
    )


def month_spent(session: Session, user_id: str, now: datetime) -> int:
    """Charges minus refunds posted this calendar month (UTC), from the monthly
    totals `post_many` keeps (a few rows, however many postings)."""
    rows = session.execute(
        select(BillingMonthTotalModel.kind, BillingMonthTotalModel.amount_micro).where(
            BillingMonthTotalModel.user_id == user_id,
            BillingMonthTotalModel.month == ledger.month_of(now),
            BillingMonthTotalModel.kind != PostingKind.TOPUP.value,
        )
    ).all()
    return sum(-int(t) if k == PostingKind.REFUND.value else int(t) for k, t in rows)


def shortfall(
    session: Session,
    settings: Settings,
    user_id: str,
    shape: Shape,
    now: datetime,
    *,
    waiting_self: str | None = None,
) -> str | None:
    """Why the user cannot run this shape now, or None if they can (or it is free).

    One rule for starting and for stopping: the money on hand must pay, at the
    burn rate of everything the user runs or has waiting plus this request, for
    `billing_min_balance_seconds` and at least one whole charging period —
    the period is what the stop rule (`billing.metering.protection`) looks
    at, so nothing that passes here is stopped for money before it has run.
    `waiting_self`: the id of a waiting instance being checked again (it is
    not counted twice)."""
    _unit, rate = metering.rate_for(
        session, shape.gpu_model, shape.gpu_count, shape.gpu_share_milli
    )
    if rate.micros == 0:
        return None
    user = session.get(UserModel, user_id)
    assert user is not None
    state = _summary(session, user, now, lock=True)
    others = state.burn_per_hour + waiting_burn_per_hour(session, user_id, waiting_self)
    seconds = max(settings.billing_min_balance_seconds, settings.billing_charge_period_s)
    total = Rate(rate.per_hour + others)
    needed = required_for_start(total, seconds)
    currency = settings.currency
    what = _priced_shape(shape, rate.per_hour, currency)
    if state.available < needed:
        return Message(
            _SHORT_BESIDE if others else _SHORT,
            available=format_amount(state.available),
            currency=currency,
            seconds=seconds,
            what=what,
            others=_per_hour(others, currency),
            needed=format_amount(needed),
        )
    period = settings.billing_charge_period_s
    if state.monthly_budget is not None:
        left = state.monthly_budget - state.month_spent
        if left < total.ceil_for(period):
            return Message(
                "this month's budget of {budget} {currency} has {left} {currency} left, less "
                "than {period} s of {what}; raise it on the Billing page or with "
                "`gpudock billing budget`",
                budget=format_amount(state.monthly_budget),
                currency=currency,
                left=format_amount(max(left, 0)),
                period=period,
                what=what,
            )
    return None


_SHORT = (
    "balance {available} {currency} does not cover {seconds} s of {what}: {needed} {currency} "
    "is needed; ask an admin for a top-up"
)
_SHORT_BESIDE = (
    "balance {available} {currency} does not cover {seconds} s of {what} beside what you run "
    "or have waiting ({others}): {needed} {currency} is needed; ask an admin for a top-up"
)


def _per_hour(micros: int, currency: str) -> Message:
    return Message("{amount} {currency}/h", amount=format_amount(micros), currency=currency)


def _priced_shape(shape: Shape, per_hour: int, currency: str) -> Message:
    rate = _per_hour(per_hour, currency)
    if not shape.gpu_count:
        return Message("a no-GPU instance at {rate}", rate=rate)
    return Message(
        "{count} × {model} at {rate}", count=shape.gpu_count, model=shape.gpu_model, rate=rate
    )


def waiting_burn_per_hour(session: Session, user_id: str, exclude: str | None) -> int:
    """What the user's instances that wait to start will burn once they run."""
    rows = session.execute(
        select(
            InstanceModel.gpu_model,
            InstanceModel.gpu_count,
            InstanceModel.gpu_share_milli,
            func.count(),
        )
        .where(
            InstanceModel.user_id == user_id,
            InstanceModel.desired_state == DesiredState.RUNNING,
            InstanceModel.status.in_(WAITING_TO_RUN),
            InstanceModel.id != (exclude or ""),
        )
        .group_by(InstanceModel.gpu_model, InstanceModel.gpu_count, InstanceModel.gpu_share_milli)
    ).all()
    total = 0
    for model, count, share, instances in rows:
        total += metering.rate_for(session, model, count, share)[1].per_hour * int(instances)
    return total


def check_funds(
    session: Session, settings: Settings, user_id: str, shape: Shape, now: datetime
) -> None:
    """PaymentRequired unless the user can run `shape` now (see `shortfall`)."""
    reason = shortfall(session, settings, user_id, shape, now)
    if reason is not None:
        raise PaymentRequired(reason)


def is_compute(row: metering.IntervalFields) -> bool:
    return row.kind == IntervalKind.COMPUTE.value
