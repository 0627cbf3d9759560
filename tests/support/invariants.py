"""What must hold in a database after any load, however many servers shared it:
no GPU held twice, no second of an interval charged twice, balances that add up.

    problems = invariants.check(database_url)   # [] when all holds

The database already refuses a GPU allocated twice whole (its allocation row is
keyed by the GPU) and a charge posted twice under one idempotency key; this
reads what those keys cannot see: a GPU held whole and in shares at once, or
shares past the card, an allocation whose instance is not placed on that GPU's
host, an interval's charges that overlap (a second paid twice), and cached
balances that differ from the postings.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.billing.ledger import PostingKind
from gpudock.db.engine import make_engine, make_sessionmaker
from gpudock.db.models import (
    BillingPostingModel,
    GpuAllocationModel,
    GpuDeviceModel,
    GpuShareModel,
    InstanceModel,
)
from gpudock.scheduler.placement import WHOLE_MILLI
from gpudock.services.billing import postings as ledger

MAX_LISTED = 5  # problems named per kind; the count says the rest


def check(database_url: str) -> list[str]:
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return [
                *gpus_held_once(session),
                *charged_once(session),
                *(f"balance off: {k} {v}" for k, v in ledger.verify_balances(session).items()),
                *(
                    f"month total off: {k} {v}"
                    for k, v in ledger.verify_month_totals(session).items()
                ),
            ]
    finally:
        engine.dispose()


def gpus_held_once(session: Session) -> list[str]:
    whole = set(session.scalars(select(GpuAllocationModel.gpu_id)))
    shares = session.execute(
        select(GpuShareModel.gpu_id, func.sum(GpuShareModel.milli)).group_by(GpuShareModel.gpu_id)
    ).all()
    problems = [f"GPU {gpu} held whole and in shares" for gpu, _milli in shares if gpu in whole]
    problems += [
        f"GPU {gpu} shared past the card: {milli}" for gpu, milli in shares if milli > WHOLE_MILLI
    ]
    misplaced = session.execute(
        select(GpuAllocationModel.gpu_id, InstanceModel.id)
        .join(InstanceModel, InstanceModel.id == GpuAllocationModel.instance_id)
        .join(GpuDeviceModel, GpuDeviceModel.id == GpuAllocationModel.gpu_id)
        .where(
            (InstanceModel.placed.is_(False)) | (InstanceModel.host_id != GpuDeviceModel.host_id)
        )
    ).all()
    problems += [
        f"GPU {gpu} allocated to {instance}, not placed on its host" for gpu, instance in misplaced
    ]
    return _capped(problems)


def charged_once(session: Session) -> list[str]:
    """Each interval's charges cover disjoint spans of it, and so do its refunds
    (a refund gives back seconds charged ahead of a stop: it overlaps charges)."""
    spans: defaultdict[tuple[str, bool], list[tuple[datetime, datetime]]] = defaultdict(list)
    rows = session.execute(
        select(
            BillingPostingModel.interval_id,
            BillingPostingModel.kind,
            BillingPostingModel.from_at,
            BillingPostingModel.to_at,
        ).where(
            BillingPostingModel.interval_id.is_not(None), BillingPostingModel.from_at.is_not(None)
        )
    )
    for interval_id, kind, start, end in rows:
        spans[(interval_id, kind == PostingKind.REFUND.value)].append((start, end))
    problems = []
    for (interval_id, refund), pieces in spans.items():
        pieces.sort()
        for (_a, end), (start, _b) in itertools.pairwise(pieces):
            if start < end:
                what = "refunded" if refund else "charged"
                problems.append(f"interval {interval_id} {what} twice from {start} to {end}")
    return _capped(problems)


def _capped(problems: list[str]) -> list[str]:
    if len(problems) <= MAX_LISTED:
        return problems
    return [*problems[:MAX_LISTED], f"… and {len(problems) - MAX_LISTED} more"]
