"""The simulated day both metering engines run (bench/metering.py): who owns
which instance at which rate, when each runs, and what a run counts."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpudock.billing.metering import Rate, compute_rate, elapsed_seconds

T0 = datetime(2026, 11, 29, tzinfo=UTC)
PERIOD_S = 60
TICK_S = 10
MEAN_RUN_S = 2 * 3600
MEAN_STOP_S = 3600
CONTAINER_DEATHS_PER_DAY = 300
SERVER_CRASHES_PER_DAY = 50
HEALTH_CHECK_LAG_S = 10


@dataclass
class Fleet:
    """Who owns what at which rate, and when each instance runs (ms from T0)."""

    owner: dict[str, str]
    price: dict[str, tuple[int, int]]  # (per GPU-hour, GPUs)
    schedule: dict[str, list[tuple[int, int, bool]]]  # (start, end, died on its own)

    @property
    def rate(self) -> dict[str, Rate]:
        return {i: compute_rate(unit, count) for i, (unit, count) in self.price.items()}

    def truth(self, end_ms: int) -> tuple[dict[str, int], dict[str, int]]:
        seconds: dict[str, int] = defaultdict(int)
        money: dict[str, int] = defaultdict(int)
        for instance, runs in self.schedule.items():
            for start, stop, _died in runs:
                if start >= end_ms:
                    continue
                run = elapsed_seconds(moment(start), moment(min(stop, end_ms)))
                seconds[instance] += run
                money[instance] += compute_rate(*self.price[instance]).accrued(run)
        return seconds, money


def moment(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def make_fleet(instances: int, seed: int, day_ms: int) -> Fleet:
    rng = random.Random(seed)
    owner, price, schedule = {}, {}, {}
    for n in range(instances):
        name = f"i-{n:05d}"
        owner[name] = f"u-{n % 100:03d}"
        unit = rng.choice([1_800_000, 3_600_000, 7_990_000, 12_500_000])  # per GPU-hour
        price[name] = (unit, rng.choice([1, 1, 2, 4, 8]))
        runs: list[tuple[int, int, bool]] = []
        t = int(rng.expovariate(1 / MEAN_STOP_S) * 1000)
        while t < day_ms:
            stop = t + max(1000, int(rng.expovariate(1 / MEAN_RUN_S) * 1000))
            died = rng.random() < CONTAINER_DEATHS_PER_DAY / (instances * 8)
            runs.append((t, stop, died))
            gap = int(rng.expovariate(1 / MEAN_STOP_S) * 1000)
            # a dead container is noticed by a health check before anyone restarts it
            t = stop + max(gap, (HEALTH_CHECK_LAG_S + 2 * TICK_S) * 1000 if died else 0)
        schedule[name] = runs
    return Fleet(owner, price, schedule)


def day_events(fleet: Fleet, day_ms: int) -> list[tuple[int, int, str, str]]:
    """(time ms, order, kind, instance): stops before starts at the same moment."""
    events = []
    for instance, runs in fleet.schedule.items():
        for start, stop, died in runs:
            events.append((start, 1, "start", instance))
            if stop < day_ms:
                events.append((stop, 0, "died" if died else "stop", instance))
    return sorted(events)


@dataclass
class Counters:
    """What a run did, and how long its charging passes took."""

    wall_s: float = 0.0
    crashes: int = 0
    late: int = 0
    passes: int = 0
    pass_s: float = 0.0


@dataclass(frozen=True)
class Booked:
    """One posting as the comparison needs it."""

    key: str
    instance_id: str | None
    refund: bool
    seconds: int
    amount: int
