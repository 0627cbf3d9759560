"""Property-based: the metering engine under starts, stops, ticks, duplicate and
reordered deliveries, crashes mid-pass, top-ups and price changes.

Invariants after every step:
- Σ debits = Σ credits, and all balances sum to zero;
- no idempotency key is posted twice; each interval's charges tile it;
- billed seconds = running seconds, and money = seconds × the rate frozen at start;
- no balance below zero by more than one charging period (with the start
  check covering at least one period, never below zero at all).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpudock.billing.ledger import PostingKind, user_account
from gpudock.billing.meter import Meter
from gpudock.billing.metering import (
    Charge,
    Protection,
    Rate,
    compute_rate,
    elapsed_seconds,
    required_for_start,
)

PERIOD = 60
T0 = datetime(2026, 11, 29, tzinfo=UTC)
USERS = ("u1", "u2")
MODELS = {"A": 1, "B": 2}  # model → GPUs per instance
MAX_PRICE = 20_000_000  # per GPU-hour, the strategies' upper bound
INSTANCES = {"i1": ("u1", "A"), "i2": ("u1", "B"), "i3": ("u2", "A"), "i4": ("u2", "B")}
prices = st.integers(min_value=0, max_value=MAX_PRICE)


@dataclass
class Run:
    interval_id: str
    start: datetime
    end: datetime | None = None
    rate: Rate | None = None


class MeteringMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.meter = Meter(period_s=PERIOD)
        self.now = T0
        self.prices = {"A": 3_600_000, "B": 7_200_000}
        self.runs: dict[str, list[Run]] = {i: [] for i in INSTANCES}
        self.pending: list[Charge] = []
        self.topups: dict[str, tuple[str, int]] = {}
        self.credited: dict[str, int] = dict.fromkeys(USERS, 0)
        self.min_seconds = 3600
        self.ids = 0

    @initialize(min_seconds=st.sampled_from([0, 30, 60, 3600]))
    def configure(self, min_seconds: int) -> None:
        self.min_seconds = min_seconds

    def _running(self, instance: str) -> bool:
        runs = self.runs[instance]
        return bool(runs) and runs[-1].end is None

    def _rate(self, instance: str) -> Rate:
        model = INSTANCES[instance][1]
        return compute_rate(self.prices[model], MODELS[model])

    # -- money -------------------------------------------------------------------------
    @rule(user=st.sampled_from(USERS), amount=st.integers(1, 50_000_000), replay=st.booleans())
    def topup(self, user: str, amount: int, replay: bool) -> None:
        if replay and self.topups:
            key = sorted(self.topups)[0]
            first = self.meter.topup(key, user, amount, self.now)
            assert (first.user_id, first.amount) == self.topups[key]  # the first result
            return
        key = f"topup-{len(self.topups)}"
        self.meter.topup(key, user, amount, self.now)
        self.topups[key] = (user, amount)
        self.credited[user] += amount

    @rule(model=st.sampled_from(sorted(MODELS)), price=prices)
    def change_price(self, model: str, price: int) -> None:
        self.prices[model] = price

    # -- instances ---------------------------------------------------------------------------
    @rule(instance=st.sampled_from(sorted(INSTANCES)), duplicate=st.booleans())
    def start(self, instance: str, duplicate: bool) -> None:
        if self._running(instance):
            return
        user = INSTANCES[instance][0]
        rate = self._rate(instance)
        view = self.meter.view(user, self.now)
        if rate.micros and view.available < required_for_start(rate, self.min_seconds):
            return  # refused: a 402 in the API
        self.ids += 1
        state = self.meter.open(f"bi-{self.ids}", instance, user, self.now, rate)
        if duplicate:
            assert self.meter.open(f"bi-dup-{self.ids}", instance, user, self.now, rate) == state
        self.runs[instance].append(Run(state.id, self.now, rate=rate))

    @rule(instance=st.sampled_from(sorted(INSTANCES)), duplicate=st.booleans())
    def stop(self, instance: str, duplicate: bool) -> None:
        if not self._running(instance):
            return
        self._close(instance)
        if duplicate:
            assert self.meter.close(instance, self.now) == []

    def _close(self, instance: str) -> None:
        self.meter.close(instance, self.now)
        self.runs[instance][-1].end = self.now

    # -- time and the charging pass --------------------------------------------------------
    @rule(ms=st.integers(min_value=1, max_value=PERIOD * 1000))
    def advance_and_tick(self, ms: int) -> None:
        """The server's charging pass runs at least once per period."""
        self.now += timedelta(milliseconds=ms)
        self._tick()

    def _tick(self) -> None:
        self.meter.tick(self.now)
        for user in USERS:
            if self.meter.protect(user, self.now, warn_s=600) == Protection.STOP:
                for instance, (owner, _model) in INSTANCES.items():
                    if owner == user and self._running(instance):
                        self._close(instance)

    @rule(ms=st.integers(min_value=1, max_value=PERIOD * 1000), applied=st.integers(0, 4))
    def crash_mid_pass_and_restart(self, ms: int, applied: int) -> None:
        """SIGKILL after some of a pass's charges committed; what was computed in
        memory is lost; the restarted server runs a full pass at once."""
        self.now += timedelta(milliseconds=ms)
        for charge in self.meter.due(self.now)[:applied]:
            self.meter.apply(charge)
        self.pending.clear()
        self._tick()

    @rule()
    def compute_charges_for_later(self) -> None:
        """A pass computes charges and is delayed (a slow worker, a second server)."""
        self.pending.extend(self.meter.due(self.now))

    @precondition(lambda self: bool(self.pending))
    @rule(index=st.integers(min_value=0), twice=st.booleans())
    def deliver_late(self, index: int, twice: bool) -> None:
        """Deliver a stale charge out of order, maybe twice: never a double charge."""
        charge = self.pending.pop(index % len(self.pending))
        self.meter.apply(charge)
        if twice:
            self.meter.apply(charge)

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def debits_equal_credits(self) -> None:
        debits, credits = self.meter.ledger.totals()
        assert debits == credits
        assert sum(self.meter.ledger.accounts().values()) == 0

    @invariant()
    def no_duplicate_posting_and_charges_tile(self) -> None:
        postings = self.meter.ledger.postings()
        assert len({p.key for p in postings}) == len(postings)
        per_interval: dict[str, list[tuple[int, int]]] = {}
        for p in postings:
            if p.kind == PostingKind.COMPUTE and p.interval_id:
                start = int(p.key.rsplit(":", 1)[1])
                per_interval.setdefault(p.interval_id, []).append((start, start + p.seconds))
        for pieces in per_interval.values():
            pieces.sort()
            for (_a, end), (start, _b) in itertools.pairwise(pieces):
                assert start >= end  # no overlap (zero-amount pieces leave gaps unposted)

    @invariant()
    def billed_seconds_equal_running_seconds(self) -> None:
        for runs in self.runs.values():
            for run in runs:
                state = self.meter.intervals[run.interval_id]
                assert state.rate == run.rate  # frozen at start, whatever the price now
                if run.end is None:
                    assert state.charged_seconds <= elapsed_seconds(run.start, self.now)
                    continue
                running = elapsed_seconds(run.start, run.end)
                assert state.charged_seconds == running
                money = sum(
                    p.amount
                    for p in self.meter.ledger.postings()
                    if p.interval_id == run.interval_id
                )
                assert money == state.rate.accrued(running)

    @invariant()
    def balances_stay_above_one_period(self) -> None:
        for user in USERS:
            balance = self.meter.ledger.balance(user_account(user))
            charged = sum(
                p.amount for p in self.meter.ledger.postings() if p.debit == user_account(user)
            )
            assert balance == self.credited[user] - charged
            if self.min_seconds >= PERIOD:
                assert balance >= 0
            else:
                mine = [i for i, (owner, _m) in INSTANCES.items() if owner == user]
                worst = sum(
                    compute_rate(MAX_PRICE, MODELS[INSTANCES[i][1]]).ceil_for(PERIOD) for i in mine
                )
                assert balance >= -worst


MeteringMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None
)
test_metering_engine = MeteringMachine.TestCase
