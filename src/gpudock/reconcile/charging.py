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
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, select
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


@dataclass
class _User:
    """One user's open intervals with their instances, as read (or locked) now."""

    intervals: list[BillingIntervalModel] = field(default_factory=list)
    instances: dict[str, InstanceModel] = field(default_factory=dict)


def charge_pass(ctx: ServiceContext) -> PassReport:
    """One pass over every user with an open interval."""
    now = ctx.clock()
    with ctx.reader() as session:  # on SQLite a reader takes no write lock for the scan
        todo = _users_with_work(session, ctx.settings, now)
    report = PassReport(users=len(todo))
    for start in range(0, len(todo), USERS_PER_TRANSACTION):
        posted = report.postings
        with ctx.sessions.begin() as session:
            charge_batch(ctx, session, todo[start : start + USERS_PER_TRANSACTION], now, report)
        if report.postings > posted:
            ctx.crash_point("after_charge")  # tests: SIGKILL right after a charge committed
    if report.stopped:
        log.info("billing stopped %s", ", ".join(report.stopped))
        ctx.wake_reconciler()
    return report


def _open(session: Session, user_ids: list[str] | None, *, lock: bool) -> dict[str, _User]:
    """Open intervals and their instances per user; locked in the lifecycle's order."""
    mine: ColumnElement[bool] = BillingIntervalModel.closed_at.is_(None)
    if user_ids is not None:
        mine = mine & BillingIntervalModel.user_id.in_(user_ids)
    instances = select(InstanceModel).where(
        InstanceModel.id.in_(select(BillingIntervalModel.instance_id).where(mine))
    )
    intervals = select(BillingIntervalModel).where(mine)
    if lock:
        instances = instances.order_by(InstanceModel.id).with_for_update()
        intervals = intervals.order_by(BillingIntervalModel.id).with_for_update()
    else:  # the scan reads only what decides who has work: a fraction of each row's cost
        instances = instances.options(
            load_only(InstanceModel.status, InstanceModel.desired_state, raiseload=True)
        )
    by_id = {i.id: i for i in session.scalars(instances)}
    users: defaultdict[str, _User] = defaultdict(_User)
    for row in session.scalars(intervals.order_by(BillingIntervalModel.id)):
        instance = by_id.get(row.instance_id)
        if instance is None:  # opened after the first read (PostgreSQL reads per statement)
            continue  # the next pass has it
        users[row.user_id].intervals.append(row)
        users[row.user_id].instances[row.instance_id] = instance
    return dict(users)


def _period(settings: Settings, row: BillingIntervalModel, status: InstanceStatus) -> int | None:
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
    users = _open(session, None, lock=False)
    accounts = {
        a.user_id: a
        for a in session.scalars(
            select(BillingAccountModel).where(BillingAccountModel.user_id.in_(list(users)))
        )
    }
    todo = []
    for user_id, user in users.items():
        account = accounts.get(user_id)
        due = any(
            (period := _period(settings, r, user.instances[r.instance_id].status)) is not None
            and due_charge(metering.state_of(r), now, period) is not None
            for r in user.intervals
        )
        budgeted = account is not None and account.monthly_budget_micro is not None
        balance = account.balance_micro if account else 0
        if due or budgeted or _decide(settings, user, balance, None, now).action != Protection.OK:
            todo.append(user_id)
    return sorted(todo)


def charge_batch(
    ctx: ServiceContext, session: Session, user_ids: list[str], now: datetime, report: PassReport
) -> None:
    """Charge and protect these users in the caller's transaction (the pass
    runs one batch per transaction; a crash keeps all of a batch or none)."""
    users = _open(session, user_ids, lock=True)
    batch = []
    for user in users.values():
        for row in user.intervals:
            period = _period(ctx.settings, row, user.instances[row.instance_id].status)
            item = None if period is None else metering.charge_due(row, now, period)
            if item is not None:
                batch.append(item)
    report.postings += len(ledger.post_many(session, batch, now))
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
    running: tuple[BillingIntervalModel, ...] = ()


def _decide(
    settings: Settings, user: _User, balance: int, budget_left: int | None, now: datetime
) -> _Decision:
    """Warn, stop or leave alone the user's priced running instances."""
    running = tuple(
        r
        for r in user.intervals
        if billing.is_compute(r)
        and r.rate_micro > 0
        and user.instances[r.instance_id].status == S.RUNNING
        and user.instances[r.instance_id].desired_state == DesiredState.RUNNING
    )
    if not running:
        return _Decision(Protection.OK)
    states = [metering.state_of(r) for r in user.intervals]
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
    return _Decision(action, cause, available, burn_per_hour, running)


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
    decision = _decide(ctx.settings, user, balance, budget_left, now)
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
        for row in decision.running:
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
        newly = [row for row in decision.running if not row.warned]
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
