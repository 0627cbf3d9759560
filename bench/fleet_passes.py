"""The reconciler's passes at fleet scale: 10,000 instances of 500 users, 2,000
of them running on a 2,408-GPU simulated fleet, in one process, each change
against its baseline in the same run.

    nice .venv/bin/python -m bench.fleet_passes [--rounds 15] [--waiting 20]
        [--instances 10000] [--users 500] [--running 2000] [--database-url URL]

Seeded as `bench.api_load` seeds its server's database. Each round times, in turn:

- the capacity snapshot the placement pass takes: read whole (hosts, GPUs and
  what is held, as every pass did before the fleet's shape was kept) against the
  server's copy of the shape (only allocations, shares and instance sums read);
- the lifecycle scan: every row read and planned in Python (as before) against
  settled rows left in the database;
- a placement pass placing `--waiting` new instances, its snapshot taken from a
  fresh copy each time (before) or the kept one (after) — the commits dominate;
- the charging pass with a charge due for every running instance (the clock one
  more charging period ahead each round).

Prints the medians and after / before ratios, and the load average.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select

from bench.api_load import MODEL, fleet_spec, seed
from gpudock.db.models import InstanceModel, InstanceStatus
from gpudock.platform import open_platform
from gpudock.reconcile import charging, lifecycle, placement
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.context import Memo, ServiceContext, utc_now
from gpudock.services.fleet import inventory
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings


def every_row_scan(ctx: ServiceContext) -> list[str]:
    """The lifecycle scan as it was: every row that is not deleted, planned here."""
    with ctx.reader() as session:
        rows = session.execute(
            select(
                InstanceModel.id,
                InstanceModel.status,
                InstanceModel.desired_state,
                InstanceModel.placed,
            )
            .where(InstanceModel.status != InstanceStatus.DELETED)
            .order_by(InstanceModel.queued_at)
        ).all()
    return [
        r.id
        for r in rows
        if lifecycle.plan_step(r.status, r.desired_state, r.placed) != lifecycle.Step.NONE
    ]


def settled_left_out_scan(ctx: ServiceContext) -> list[str]:
    with ctx.reader() as session:
        return lifecycle.active_instance_ids(session)


def whole_snapshot(ctx: ServiceContext) -> object:
    with ctx.reader() as session:
        return inventory.capacity_snapshot(session)


def kept_snapshot(ctx: ServiceContext) -> object:
    with ctx.reader() as session:
        return inventory.current_capacity(ctx, session)


def timed_ms(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return (time.perf_counter() - began) * 1000


def placement_pass_ms(ctx: ServiceContext, waiting: int, fresh_copy: bool) -> float:
    """Create `waiting` instances (untimed), then time the pass that places them."""
    tenants = [u for u in users.list_users(ctx) if not u.is_admin][:waiting]
    for user in tenants:
        instances.create_instance(ctx, user, InstanceRequest(gpu_model=MODEL, gpu_count=1))
    pass_ctx = replace(ctx, memo=Memo()) if fresh_copy else ctx
    return timed_ms(lambda: placement.place_waiting(pass_ctx))


def charging_pass_ms(ctx: ServiceContext, ahead: timedelta) -> float:
    """A charging pass with the clock `ahead`: one more period due for each
    running instance than the pass before."""
    charging_ctx = replace(ctx, clock=lambda: utc_now() + ahead)
    return timed_ms(lambda: charging.charge_pass(charging_ctx))


def free_the_new(ctx: ServiceContext, seeded: int) -> None:
    """Delete what the placement passes made, so each round places into the same fleet."""
    with ctx.reader() as session:
        made = list(
            session.scalars(
                select(InstanceModel.id).where(
                    InstanceModel.id.not_in([f"i-load{n:06}" for n in range(seeded)]),
                    InstanceModel.status != InstanceStatus.DELETED,
                )
            )
        )
    admin = next(u for u in users.list_users(ctx) if u.is_admin)
    for instance_id in made:
        instances.delete_instance(ctx, admin, instance_id)


def run_rounds(ctx: ServiceContext, args: argparse.Namespace) -> dict[str, list[float]]:
    period = timedelta(seconds=ctx.settings.billing_charge_period_s)
    times: dict[str, list[float]] = {}

    def add(name: str, ms: float) -> None:
        times.setdefault(name, []).append(ms)

    for done in range(args.rounds):
        add("snapshot, read whole", timed_ms(lambda: whole_snapshot(ctx)))
        add("snapshot, kept shape", timed_ms(lambda: kept_snapshot(ctx)))
        add("lifecycle scan, every row", timed_ms(lambda: every_row_scan(ctx)))
        add("lifecycle scan, settled left out", timed_ms(lambda: settled_left_out_scan(ctx)))
        for fresh, label in ((True, "read whole"), (False, "kept shape")):
            placed_ms = placement_pass_ms(ctx, args.waiting, fresh)
            add(f"placement of {args.waiting}, {label}", placed_ms)
            free_the_new(ctx, args.instances)
            ctx_drain(ctx)
        add("charging, one period due for each", charging_pass_ms(ctx, (done + 2) * period))
    return times


def ctx_drain(ctx: ServiceContext) -> None:
    """The fake runtime's deletes: a lifecycle step each, run here, untimed."""
    for instance_id in settled_left_out_scan(ctx):
        lifecycle.advance(ctx, instance_id)


def report(times: dict[str, list[float]]) -> None:
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{'pass':40} {'median ms':>10} {'min ms':>8} {'after / before':>15}")
    names = list(medians)
    for n, name in enumerate(names):
        ratio = ""
        if ("kept shape" in name or "left out" in name) and n > 0:
            ratio = f"{medians[name] / medians[names[n - 1]]:.2f}"
        print(f"{name:40} {medians[name]:10.1f} {min(times[name]):8.1f} {ratio:>15}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--waiting", type=int, default=20)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    args = parser.parse_args(argv)
    logging.getLogger("gpudock").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="gpudock-passes-") as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            database_url=args.database_url,
            simulate=fleet_spec(args.running),
            runtime="fake",
            image_pull="never",
            ssh_enabled=False,
            rate_limits_enabled=False,
        )
        platform = open_platform(settings, runtime=FakeRuntime())
        try:
            seed(platform, args.users, args.instances, args.running)
            print(f"seeded; load average {os.getloadavg()[0]:.2f}")
            times = run_rounds(platform.ctx, args)
            print(f"load average after: {os.getloadavg()[0]:.2f}")
        finally:
            platform.close()
    report(times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
