"""Placement latency while charging runs: 1,000 running priced instances, before
and after the charging pass moved to its own thread, measured in the same run.

    .venv/bin/python -m bench.charging_placement [--instances 1000] [--samples 20]
        [--database-url URL]

Seeds `--instances` running instances of 100 users through the services on the
fake runtime (a simulated fleet with room to spare), GPUs priced and every user
topped up; the charging period is 1 s, so every charging pass has a posting to
make for every instance (the worst case: with the default 60 s period one pass
in twelve does). Then, for each layout, `--samples` creates at random moments,
each timed from the create's commit to the placement's commit:

- before: one thread runs the placement passes, then the charging pass, as the
  loop did (charging was the last pass of each tick);
- after: the reconciler's own two threads (`Reconciler.start()`).

Prints the charging pass time, each layout's p50/p99/max and the ratio.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from gpudock.billing.money import parse_amount
from gpudock.db.models import InstanceModel, UserModel
from gpudock.platform import Platform, open_platform
from gpudock.reconcile import charging
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.billing import balances as billing
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings

USERS = 100
REQUEST = InstanceRequest(gpu_model="A100-80GB", gpu_count=1)
POLL_S = 0.002


def open_bench_platform(data_dir: Path, count: int, samples: int, url: str | None) -> Platform:
    hosts = (count + 2 * samples) // 8 + 1
    settings = Settings(
        data_dir=data_dir,
        database_url=url,
        simulate=f"{hosts}x8xA100-80GB",
        runtime="fake",
        image_pull="never",
        ssh_enabled=False,
        reconcile_interval_s=0.5,
        billing_charge_period_s=1,
        billing_tick_s=0.1,
        health_check_interval_s=3600,
        rate_limits_enabled=False,
    )
    return open_platform(settings, runtime=FakeRuntime())


def seed(platform: Platform, count: int) -> list[UserModel]:
    ctx = platform.ctx
    admin = next(u for u in users.list_users(ctx) if u.is_admin)
    billing.set_price(ctx, admin, "gpu", "A100-80GB", parse_amount("3.6"))
    made = [users.create_user(ctx, f"user{n:03}").user for n in range(USERS)]
    for user in made:
        billing.topup(ctx, admin, user.name, parse_amount("1000000"), None)
    for n in range(count):
        instances.create_instance(ctx, made[n % USERS], REQUEST)
    platform.reconciler.drain(timeout_s=1800)
    return made


def _placed(platform: Platform, instance_id: str) -> bool:
    with platform.ctx.reader() as session:
        row = session.get(InstanceModel, instance_id)
        return row is not None and row.placed


def sample_latencies(
    platform: Platform, owners: list[UserModel], samples: int, seed_value: int
) -> list[float]:
    rng = random.Random(seed_value)
    latencies = []
    for n in range(samples):
        time.sleep(rng.uniform(0.0, 0.6))  # a random moment in the charging cycle
        made = instances.create_instance(platform.ctx, owners[n % len(owners)], REQUEST)
        began = time.perf_counter()
        while not _placed(platform, made.id):
            time.sleep(POLL_S)
        latencies.append((time.perf_counter() - began) * 1000)
    return latencies


class OneThreadLoop:
    """The loop as it was: placement passes, then charging, on one thread."""

    def __init__(self, platform: Platform) -> None:
        self._reconciler = platform.reconciler
        self._interval_s = platform.ctx.settings.reconcile_interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        platform.ctx.wake_reconciler = self._wake.set
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._reconciler.tick(isolate=True)
            self._reconciler.charging_tick(isolate=True)
            self._wake.wait(self._interval_s)

    def __enter__(self) -> OneThreadLoop:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name:7} p50 {statistics.median(values):7.1f} ms  p99 {percentile(values, 0.99):7.1f} ms"
        f"  max {max(values):7.1f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)
    logging.getLogger("gpudock").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="gpudock-bench-") as tmp:
        platform = open_bench_platform(Path(tmp), args.instances, args.samples, args.database_url)
        try:
            began = time.perf_counter()
            owners = seed(platform, args.instances)
            print(
                f"seeded {args.instances} running instances in {time.perf_counter() - began:.0f} s"
            )
            time.sleep(1.1)  # one charging period: the next pass has a posting per instance
            began = time.perf_counter()
            report = charging.charge_pass(platform.ctx)
            pass_ms = (time.perf_counter() - began) * 1000
            print(f"charging pass: {pass_ms:.0f} ms, {report.postings} postings")
            with OneThreadLoop(platform):
                before = sample_latencies(platform, owners, args.samples, 1)
            platform.ctx.wake_reconciler = platform.reconciler.wake
            platform.reconciler.start()
            after = sample_latencies(platform, owners, args.samples, 1)
        finally:
            platform.close()
    print("create -> placed, with charging running:")
    print(summary("before", before))
    print(summary("after", after))
    ratio = statistics.median(after) / statistics.median(before)
    p99_ratio = percentile(after, 0.99) / percentile(before, 0.99)
    print(f"after / before: p50 {ratio:.2f}, p99 {p99_ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
