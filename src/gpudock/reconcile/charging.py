"""The charging pass: post what open intervals owe, then protect each balance.

The reconciler runs it every `GPUDOCK_BILLING_TICK_S`. A read-only scan
picks the users with work: a charging period that ended, or money that runs
low. Their rows are then handled in transactions of a few users each, which
lock in the lifecycle's order — instances, then intervals, then accounts
(sorted by id) — post the whole periods that ended, and decide with
`billing.metering.protection`:

- warn: an event on each running instance, once per interval, when the money
  left lasts less than `GPUDOCK_BILLING_LOW_BALANCE_WARN_S` at the burn rate;
- stop: when it cannot pay for the next charging period (or the monthly
  budget is reached), the priced running instances get `desired_state=stopped`
  and go through the ordinary stop — GPUs released, container and data volume
  kept. Nothing is ever deleted for money.

Both tell the owner (`balance.low`, `instance.stopped`) through the outbox, in
the same transaction.

A crash anywhere is harmless: postings and interval positions commit
together, and the next pass starts from what was committed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, load_only

from gpudock.billing.metering import IntervalKind, Protection, due_charge, protection
from gpudock.billing.money import format_amount
from gpudock.db.models import (
    BillingAccountModel,
    BillingIntervalModel,
    DesiredState,
    InstanceModel,
    InstanceStatus,
)
from gpudock.messages import Message
from gpudock.services.billing import balances as billing
from gpudock.services.billing import intervals as metering
from gpudock.services.billing import postings as ledger
from gpudock.services.billing.intervals import IntervalFields
from gpudock.services.context import ServiceContext
from gpudock.services.instances.status import record_instance_note, request_stop
from gpudock.services.notifications.outbox import notify
from gpudock.settings import Settings

log = logging.getLogger(__name__)
S = InstanceStatus
USERS_PER_TRANSACTION = 10  # short write transactions: placement commits between them


@dataclass
class PassReport:
    users: int = 0
    postings: int = 0
    warned: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


class _InstanceFields(Protocol):
    @property
    def status(self) -> InstanceStatus: ...
    @property
    def desired_state(self) -> DesiredState: ...


class _ScannedInterval(NamedTuple):
    """An open interval as the scan reads it: columns, not an ORM object (the
    scan reads every open interval each tick; objects cost it ten times more)."""

    id: str
    instance_id: str
    user_id: str
    kind: str
    opened_at: datetime
    closed_at: datetime | None
    rate_micro: int
    rate_per_s: int
    charged_seconds: int
    warned: bool


class _ScannedInstance(NamedTuple):
    status: InstanceStatus
    desired_state: DesiredState


@dataclass
class _User:
    """One user's open intervals with their instances, as locked now."""

    intervals: list[BillingIntervalModel] = field(default_factory=list)
    instances: dict[str, InstanceModel] = field(default_factory=dict)


@dataclass
class _Scanned:
    """One user's open intervals with their instances' states, as read by the scan."""

    intervals: list[_ScannedInterval] = field(default_factory=list)
    instances: dict[str, _ScannedInstance] = field(default_factory=dict)


def charge_pass(ctx: ServiceContext) -> PassReport:
    """One pass over every user with an open interval."""
    now = ctx.clock()
    with ctx.reader() as session:  # on SQLite a reader takes no write lock for the scan
        todo = _users_with_work(session, ctx.settings, now)
    report = PassReport(users=len(todo))
    for start in range(0, len(todo), USERS_PER_TRANSACTION):
        ctx.foreground.step_aside()
        posted = report.postings
        with ctx.sessions.begin() as session:
            charge_batch(ctx, session, todo[start : start + USERS_PER_TRANSACTION], now, report)
        if report.postings > posted:
            ctx.crash_point("after_charge")  # tests: SIGKILL right after a charge committed
    if report.stopped:
        log.info("billing stopped %s", ", ".join(report.stopped))
        ctx.wake_reconciler()
    return report


