"""Metering intervals in the database, driven by instance status changes.

`on_transition()` is called by `instances.switch_instance_status()` — the one
writer of an instance's status — inside the same transaction, with the
status change's own timestamp. The lifecycle passes the runtime's timestamps
there: the container's `started_at` when it is marked running, its
`finished_at` when it is marked stopped. So an interval opens and closes
exactly when the runtime says the container ran, and atomically with the
status change: a crash either keeps both or neither.

    compute interval  open on → running; stays open through stopping and
                      deleting (the container still runs); closes on any
                      other status (stopped, starting after a restart,
                      creating after a crash, failed, deleted)
    storage interval  open while stopped or failed with a disk; closes on
                      starting or deleting

Charges: `charge_due()` and the closing charge use the pure functions of
`gpudock.billing.metering` on the row, which the caller has locked.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session, object_session

from gpudock.billing.ledger import Posting
from gpudock.billing.meter import posting_for
from gpudock.billing.metering import (
    Charge,
    IntervalKind,
    IntervalState,
    Rate,
    apply_charge,
    closing_charge,
    compute_rate,
    due_charge,
    storage_rate,
)
from gpudock.billing.money import format_amount
from gpudock.db.models import (
    BillingIntervalModel,
    BillingPriceModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.messages import Message
from gpudock.services.billing import postings as ledger
from gpudock.services.billing.postings import PostingDetails

S = InstanceStatus
COMPUTE_OPEN = frozenset({S.RUNNING, S.STOPPING, S.DELETING})
STORAGE_OPEN = frozenset({S.STOPPED, S.FAILED})
BILLING_STOP_PREFIX = "billing: "
NO_GPU_PRICE = "no_gpu"
DISK_PRICE = "disk"


SHARE_DENOMINATOR = 1000  # shares are in milli-GPU


def gpu_price_key(model: str) -> str:
    return f"gpu:{model}"


def price_key_for(gpu_model: str | None, gpu_count: int) -> str:
    return gpu_price_key(gpu_model) if gpu_count > 0 and gpu_model else NO_GPU_PRICE


def unit_price(session: Session, key: str) -> int:
    row = session.get(BillingPriceModel, key)
    return row.amount_micro if row is not None else 0


def gpu_prices(session: Session) -> dict[str, int]:
    """{GPU model: price per GPU-hour in micro-units} for every priced model."""
    rows = session.scalars(select(BillingPriceModel).where(BillingPriceModel.kind == "gpu"))
    return {row.gpu_model: row.amount_micro for row in rows if row.gpu_model}


def rate_for(
    session: Session, gpu_model: str | None, gpu_count: int, share_milli: int | None = None
) -> tuple[int, Rate]:
    """(unit price, per-hour rate) an instance of this shape would run at now:
    a share of one GPU pays its fraction of the GPU-hour price."""
    unit = unit_price(session, price_key_for(gpu_model, gpu_count))
    share = (share_milli, SHARE_DENOMINATOR) if share_milli is not None else (1, 1)
    return unit, compute_rate(unit, gpu_count, share)


# -- the status hook ------------------------------------------------------------------
def on_transition(
    session: Session,
    instance: InstanceModel,
    old: InstanceStatus | None,
    new: InstanceStatus,
    at: datetime,
) -> None:
    """Open or close the instance's intervals for a status change (same transaction)."""
    if old is None or old == new:
        return
    if new == S.RUNNING:
        _open_compute(session, instance, at)
    elif new not in COMPUTE_OPEN:
        close(session, instance.id, IntervalKind.COMPUTE, at)
    if new in STORAGE_OPEN and instance.container_id is not None:
        _open_storage(session, instance, at)
    elif new not in STORAGE_OPEN:
        close(session, instance.id, IntervalKind.STORAGE, at)


