"""Metering arithmetic: charges tile an interval exactly; keys make replays harmless."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudock.billing.ledger import DuplicateKeyConflict, Ledger, Posting, PostingKind
from gpudock.billing.meter import Meter
from gpudock.billing.metering import (
    IntervalKind,
    IntervalState,
    Protection,
    Rate,
    apply_charge,
    closing_charge,
    compute_rate,
    due_charge,
    elapsed_seconds,
    protection,
    required_for_start,
    storage_rate,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOUR = Rate(3_600_000)  # 3.6 per hour = 1000 µ per second


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def interval(rate: Rate = HOUR) -> IntervalState:
    return IntervalState("bi-1", "i-1", "u-1", IntervalKind.COMPUTE, T0, rate)


def test_rates() -> None:
    assert compute_rate(3_600_000, 2) == Rate(7_200_000)
    assert compute_rate(1_000_000, 0) == Rate(1_000_000)  # a no-GPU price counts once
    assert compute_rate(3_600_000, 1, share=(1, 4)) == Rate(900_000)  # a quarter GPU
    assert storage_rate(10_000, 50) == Rate(500_000, 86_400)
    assert HOUR.accrued(1) == 1000 and HOUR.per_hour == 3_600_000
    assert Rate(1, 3600).accrued(3599) == 0 and Rate(1, 3600).ceil_for(1) == 1
    assert required_for_start(HOUR, 3600) == 3_600_000


def test_elapsed_is_floored_whole_seconds() -> None:
    assert elapsed_seconds(T0, at(59.999)) == 59
    assert elapsed_seconds(T0, at(-5)) == 0


def test_due_charges_whole_periods_only_then_closing_takes_the_rest() -> None:
    state = interval()
    assert due_charge(state, at(59.9), 60) is None
    first = due_charge(state, at(130), 60)
    assert first is not None
    assert (first.from_s, first.to_s, first.amount) == (0, 120, 120_000)
    assert first.key == "compute:i-1:bi-1:0"
    state = apply_charge(state, first) or state
    assert due_charge(state, at(179), 60) is None
    closed = replace(state, closed_at=at(143.7))
    last = closing_charge(closed)
    assert last is not None and (last.from_s, last.to_s, last.key) == (
        120,
        143,
        "compute:i-1:bi-1:120",
    )


def test_a_charge_applies_once_and_a_stale_one_not_at_all() -> None:
    state = interval()
    charge = due_charge(state, at(60), 60)
    assert charge is not None
    moved = apply_charge(state, charge)
    assert moved is not None and moved.charged_seconds == 60
    assert apply_charge(moved, charge) is None  # the same delivery again
    stale = due_charge(state, at(120), 60)  # computed from the old state, delivered late
    assert stale is not None and apply_charge(moved, stale) is None
    closed = replace(moved, closed_at=at(200))
    late = due_charge(moved, at(180), 60)  # a tick computed while it was open
    assert late is not None and apply_charge(closed, late) is None


def test_seconds_charged_ahead_of_an_earlier_stop_are_refunded() -> None:
    state = replace(interval(), charged_seconds=120, closed_at=at(100.5))
    refund = closing_charge(state)
    assert refund is not None and refund.refund
    assert (refund.from_s, refund.to_s, refund.amount) == (100, 120, 20_000)
    assert refund.key == "refund:i-1:bi-1"
    after = apply_charge(state, refund)
    assert after is not None and after.charged_seconds == 100


@given(
    micros=st.integers(min_value=0, max_value=10**9),
    cuts=st.lists(st.integers(min_value=1, max_value=10**6), max_size=30),
)
def test_pieces_always_add_up_to_the_whole(micros: int, cuts: list[int]) -> None:
    rate = Rate(micros)
    points = [0, *sorted(set(cuts))]
    pieces = sum(rate.between(a, b) for a, b in itertools.pairwise(points))
    assert pieces == rate.accrued(points[-1])


def test_protection() -> None:
    assert protection(0, 0, 0, 600) == Protection.OK  # nothing burns
    assert protection(59_999, 60_000, 3_600_000, 600) == Protection.STOP
    assert protection(60_000, 60_000, 3_600_000, 600) == Protection.WARN
    assert protection(599_999, 60_000, 3_600_000, 600) == Protection.WARN
    assert protection(600_000, 60_000, 3_600_000, 600) == Protection.OK


def test_ledger_refuses_a_reused_key_with_other_contents() -> None:
    ledger = Ledger()
    posting = Posting("k", PostingKind.TOPUP, "external:topups", "user:u", 5, "u", T0)
    assert ledger.post(posting) and not ledger.post(posting)
    with pytest.raises(DuplicateKeyConflict):
        ledger.post(replace(posting, amount=6))
    with pytest.raises(ValueError, match="positive"):
        replace(posting, key="k2", amount=0)
    assert ledger.balance("user:u") == 5 and ledger.balance("external:topups") == -5
    assert ledger.totals() == (5, 5)


def test_meter_open_and_close_are_idempotent() -> None:
    meter = Meter(period_s=60)
    meter.topup("t", "u", 10_000_000, T0)
    first = meter.open("bi-1", "i-1", "u", at(0), HOUR)
    assert meter.open("bi-2", "i-1", "u", at(5), HOUR) == first  # duplicate delivery
    assert len(meter.tick(at(61))) == 1
    [last] = meter.close("i-1", at(90.2))
    assert (last.seconds, last.amount) == (30, 30_000)
    assert meter.close("i-1", at(95)) == []  # duplicate delivery
    assert meter.ledger.balance("user:u") == 10_000_000 - 90_000