def _locked(session: Session, user_ids: list[str]) -> dict[str, _User]:
    """Open intervals and their instances per user, locked in the lifecycle's order."""
    mine = BillingIntervalModel.closed_at.is_(None) & BillingIntervalModel.user_id.in_(user_ids)
    instances = (
        select(InstanceModel)
        .where(InstanceModel.id.in_(select(BillingIntervalModel.instance_id).where(mine)))
        .order_by(InstanceModel.id)
        .with_for_update()
        # What deciding and describing a charge read (`intervals.describe` takes a
        # share from the instance); a stop or a warning loads the rest of its row
        # when it needs it (rare), instead of every pass decoding every row's JSON.
        .options(
            load_only(
                InstanceModel.status, InstanceModel.desired_state, InstanceModel.gpu_share_milli
            )
        )
    )
    intervals = select(BillingIntervalModel).where(mine)
    by_id = {i.id: i for i in session.scalars(instances)}
    users: defaultdict[str, _User] = defaultdict(_User)
    for row in session.scalars(intervals.order_by(BillingIntervalModel.id).with_for_update()):
        instance = by_id.get(row.instance_id)
        if instance is None:  # opened after the first read (PostgreSQL reads per statement)
            continue  # the next pass has it
        users[row.user_id].intervals.append(row)
        users[row.user_id].instances[row.instance_id] = instance
    return dict(users)


def _scan(session: Session) -> dict[str, _Scanned]:
    """Every open interval with its instance's state, per user, in one read."""
    B = BillingIntervalModel
    rows = session.execute(
        select(
            B.id,
            B.instance_id,
            B.user_id,
            B.kind,
            B.opened_at,
            B.closed_at,
            B.rate_micro,
            B.rate_per_s,
            B.charged_seconds,
            B.warned,
            InstanceModel.status,
            InstanceModel.desired_state,
        )
        .join(InstanceModel, InstanceModel.id == B.instance_id)
        .where(B.closed_at.is_(None))
        .order_by(B.id)
    )
    users: defaultdict[str, _Scanned] = defaultdict(_Scanned)
    for row in rows:
        interval = _ScannedInterval(*row[:10])
        user = users[interval.user_id]
        user.intervals.append(interval)
        user.instances[interval.instance_id] = _ScannedInstance(row[10], row[11])
    return dict(users)


def _period(settings: Settings, row: IntervalFields, status: InstanceStatus) -> int | None:
    """The charging period of an interval whose instance is in `status`, or None
    when it is not charged now (stopping, or free: the closing charge settles it)."""
    if row.rate_micro == 0:
        return None
    if row.kind == IntervalKind.COMPUTE.value and status == S.RUNNING:
        return settings.billing_charge_period_s
    if row.kind == IntervalKind.STORAGE.value and status in metering.STORAGE_OPEN:
        return settings.billing_storage_period_s
    return None


def _users_with_work(session: Session, settings: Settings, now: datetime) -> list[str]:
    users = _scan(session)
    A = BillingAccountModel
    accounts = {  # columns, not objects: read for every user with an open interval
        user_id: (balance, budget)
        for user_id, balance, budget in session.execute(
            select(A.user_id, A.balance_micro, A.monthly_budget_micro).where(
                A.user_id.in_(list(users))
            )
        )
    }
    todo = []
    for user_id, user in users.items():
        balance, budget = accounts.get(user_id, (0, None))
        due = any(
            (period := _period(settings, r, user.instances[r.instance_id].status)) is not None
            and due_charge(metering.state_of(r), now, period) is not None
            for r in user.intervals
        )
        budgeted = budget is not None
        if (
            due
            or budgeted
            or _decide(settings, user.intervals, user.instances, balance, None, now).action
            != Protection.OK
        ):
            todo.append(user_id)
    return sorted(todo)


def charge_batch(
    ctx: ServiceContext, session: Session, user_ids: list[str], now: datetime, report: PassReport
) -> None:
    """Charge and protect these users in the caller's transaction (the pass
    runs one batch per transaction; a crash keeps all of a batch or none)."""
    users = _locked(session, user_ids)
    batch = []
    for user in users.values():
        for row in user.intervals:
            period = _period(ctx.settings, row, user.instances[row.instance_id].status)
            item = None if period is None else metering.charge_due(row, now, period)
            if item is not None:
                batch.append(item)
    report.postings += ledger.post_many(session, batch, now)
    accounts = {
        a.user_id: a
        for a in session.scalars(
            select(BillingAccountModel)
            .where(BillingAccountModel.user_id.in_(list(users)))
            .execution_options(populate_existing=True)
        )
    }
    for user_id, user in users.items():
        _protect(ctx, session, user_id, user, accounts.get(user_id), now, report)


@dataclass(frozen=True)
class _Decision:
    action: Protection
    cause: str = "balance"
    available: int = 0
    burn_per_hour: int = 0
    running: tuple[str, ...] = ()  # the ids of the intervals it acts on


