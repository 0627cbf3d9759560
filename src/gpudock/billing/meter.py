"""The metering engine in memory: the decisions `services.metering` and
`services.charging` make over the database, over plain dictionaries.

It exists for the property-based tests and the benchmark, which drive it
through starts, stops, ticks, duplicate and reordered deliveries, crashes,
top-ups and price changes, and check the ledger's invariants; the services
call the very same functions (`due_charge`, `closing_charge`, `apply_charge`,
`protection`) and let the database's unique key and row locks play the part
of the dictionaries here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from gpudock.billing.ledger import (
    EXTERNAL_TOPUPS,
    REVENUE_COMPUTE,
    REVENUE_STORAGE,
    Ledger,
    Posting,
    PostingKind,
    user_account,
)
from gpudock.billing.metering import (
    Charge,
    IntervalKind,
    IntervalState,
    Protection,
    Rate,
    apply_charge,
    closing_charge,
    due_charge,
    protection,
)


def posting_for(charge: Charge) -> Posting:
    """The ledger posting that records a charge (or its refund)."""
    revenue = REVENUE_COMPUTE if charge.kind == IntervalKind.COMPUTE else REVENUE_STORAGE
    wallet = user_account(charge.user_id)
    if charge.refund:
        kind, debit, credit = PostingKind.REFUND, revenue, wallet
    else:
        kind = PostingKind(charge.kind.value)
        debit, credit = wallet, revenue
    return Posting(
        key=charge.key,
        kind=kind,
        debit=debit,
        credit=credit,
        amount=charge.amount,
        user_id=charge.user_id,
        at=charge.at,
        instance_id=charge.instance_id,
        interval_id=charge.interval_id,
        seconds=charge.seconds,
    )


@dataclass
class UserView:
    balance: int
    unposted: int
    burn_per_period: int
    burn_per_hour: int

    @property
    def available(self) -> int:
        return self.balance - self.unposted


class Meter:
    """Intervals and a ledger; every operation is idempotent."""

    def __init__(self, period_s: int = 60) -> None:
        self.period_s = period_s
        self.ledger = Ledger()
        self.intervals: dict[str, IntervalState] = {}
        self._open: dict[tuple[str, IntervalKind], str] = {}

    # -- intervals --------------------------------------------------------------
    def open(
        self,
        interval_id: str,
        instance_id: str,
        user_id: str,
        at: datetime,
        rate: Rate,
        kind: IntervalKind = IntervalKind.COMPUTE,
    ) -> IntervalState:
        """Open an interval; if one is open for the instance already, return that one."""
        current = self._open.get((instance_id, kind))
        if current is not None:
            return self.intervals[current]
        state = IntervalState(interval_id, instance_id, user_id, kind, at, rate)
        self.intervals[interval_id] = state
        self._open[(instance_id, kind)] = interval_id
        return state

    def close(
        self, instance_id: str, at: datetime, kind: IntervalKind = IntervalKind.COMPUTE
    ) -> list[Posting]:
        """Close the instance's open interval at `at` and settle it; no-op if none is open."""
        interval_id = self._open.pop((instance_id, kind), None)
        if interval_id is None:
            return []
        state = self.intervals[interval_id]
        state = replace(state, closed_at=max(at, state.opened_at))
        self.intervals[interval_id] = state
        charge = closing_charge(state)
        posted = self.apply(charge) if charge is not None else None
        return [posted] if posted is not None else []

    def open_intervals(self) -> list[IntervalState]:
        return [self.intervals[i] for i in self._open.values()]

    # -- charging ---------------------------------------------------------------
    def due(self, now: datetime) -> list[Charge]:
        charges = (due_charge(s, now, self.period_s) for s in self.open_intervals())
        return [c for c in charges if c is not None]

    def apply(self, charge: Charge) -> Posting | None:
        """Apply one charge if it is not stale; post it unless its amount is zero.

        Returns the posting made, or None (stale, duplicate, or nothing to pay)."""
        state = self.intervals.get(charge.interval_id)
        if state is None:
            return None
        moved = apply_charge(state, charge)
        if moved is None:
            return None
        self.intervals[charge.interval_id] = moved
        if charge.amount == 0:
            return None
        posting = posting_for(charge)
        return posting if self.ledger.post(posting) else None

    def tick(self, now: datetime) -> list[Posting]:
        posted = (self.apply(charge) for charge in self.due(now))
        return [p for p in posted if p is not None]

    # -- money ------------------------------------------------------------------
    def topup(self, key: str, user_id: str, amount: int, at: datetime) -> Posting:
        """Credit a wallet; a replayed key returns the first posting unchanged."""
        posting = Posting(
            key=key,
            kind=PostingKind.TOPUP,
            debit=EXTERNAL_TOPUPS,
            credit=user_account(user_id),
            amount=amount,
            user_id=user_id,
            at=at,
        )
        seen = self.ledger.get(key)
        if seen is not None:
            return seen
        self.ledger.post(posting)
        return posting

    def view(self, user_id: str, now: datetime) -> UserView:
        mine = [s for s in self.open_intervals() if s.user_id == user_id]
        return UserView(
            balance=self.ledger.balance(user_account(user_id)),
            unposted=sum(s.unposted(now) for s in mine),
            burn_per_period=sum(s.rate.ceil_for(self.period_s) for s in mine),
            burn_per_hour=sum(s.rate.per_hour for s in mine),
        )

    def protect(self, user_id: str, now: datetime, warn_s: int) -> Protection:
        view = self.view(user_id, now)
        return protection(view.available, view.burn_per_period, view.burn_per_hour, warn_s)
