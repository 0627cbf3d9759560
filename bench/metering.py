"""Metering exactness and posting throughput over a simulated day.

1,000 instances (100 users, 1-8 GPUs each at random prices) run and stop at
random for 24 simulated hours, with sub-second start and stop times. On top:
containers that die on their own (noticed a health check later, so seconds
charged ahead are refunded), server crashes in the middle of a charging pass
(a random prefix of its charges committed, the rest lost, a full pass on
restart), and duplicate or late deliveries of charges. At the end every
interval is closed and the ledger is compared with the truth kept aside:

- billed seconds (charges − refunds) = true running seconds, per instance;
- money = Σ over runs of `seconds × rate // 3600`, per instance;
- Σ debits = Σ credits; no key twice.

Two engines run the same kind of day:
- `core`: the pure engine (`gpudock.billing.meter.Meter`) — the whole day;
- `db`: the services over a real database (SQLite by default,
  `--database-url postgresql+psycopg://…` for PostgreSQL) — the status hook
  opens and closes intervals, `charging.charge_pass` posts; `--db-hours`
  simulated hours (default 2: a 2-core machine does a day in minutes).

Usage: .venv/bin/python -m bench.metering [--instances 1000] [--db-hours 2] [--json]
Exit status 0 when billing is exact, 1 when it is not.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from bench.metering_day import (
    HEALTH_CHECK_LAG_S,
    PERIOD_S,
    SERVER_CRASHES_PER_DAY,
    TICK_S,
    Booked,
    Counters,
    Fleet,
    day_events,
    make_fleet,
    moment,
)
from gpudock.billing.ledger import PostingKind
from gpudock.billing.meter import Meter


@dataclass
class Result:
    engine: str
    instances: int
    simulated_hours: float
    runs: int
    postings: int
    refunds: int
    crashes: int
    late_deliveries: int
    passes: int
    pass_ms_mean: float
    wall_s: float
    postings_per_s: float
    true_seconds: int
    billed_seconds: int
    exact: bool
    mismatches: list[str] = field(default_factory=list)


# -- the pure engine -------------------------------------------------------------------
def run_core(fleet: Fleet, day_ms: int, seed: int) -> Result:
    rng = random.Random(seed + 1)
    meter = Meter(period_s=PERIOD_S)
    counters = Counters()
    deaths: dict[str, int] = {}
    events = day_events(fleet, day_ms)
    rates = fleet.rate
    began = time.perf_counter()
    e = 0
    for tick_ms in [*range(0, day_ms, TICK_S * 1000), day_ms]:  # the last tick at the end
        while e < len(events) and events[e][0] <= tick_ms:
            at_ms, _order, kind, instance = events[e]
            e += 1
            if kind == "start":
                owner = fleet.owner[instance]
                meter.open(
                    f"bi-{instance}-{at_ms}", instance, owner, moment(at_ms), rates[instance]
                )
            elif kind == "stop":
                meter.close(instance, moment(at_ms))
            else:  # died: the health check closes it later, at the runtime's finished_at
                deaths[instance] = at_ms
        for instance, died_ms in list(deaths.items()):
            if tick_ms - died_ms >= HEALTH_CHECK_LAG_S * 1000:
                meter.close(instance, moment(deaths.pop(instance)))
        crashed = rng.random() < SERVER_CRASHES_PER_DAY * TICK_S / 86_400
        counters.crashes += crashed
        pass_began = time.perf_counter()
        counters.late += _charging_pass(meter, moment(tick_ms), rng, crashed)
        counters.pass_s += time.perf_counter() - pass_began
        counters.passes += 1
    for instance, died_ms in deaths.items():
        meter.close(instance, moment(died_ms))
    for state in meter.open_intervals():
        meter.close(state.instance_id, moment(day_ms))
    counters.wall_s = time.perf_counter() - began
    booked = [
        Booked(p.key, p.instance_id, p.kind == PostingKind.REFUND, p.seconds, p.amount)
        for p in meter.ledger.postings()
        if p.kind != PostingKind.TOPUP
    ]
    debits, credits = meter.ledger.totals()
    return _compare("core", fleet, day_ms, booked, debits == credits, counters)


def _charging_pass(meter: Meter, now: datetime, rng: random.Random, crashed: bool) -> int:
    """One pass; a crash commits a random prefix of it and the restart runs a full
    one. Then a few of its charges arrive again, late: they must change nothing."""
    due = meter.due(now)
    if crashed:
        for charge in due[: rng.randrange(len(due) + 1)]:
            meter.apply(charge)
        due = meter.due(now)
    stale = rng.sample(due, min(len(due), 3))
    for charge in due:
        meter.apply(charge)
    for charge in stale:
        assert meter.apply(charge) is None, "a late delivery charged twice"
    return len(stale)


def _compare(
    engine: str,
    fleet: Fleet,
    day_ms: int,
    booked: list[Booked],
    balanced: bool,
    counters: Counters,
) -> Result:
    seconds, money = fleet.truth(day_ms)
    billed_s: dict[str, int] = defaultdict(int)
    billed_m: dict[str, int] = defaultdict(int)
    for p in booked:
        sign = -1 if p.refund else 1
        billed_s[p.instance_id or ""] += sign * p.seconds
        billed_m[p.instance_id or ""] += sign * p.amount
    mismatches = [
        f"{i}: {billed_s[i]} s / {billed_m[i]} µ billed, {seconds[i]} s / {money[i]} µ true"
        for i in fleet.owner
        if (billed_s[i], billed_m[i]) != (seconds[i], money[i])
    ]
    keys_unique = len({p.key for p in booked}) == len(booked)
    return Result(
        engine=engine,
        instances=len(fleet.owner),
        simulated_hours=day_ms / 3_600_000,
        runs=sum(1 for runs in fleet.schedule.values() for r in runs if r[0] < day_ms),
        postings=len(booked),
        refunds=sum(1 for p in booked if p.refund),
        crashes=counters.crashes,
        late_deliveries=counters.late,
        passes=counters.passes,
        pass_ms_mean=round(1000 * counters.pass_s / max(counters.passes, 1), 2),
        wall_s=round(counters.wall_s, 2),
        postings_per_s=round(len(booked) / counters.wall_s),
        true_seconds=sum(seconds.values()),
        billed_seconds=sum(billed_s.values()),
        exact=not mismatches and balanced and keys_unique,
        mismatches=mismatches[:5],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours (core)")
    parser.add_argument("--db-hours", type=float, default=2.0, help="simulated hours (db)")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--skip-db", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    day_ms = int(args.hours * 3_600_000)
    fleet = make_fleet(args.instances, args.seed, day_ms)
    results.append(run_core(fleet, day_ms, args.seed))
    if not args.skip_db:
        from bench.metering_db import run_db

        db_ms = int(args.db_hours * 3_600_000)
        db_fleet = make_fleet(args.instances, args.seed, db_ms)
        with tempfile.TemporaryDirectory() as tmp:
            booked, balanced, counters = run_db(
                db_fleet, db_ms, args.seed, Path(tmp), args.database_url
            )
        results.append(_compare("db", db_fleet, db_ms, booked, balanced, counters))
    _report(results, args.json)
    return 0 if all(r.exact for r in results) else 1


def _report(results: list[Result], as_json: bool) -> None:
    if as_json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return
    for r in results:
        verdict = "EXACT" if r.exact else "NOT EXACT"
        print(
            f"{r.engine:>4}: {r.instances} instances × {r.simulated_hours:g} h, {r.runs} runs, "
            f"{r.crashes} crashes mid-pass, {r.refunds} refunds, "
            f"{r.late_deliveries} late/duplicate deliveries → {r.postings} postings "
            f"in {r.wall_s} s ({r.postings_per_s}/s; {r.passes} passes, "
            f"{r.pass_ms_mean} ms each); "
            f"billed {r.billed_seconds} s vs true {r.true_seconds} s: {verdict}"
        )
        for line in r.mismatches:
            print("      " + line)


if __name__ == "__main__":
    sys.exit(main())
