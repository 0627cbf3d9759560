"""Metering arithmetic: what an interval owes, when, under which key.

An *interval* is one stretch of chargeable time of one instance: `compute`
from the moment the runtime reports the container running to the moment it
reports it stopped (or the container is removed); `storage` while a stopped
instance keeps its disk. Its rate is frozen when it opens.

Charges tile the interval exactly. `charged_seconds` says how far the
postings have gone; the next charge always starts there, so its key
(`compute:<instance>:<interval>:<from second>`) names it uniquely: a replay,
a duplicate delivery or a stale copy computed before a crash collides with
the key already posted instead of charging twice. Amounts are cumulative
and floored — the first `s` seconds cost `s × rate // per` — so the pieces
always add up to exactly the whole interval's cost, whatever the pieces.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86_400
_SECOND = timedelta(seconds=1)


class IntervalKind(enum.StrEnum):
    COMPUTE = "compute"
    STORAGE = "storage"


@dataclass(frozen=True)
class Rate:
    """`micros` per `per_seconds` seconds (a price per hour, or per day)."""

    micros: int
    per_seconds: int = SECONDS_PER_HOUR

    def __post_init__(self) -> None:
        if self.micros < 0 or self.per_seconds <= 0:
            raise ValueError(f"bad rate {self.micros}/{self.per_seconds}s")

    def accrued(self, seconds: int) -> int:
        """What the first `seconds` seconds cost, floored to a micro-unit."""
        return seconds * self.micros // self.per_seconds

    def between(self, from_s: int, to_s: int) -> int:
        return self.accrued(to_s) - self.accrued(from_s)

    def ceil_for(self, seconds: int) -> int:
        """The cost of `seconds` seconds rounded up: what must be on hand to pay them."""
        return -(-seconds * self.micros // self.per_seconds)

    @property
    def per_hour(self) -> int:
        return self.micros * SECONDS_PER_HOUR // self.per_seconds


def compute_rate(unit_price: int, gpu_count: int, share: tuple[int, int] = (1, 1)) -> Rate:
    """Per-hour rate of an instance: the GPU price times the count, pro rata for a
    fractional share `(numerator, denominator)` of one GPU; a no-GPU price has count 1."""
    numerator, denominator = share
    return Rate(unit_price * max(gpu_count, 1) * numerator // denominator, SECONDS_PER_HOUR)


def storage_rate(price_per_gb_day: int, disk_gb: int) -> Rate:
    return Rate(price_per_gb_day * disk_gb, SECONDS_PER_DAY)


def elapsed_seconds(opened_at: datetime, at: datetime) -> int:
    """Whole seconds from `opened_at` to `at` (floored; never negative)."""
    return max(0, (at - opened_at) // _SECOND)


@dataclass(frozen=True)
class IntervalState:
    id: str
    instance_id: str
    user_id: str
    kind: IntervalKind
    opened_at: datetime
    rate: Rate
    charged_seconds: int = 0
    closed_at: datetime | None = None

    def seconds_until(self, at: datetime) -> int:
        end = at if self.closed_at is None else min(at, self.closed_at)
        return elapsed_seconds(self.opened_at, end)

    def unposted(self, now: datetime) -> int:
        """Accrued up to `now` but not posted yet (negative if posted ahead)."""
        return self.rate.between(self.charged_seconds, self.seconds_until(now))


@dataclass(frozen=True)
class Charge:
    """One posting-to-be for an interval: seconds [from_s, to_s), or a refund."""

    key: str
    interval_id: str
    instance_id: str
    user_id: str
    kind: IntervalKind
    from_s: int
    to_s: int
    amount: int
    at: datetime
    refund: bool = False
    closing: bool = False

    @property
    def seconds(self) -> int:
        return self.to_s - self.from_s


def charge_key(state: IntervalState, from_s: int) -> str:
    return f"{state.kind.value}:{state.instance_id}:{state.id}:{from_s}"


def refund_key(state: IntervalState) -> str:
    return f"refund:{state.instance_id}:{state.id}"


def _charge(state: IntervalState, to_s: int, *, closing: bool) -> Charge:
    return Charge(
        key=charge_key(state, state.charged_seconds),
        interval_id=state.id,
        instance_id=state.instance_id,
        user_id=state.user_id,
        kind=state.kind,
        from_s=state.charged_seconds,
        to_s=to_s,
        amount=state.rate.between(state.charged_seconds, to_s),
        at=state.opened_at + to_s * _SECOND,
        closing=closing,
    )


def due_charge(state: IntervalState, now: datetime, period_s: int) -> Charge | None:
    """The whole periods of an open interval that ended by `now` and are not posted."""
    if state.closed_at is not None:
        return None
    elapsed = elapsed_seconds(state.opened_at, now)
    target = elapsed - elapsed % period_s
    if target <= state.charged_seconds:
        return None
    return _charge(state, target, closing=False)


def closing_charge(state: IntervalState) -> Charge | None:
    """At close: the seconds not posted yet, or a refund of those posted beyond the end."""
    if state.closed_at is None:
        raise ValueError(f"interval {state.id} is still open")
    total = elapsed_seconds(state.opened_at, state.closed_at)
    if total > state.charged_seconds:
        return _charge(state, total, closing=True)
    if total < state.charged_seconds:
        return Charge(
            key=refund_key(state),
            interval_id=state.id,
            instance_id=state.instance_id,
            user_id=state.user_id,
            kind=state.kind,
            from_s=total,
            to_s=state.charged_seconds,
            amount=state.rate.between(total, state.charged_seconds),
            at=state.closed_at,
            refund=True,
            closing=True,
        )
    return None


def apply_charge(state: IntervalState, charge: Charge) -> IntervalState | None:
    """The interval after `charge`, or None if the charge is stale (the interval has
    moved on, or closed under a charge computed while it was open)."""
    if charge.interval_id != state.id or state.charged_seconds != (
        charge.to_s if charge.refund else charge.from_s
    ):
        return None
    if not charge.closing and state.closed_at is not None:
        return None
    return replace(state, charged_seconds=charge.from_s if charge.refund else charge.to_s)


# -- balance protection -------------------------------------------------------------
class Protection(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    STOP = "stop"


def protection(available: int, burn_per_period: int, burn_per_hour: int, warn_s: int) -> Protection:
    """What to do for a user whose `available` money (balance minus what has accrued
    but is not posted yet) pays for running instances.

    STOP when it cannot pay for one more charging period, so that — with the
    charging pass at least once a period — the balance never ends a period
    below zero by more than the seconds a stop itself takes. WARN when it pays
    for less than `warn_s` seconds at the current burn rate.
    """
    if burn_per_period <= 0 and burn_per_hour <= 0:
        return Protection.OK
    if available < burn_per_period:
        return Protection.STOP
    if available * SECONDS_PER_HOUR < burn_per_hour * warn_s:
        return Protection.WARN
    return Protection.OK


def required_for_start(rate: Rate, min_seconds: int) -> int:
    """The money a start needs on hand: `min_seconds` at the rate, rounded up."""
    return rate.ceil_for(min_seconds)


def runway_seconds(available: int, burn_per_hour: int) -> int | None:
    """How long `available` lasts at `burn_per_hour`; None when nothing burns."""
    if burn_per_hour <= 0:
        return None
    return max(0, available) * SECONDS_PER_HOUR // burn_per_hour