def open_interval(
    session: Session, instance_id: str, kind: IntervalKind
) -> BillingIntervalModel | None:
    return session.scalar(
        select(BillingIntervalModel)
        .where(
            BillingIntervalModel.instance_id == instance_id,
            BillingIntervalModel.kind == kind.value,
            BillingIntervalModel.closed_at.is_(None),
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def _open_compute(session: Session, instance: InstanceModel, at: datetime) -> None:
    if open_interval(session, instance.id, IntervalKind.COMPUTE) is not None:
        return  # a duplicate delivery: the interval is open already
    unit, rate = rate_for(session, instance.gpu_model, instance.gpu_count, instance.gpu_share_milli)
    _insert(session, instance, IntervalKind.COMPUTE, _after_last(session, instance, at), unit, rate)


def _after_last(session: Session, instance: InstanceModel, at: datetime) -> datetime:
    """No two compute intervals of one instance overlap: one opens no earlier than
    the last one closed. A container that kept running while its host was lost
    says it started before that interval's close (the last heartbeat)."""
    last = session.scalar(
        select(func.max(BillingIntervalModel.closed_at)).where(
            BillingIntervalModel.instance_id == instance.id,
            BillingIntervalModel.kind == IntervalKind.COMPUTE.value,
        )
    )
    return at if last is None else max(at, last)


def _open_storage(session: Session, instance: InstanceModel, at: datetime) -> None:
    if open_interval(session, instance.id, IntervalKind.STORAGE) is not None:
        return
    unit = unit_price(session, DISK_PRICE)
    _insert(session, instance, IntervalKind.STORAGE, at, unit, storage_rate(unit, instance.disk_gb))


def _insert(
    session: Session,
    instance: InstanceModel,
    kind: IntervalKind,
    at: datetime,
    unit: int,
    rate: Rate,
) -> None:
    session.add(
        BillingIntervalModel(
            id="bi-" + secrets.token_hex(6),
            instance_id=instance.id,
            user_id=instance.user_id,
            kind=kind.value,
            opened_at=at,
            gpu_model=instance.gpu_model if instance.gpu_count else None,
            gpu_count=instance.gpu_count,
            disk_gb=instance.disk_gb,
            unit_price_micro=unit,
            rate_micro=rate.micros,
            rate_per_s=rate.per_seconds,
            charged_seconds=0,
            warned=False,
        )
    )
    session.flush()


def close(session: Session, instance_id: str, kind: IntervalKind, at: datetime) -> int:
    """Close the open interval at `at` and settle it; returns the postings made (0 or 1)."""
    row = open_interval(session, instance_id, kind)
    if row is None:
        return 0
    row.closed_at = max(at, row.opened_at)
    charge = closing_charge(state_of(row))
    item = None if charge is None else advance(row, charge)
    return ledger.post_many(session, [item] if item else [], at)


# -- charges ----------------------------------------------------------------------------
class IntervalFields(Protocol):
    """What metering reads of an interval: its ORM row, or the same columns
    read as a tuple by a scan that locks nothing."""

    @property
    def id(self) -> str: ...
    @property
    def instance_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def opened_at(self) -> datetime: ...
    @property
    def closed_at(self) -> datetime | None: ...
    @property
    def rate_micro(self) -> int: ...
    @property
    def rate_per_s(self) -> int: ...
    @property
    def charged_seconds(self) -> int: ...
    @property
    def warned(self) -> bool: ...


def state_of(row: IntervalFields) -> IntervalState:
    return IntervalState(
        id=row.id,
        instance_id=row.instance_id,
        user_id=row.user_id,
        kind=IntervalKind(row.kind),
        opened_at=row.opened_at,
        rate=Rate(row.rate_micro, row.rate_per_s),
        charged_seconds=row.charged_seconds,
        closed_at=row.closed_at,
    )


def charge_due(
    row: BillingIntervalModel, now: datetime, period_s: int
) -> tuple[Posting, PostingDetails] | None:
    """Move a locked open interval over the whole periods that ended by `now`;
    return what to post for them (the caller posts, in the same transaction)."""
    charge = due_charge(state_of(row), now, period_s)
    return None if charge is None else advance(row, charge)


def advance(row: BillingIntervalModel, charge: Charge) -> tuple[Posting, PostingDetails] | None:
    """Apply the charge to the row; the posting it needs, or None (stale, or free time)."""
    moved = apply_charge(state_of(row), charge)
    if moved is None:
        return None
    row.charged_seconds = moved.charged_seconds
    if charge.amount == 0:
        return None  # free time: the interval moves on, nothing to post
    return posting_for(charge), details_for(row, charge)


def details_for(row: BillingIntervalModel, charge: Charge) -> PostingDetails:
    return PostingDetails(
        from_at=row.opened_at + timedelta(seconds=charge.from_s),
        to_at=row.opened_at + timedelta(seconds=charge.to_s),
        gpu_model=row.gpu_model,
        gpu_count=row.gpu_count,
        rate_micro=row.rate_micro,
        rate_per_s=row.rate_per_s,
        description=describe(row, charge.seconds, refund=charge.refund),
    )


def describe(row: BillingIntervalModel, seconds: int, *, refund: bool = False) -> str:
    """'60 s × 2 × A100-80GB at 7.2/h' — amounts are shown with the currency elsewhere."""
    rate = format_amount(row.rate_micro)
    if row.kind == IntervalKind.STORAGE.value:
        text = Message(
            "{seconds} s × {disk} GB stopped disk at {rate}/day",
            seconds=seconds,
            disk=row.disk_gb,
            rate=rate,
        )
    elif not row.gpu_count:
        text = Message("{seconds} s × no-GPU at {rate}/h", seconds=seconds, rate=rate)
    else:
        text = Message(
            "{seconds} s × {count} × {model} at {rate}/h",
            seconds=seconds,
            count=_gpu_count(row),
            model=row.gpu_model,
            rate=rate,
        )
    return Message("refund of {charge} charged ahead of the stop", charge=text) if refund else text


def _gpu_count(row: BillingIntervalModel) -> str:
    """'2', or '0.5' for a share (fixed when the instance is created, so the
    instance's is the interval's)."""
    session = object_session(row)
    instance = session.get(InstanceModel, row.instance_id) if session is not None else None
    if instance is not None and instance.gpu_share_milli is not None:
        share = Decimal(instance.gpu_share_milli) / SHARE_DENOMINATOR
        return str(share.normalize())
    return str(row.gpu_count)


def unposted(states: list[IntervalState], now: datetime) -> int:
    return sum(s.unposted(now) for s in states)