def _decide(
    settings: Settings,
    intervals: Sequence[IntervalFields],
    instances: Mapping[str, _InstanceFields],
    balance: int,
    budget_left: int | None,
    now: datetime,
) -> _Decision:
    """Warn, stop or leave alone the user's priced running instances."""
    running = [
        r
        for r in intervals
        if billing.is_compute(r)
        and r.rate_micro > 0
        and instances[r.instance_id].status == S.RUNNING
        and instances[r.instance_id].desired_state == DesiredState.RUNNING
    ]
    if not running:
        return _Decision(Protection.OK)
    states = [metering.state_of(r) for r in intervals]
    unposted = metering.unposted(states, now)
    burn_per_period = sum(s.rate.ceil_for(settings.billing_charge_period_s) for s in states)
    burn_per_hour = sum(s.rate.per_hour for s in states)
    available, cause = balance - unposted, "balance"
    if budget_left is not None and budget_left - unposted < available:
        available, cause = budget_left - unposted, "monthly budget"
    action = protection(
        available, burn_per_period, burn_per_hour, settings.billing_low_balance_warn_s
    )
    if action == Protection.WARN and all(r.warned for r in running):
        action = Protection.OK  # said once per interval is enough
    return _Decision(action, cause, available, burn_per_hour, tuple(r.id for r in running))


# What a stop or a warning says, by what ran short; a spent budget is not fixed by a
# top-up, so it says what is. The prefix is metering.BILLING_STOP_PREFIX.
_STOPPED = {
    "balance": (
        "billing: stopped: the balance left ({money}) does not cover the next {period} s at "
        "{rate}; top up (ask an admin) and start again"
    ),
    "monthly budget": (
        "billing: stopped: the monthly budget left ({money}) does not cover the next {period} s "
        "at {rate}; raise or clear the monthly budget (console: Billing; CLI: `gpudock billing "
        "budget AMOUNT` or `--clear`) and start again"
    ),
}
_LOW = {
    "balance": (
        "billing: low balance: {money} left, about {minutes} min at {rate}; running instances "
        "stop (data kept) when it runs out"
    ),
    "monthly budget": (
        "billing: low monthly budget: {money} left, about {minutes} min at {rate}; running "
        "instances stop (data kept) when it runs out"
    ),
}


def _protect(
    ctx: ServiceContext,
    session: Session,
    user_id: str,
    user: _User,
    account: BillingAccountModel | None,
    now: datetime,
    report: PassReport,
) -> None:
    balance = account.balance_micro if account else 0
    budget_left = None
    if account is not None and account.monthly_budget_micro is not None:
        budget_left = account.monthly_budget_micro - billing.month_spent(session, user_id, now)
    decision = _decide(ctx.settings, user.intervals, user.instances, balance, budget_left, now)
    running = [row for row in user.intervals if row.id in decision.running]
    currency = ctx.settings.currency
    money = f"{format_amount(decision.available)} {currency}"
    rate = Message(
        "{amount} {currency}/h", amount=format_amount(decision.burn_per_hour), currency=currency
    )
    if decision.action == Protection.STOP:
        reason = Message(
            _STOPPED[decision.cause],
            money=money,
            period=ctx.settings.billing_charge_period_s,
            rate=rate,
        )
        for row in running:
            instance = user.instances[row.instance_id]
            if request_stop(session, instance, reason, now):
                report.stopped.append(row.instance_id)
                notify(
                    session,
                    user_id,
                    "instance.stopped",
                    f"instance {instance.name} {reason}; data kept",
                    now,
                    instance=instance,
                    data={"cause": "billing", "reason": reason},
                )
    elif decision.action == Protection.WARN:
        minutes = decision.available * 60 // max(decision.burn_per_hour, 1)
        message = Message(_LOW[decision.cause], money=money, minutes=minutes, rate=rate)
        newly = [row for row in running if not row.warned]
        for row in newly:
            row.warned = True
            record_instance_note(session, user.instances[row.instance_id], message, now)
            report.warned.append(row.instance_id)
        if newly:  # one notification per user and warning, not one per instance
            notify(
                session,
                user_id,
                "balance.low",
                message,
                now,
                data={
                    "available": format_amount(decision.available),
                    "currency": currency,
                    "minutes_left": minutes,
                    "instances": [row.instance_id for row in newly],
                },
            )
