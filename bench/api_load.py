"""The API under load: a real `gpudock server`, 10,000 instances of 500 users
in its database, 100 concurrent clients.

    nice .venv/bin/python -m bench.api_load [--duration 30] [--clients 100]
        [--instances 10000] [--users 500] [--running 2000] [--database-url URL]
        [--server-src DIR]   # the server from another src/ tree, e.g. `git archive`d
        [--servers 1,2]      # one phase per number: that many servers on the database
        [--charge-period-s 60]
        [--server-env NAME=VALUE ...]  # e.g. GPUDOCK_METRICS_INTERVAL_S=3600
        [--read-only] [--client-processes 4]
        [--think-ms 0]       # each client's mean pause between an answer and its next call

The server runs in a child process on the fake runtime (`GPUDOCK_RUNTIME=fake`)
over a simulated fleet with some GPUs to spare, rate limits off (every client
comes from 127.0.0.1) and the liveness check slowed to hourly after its first
pass at start-up. Once it
answers, this process seeds its database through the services (users, tokens,
prices, top-ups) and by bulk inserts (instances, GPU allocations, open billing
intervals): `--running` running priced instances, the rest stopped. The server
started on that database knows none of their containers (its fake runtime is its
own), so its first liveness pass recreates them, as after an engine lost them;
the clock starts once every one runs again. Then `--clients` threads, spread over
`--client-processes` processes, each thread one user with its own httpx client, run
for `--duration` seconds: 80 % reads (list, show, balance, ledger, SSH keys) and
20 % writes (create, stop, start, delete of what that client created). With
`--think-ms` each client pauses between an answer and its next request
(exponentially distributed, that mean): people and scripts at that pace, rather
than a closed loop whose latency is clients / throughput whatever a request costs.
The server's and the clients' CPU seconds during the load are printed too.

With `--servers 1,2` the load runs twice over the same database: against one
`gpudock server`, then against two on it (the HA topology: own data dirs, one
database), the clients split between them; each phase checks afterwards that
no GPU is held twice and no interval was charged twice for the same seconds
(`tests.support.invariants`). A short `--charge-period-s` has every server's charging
thread posting for the running instances while the load runs.

Prints per-endpoint count, p50, p99 and errors (4xx answers such as a 409 for
a stop of an instance that is already stopping are counted apart from 5xx and
transport errors) per phase, the ratio of each phase to the first, then the
reconciler's passes timed over the same database.
Targets: create/show p99 ≤ 100 ms, list p99 ≤ 1 s, no 5xx, a pass ≤ 1 s.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import random
import resource
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import func, select
from tests.support import invariants
from tests.support.server_process import ServerProcess

from gpudock.billing.money import parse_amount
from gpudock.db.models import (
    BillingIntervalModel,
    DesiredState,
    GpuAllocationModel,
    GpuDeviceModel,
    InstanceModel,
    InstanceStatus,
)
from gpudock.platform import Platform, open_platform
from gpudock.reconcile import charging, gpu_health, lifecycle, placement
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import users
from gpudock.services.billing import balances as billing
from gpudock.services.context import utc_now
from gpudock.settings import Settings

MODEL = "A100-80GB"
PRICE = "3.6"  # per GPU-hour: 3,600,000 micro-units
SPARE_GPUS = 400
READS = {"list": 25, "show": 25, "balance": 10, "ledger": 10, "ssh-keys": 10}
WRITES = {"create": 5, "stop": 5, "start": 5, "delete": 5}
SERVER_ENV = {
    "GPUDOCK_RUNTIME": "fake",
    "GPUDOCK_RATE_LIMITS_ENABLED": "false",
    "GPUDOCK_SSH_ENABLED": "false",
    "GPUDOCK_HEALTH_CHECK_INTERVAL_S": "3600",
    "GPUDOCK_RECONCILE_INTERVAL_S": "2",
}


@dataclass
class Tally:
    latencies_ms: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    client_errors: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    server_errors: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __getstate__(self) -> dict[str, object]:  # to the parent from a client process
        return {k: v for k, v in vars(self).items() if k != "lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        vars(self).update(state, lock=threading.Lock())

    def merge(self, other: Tally) -> None:
        for op, values in other.latencies_ms.items():
            self.latencies_ms[op].extend(values)
        for op, count in other.client_errors.items():
            self.client_errors[op] += count
        for op, count in other.server_errors.items():
            self.server_errors[op] += count
        self.failures.extend(other.failures)

    def record(self, op: str, elapsed_ms: float, status: int) -> None:
        with self.lock:
            self.latencies_ms[op].append(elapsed_ms)
            if 400 <= status < 500:
                self.client_errors[op] += 1
            elif status >= 500:
                self.server_errors[op] += 1


def fleet_spec(running: int) -> str:
    return f"{(running + SPARE_GPUS) // 8 + 1}x8x{MODEL}"


def seed(platform: Platform, user_count: int, instance_count: int, running: int) -> list[str]:
    """Users with tokens and money, then instances by bulk insert; returns the tokens."""
    ctx = platform.ctx
    admin = next(u for u in users.list_users(ctx) if u.is_admin)
    billing.set_price(ctx, admin, "gpu", MODEL, parse_amount(PRICE))
    made = [users.create_user(ctx, f"user{n:03}") for n in range(user_count)]
    for new in made:
        billing.topup(ctx, admin, new.user.name, parse_amount("1000000"), None)
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        gpus = list(session.execute(select(GpuDeviceModel.id, GpuDeviceModel.host_id)).all())
        for n in range(instance_count):
            owner = made[n % user_count].user.id
            gpu = gpus[n] if n < running else None
            session.add(_instance_row(owner, n, gpu, now))
            if gpu is not None:
                session.flush()  # the allocation references the row
                instance_id = f"i-load{n:06}"
                session.add(
                    GpuAllocationModel(gpu_id=gpu[0], instance_id=instance_id, allocated_at=now)
                )
                session.add(_interval_row(instance_id, owner, now))
    return [new.token for new in made]


def _instance_row(owner: str, n: int, gpu: tuple[str, str] | None, now: datetime) -> InstanceModel:
    state = InstanceStatus.RUNNING if gpu else InstanceStatus.STOPPED
    return InstanceModel(
        id=f"i-load{n:06}",
        name=f"job-{n}",
        user_id=owner,
        gpu_model=MODEL,
        gpu_count=1,
        image="gpudock/base:bookworm",
        system_image="gpudock/base:bookworm",
        env="{}",
        cpu=1.0,
        memory_gb=4,
        disk_gb=50,
        status=state,
        status_reason=state.value,
        desired_state=DesiredState.RUNNING if gpu else DesiredState.STOPPED,
        placed=gpu is not None,
        host_id=gpu[1] if gpu else None,
        container_gpus=gpu[0] if gpu else "",
        container_id=None,
        created_at=now,
        updated_at=now,
        queued_at=now,
    )


def _interval_row(instance_id: str, owner: str, now: datetime) -> BillingIntervalModel:
    micros = parse_amount(PRICE)
    return BillingIntervalModel(
        id="bi-" + secrets.token_hex(6),
        instance_id=instance_id,
        user_id=owner,
        kind="compute",
        opened_at=now,
        gpu_model=MODEL,
        gpu_count=1,
        disk_gb=50,
        unit_price_micro=micros,
        rate_micro=micros,
        rate_per_s=3600,
        charged_seconds=0,
        warned=False,
    )


class LoadClient:
    """One user's session: reads of its own things, writes on what it created."""

    def __init__(
        self, url: str, token: str, rng: random.Random, tally: Tally, *, read_only: bool = False
    ) -> None:
        self.http = httpx.Client(
            base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        self.rng, self.tally = rng, tally
        self.seeded = [i["id"] for i in self.http.get("/instances").json()]
        self.created: list[str] = []
        ops = {**READS, **({} if read_only else WRITES)}
        self.ops, self.weights = list(ops), list(ops.values())

    def run_until(self, deadline: float, think_ms: float = 0.0) -> None:
        while time.monotonic() < deadline:
            if think_ms:  # a person or a script between two calls
                pause = min(self.rng.expovariate(1000 / think_ms), 10 * think_ms / 1000)
                time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
                if time.monotonic() >= deadline:
                    break
            op = self.rng.choices(self.ops, self.weights)[0]
            try:
                self.one(op)
            except httpx.HTTPError as exc:
                with self.tally.lock:
                    self.tally.failures.append(f"{op}: {exc!r}")
        self.http.close()

    def one(self, op: str) -> None:
        mine = self.created or self.seeded
        target = self.rng.choice(mine)
        method, path, body = {
            "list": ("GET", "/instances", None),
            "show": ("GET", f"/instances/{self.rng.choice(self.seeded)}", None),
            "balance": ("GET", "/billing/balance", None),
            "ledger": ("GET", "/billing/ledger", None),
            "ssh-keys": ("GET", "/ssh-keys", None),
            "create": ("POST", "/instances", {"gpu_model": MODEL, "gpu_count": 1}),
            "stop": ("POST", f"/instances/{target}/stop", None),
            "start": ("POST", f"/instances/{target}/start", None),
            "delete": ("DELETE", f"/instances/{target}", None),
        }[op]
        if op == "delete" and not self.created:
            method, path = "GET", "/instances"  # nothing of its own to delete yet: a read
            op = "list"
        began = time.perf_counter()
        response = self.http.request(method, path, json=body)
        self.tally.record(op, (time.perf_counter() - began) * 1000, response.status_code)
        if op == "create" and response.status_code == 201:
            self.created.append(response.json()["id"])
        elif op == "delete" and response.is_success:
            self.created.remove(target)


@dataclass(frozen=True)
class LoadPlan:
    clients: int = 100
    duration_s: float = 30.0
    processes: int = 4  # the clients are spread over these
    read_only: bool = False
    think_ms: float = 0.0  # mean pause between a client's answer and its next request


def run_load(urls: list[str], tokens: list[str], plan: LoadPlan) -> Tally:
    """`plan.clients` users at once, client n on server n mod len(urls), spread over
    `plan.processes` client processes: 100 client threads in one Python process
    queue for its GIL, and that queue would be counted as the server's latency."""
    rng = random.Random(7)
    chosen = list(enumerate(rng.sample(tokens, min(plan.clients, len(tokens)))))
    start_at = time.time() + 15  # every process has spawned and made its clients
    n = plan.processes
    shares = [chosen[i::n] for i in range(n)]
    tally = Tally()
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
        for part in pool.map(_run_clients, [urls] * n, shares, [start_at] * n, [plan] * n):
            tally.merge(part)
    return tally


def _run_clients(
    urls: list[str], clients: list[tuple[int, str]], start_at: float, plan: LoadPlan
) -> Tally:
    """One client process: its share of the users, each on a thread of its own."""
    tally = Tally()
    workers = [
        LoadClient(urls[n % len(urls)], token, random.Random(n), tally, read_only=plan.read_only)
        for n, token in clients
    ]
    time.sleep(max(0.0, start_at - time.time()))
    deadline = time.monotonic() + plan.duration_s
    threads = [
        threading.Thread(target=w.run_until, args=(deadline, plan.think_ms)) for w in workers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally


def time_passes(platform: Platform) -> dict[str, float]:
    """Each pass of a tick over the seeded database, in ms (liveness left out:
    this process's fake runtime has none of the server's containers). The clock
    is two charging periods ahead, so every running instance has a charge due."""
    ahead = timedelta(seconds=2 * platform.ctx.settings.billing_charge_period_s)
    ctx = replace(platform.ctx, clock=lambda: utc_now() + ahead)
    # The server keeps its placement state between passes; its first pass after a
    # start also teaches the policy the workload from the placed instances.
    kept = placement.PlacementState(ctx.settings)
    passes = {
        "moves off failed GPUs": lambda: gpu_health.converge(ctx),
        "placement, first": lambda: placement.place_waiting(ctx, kept),
        "placement, next": lambda: placement.place_waiting(ctx, kept),
        "lifecycle scan": lambda: lifecycle.active_instance_ids(ctx.reader()),
        "charging": lambda: charging.charge_pass(ctx),
    }
    timed: dict[str, float] = {}
    for name, run in passes.items():
        began = time.perf_counter()
        run()
        timed[name] = (time.perf_counter() - began) * 1000
    return timed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(tally: Tally, duration_s: float, baseline: Tally | None = None) -> None:
    total = sum(len(v) for v in tally.latencies_ms.values())
    print(f"{total} requests in {duration_s:.0f} s ({total / duration_s:.0f}/s)")
    header = f"{'endpoint':10} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'4xx':>5} {'5xx':>5}"
    print(header + (f" {'p50, p99 / first':>17}" if baseline else ""))
    for op in [*READS, *WRITES]:
        values = tally.latencies_ms.get(op, [])
        if not values:
            continue
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        line = (
            f"{op:10} {len(values):6} {p50:8.1f} {p99:8.1f} {tally.client_errors[op]:5} "
            f"{tally.server_errors[op]:5}"
        )
        first = baseline.latencies_ms.get(op) if baseline else None
        if first:
            line += f" {p50 / statistics.median(first):8.2f} {p99 / percentile(first, 0.99):8.2f}"
        print(line)
    if tally.failures:
        print(f"transport errors: {len(tally.failures)}, first: {tally.failures[0]}")


def report_passes(passes: dict[str, float]) -> None:
    print("reconciler passes over the same database (ms):")
    for name, ms in passes.items():
        print(f"  {name:24} {ms:8.0f}")
    # A tick of the reconciler's loop: charging has a thread of its own, and a
    # server pays the first placement pass's warm-up once, at its start.
    tick = ("moves off failed GPUs", "placement, next", "lifecycle scan")
    print(f"  {'a tick (' + ', '.join(tick) + ')'}: {sum(passes[n] for n in tick):.0f}")


def wait_adopted(
    platform: Platform, servers: list[ServerProcess], running: int, timeout_s: float = 900
) -> float:
    """Seconds until each server's first liveness pass has run and every seeded
    running instance runs again with nothing in a step.

    A server on the fake runtime starts knowing no container, so its first liveness
    pass recreates the seeded running instances, as it would after an engine lost
    them. That is recovery, not the load being measured: the clock starts after it."""
    began = time.monotonic()
    token = servers[0].admin_token()  # the first start made the admin; one database
    pending = list(servers)
    while time.monotonic() - began < timeout_s:
        pending = [s for s in pending if not _liveness_ran(s, token)]
        if not pending and _all_settled(platform, running):
            return time.monotonic() - began
        time.sleep(0.5)
    raise TimeoutError(f"the seeded instances did not all run again within {timeout_s:.0f} s")


def _liveness_ran(server: ServerProcess, token: str) -> bool:
    scrape = httpx.get(
        server.url + "/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    return 'gpudock_reconcile_pass_seconds{pass="liveness"}' in scrape.text


def _all_settled(platform: Platform, running: int) -> bool:
    with platform.ctx.reader() as session:  # never in the servers' writers' way
        settled = session.scalar(
            select(func.count())
            .select_from(InstanceModel)
            .where(InstanceModel.status == InstanceStatus.RUNNING)
            .where(InstanceModel.lock_token.is_(None))
        )
        busy = session.scalar(
            select(func.count())
            .select_from(InstanceModel)
            .where(InstanceModel.status.not_in([InstanceStatus.RUNNING, InstanceStatus.STOPPED]))
        )
    return settled == running and busy == 0


def run_phase(
    servers: list[ServerProcess],
    tokens: list[str],
    args: argparse.Namespace,
    platform: Platform,
    url: str,
) -> Tally:
    """Start `servers` on the database, let them adopt what runs, load them, stop
    them, check the invariants."""
    for server in servers:
        server.start()
    adopted_s = wait_adopted(platform, servers, args.running)
    print(
        f"{len(servers)} server(s) up, the running instances adopted in {adopted_s:.0f} s; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    try:
        plan = LoadPlan(
            args.clients, args.duration, args.client_processes, args.read_only, args.think_ms
        )
        servers_cpu, clients_cpu = _cpu_seconds(servers), _children_cpu_seconds()
        tally = run_load([s.url for s in servers], tokens, plan)
        servers_cpu = _cpu_seconds(servers) - servers_cpu
        clients_cpu = _children_cpu_seconds() - clients_cpu
        answered = sum(len(v) for v in tally.latencies_ms.values())
        print(
            f"CPU during the load: server(s) {servers_cpu:.1f} s "
            f"({1000 * servers_cpu / max(answered, 1):.1f} ms a request), "
            f"clients {clients_cpu:.1f} s, of {os.cpu_count()} cores x {plan.duration_s:.0f} s"
        )
    finally:
        for server in servers:
            server.kill()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    problems = invariants.check(url)
    print(
        "invariants: "
        + ("; ".join(problems) if problems else "no GPU held twice, no second charged twice")
    )
    return tally


def _cpu_seconds(servers: list[ServerProcess]) -> float:
    """User and system CPU the servers' processes have used so far."""
    total = 0.0
    for server in servers:
        assert server.process is not None
        fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children_cpu_seconds() -> float:
    """CPU of this process's children that have ended (the client processes, once
    their pool has shut down)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp dir")
    parser.add_argument(
        "--server-src", type=Path, help="run the server from this src/ tree (a before/after)"
    )
    parser.add_argument("--servers", default="1", help="phases: servers in each, e.g. 1,2")
    parser.add_argument("--charge-period-s", type=int, default=60)
    parser.add_argument(
        "--read-only", action="store_true", help="reads only (the writes take turns on a lock)"
    )
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="each client pauses this long on average (exponentially distributed) "
        "between an answer and its next request; 0: a closed loop at full speed",
    )
    parser.add_argument(
        "--client-processes", type=int, default=4, help="processes the clients are spread over"
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the servers, e.g. GPUDOCK_METRICS_INTERVAL_S=3600 (repeatable)",
    )
    args = parser.parse_args(argv)
    phases = [int(n) for n in args.servers.split(",")]
    logging.getLogger("gpudock").setLevel(logging.WARNING)
    fleet = fleet_spec(args.running)
    with tempfile.TemporaryDirectory(prefix="gpudock-load-") as tmp:
        env = {**SERVER_ENV, "GPUDOCK_BILLING_CHARGE_PERIOD_S": str(args.charge_period_s)}
        env.update(item.split("=", 1) for item in args.server_env)
        if args.server_src is not None:
            env["PYTHONPATH"] = str(args.server_src)
        url = args.database_url or f"sqlite:///{Path(tmp) / 'gpudock.db'}"
        servers = [
            ServerProcess(Path(tmp) / f"server{n}", fleet, database_url=url, env=dict(env))
            for n in range(max(phases))
        ]
        for server in servers:
            server.healthy_timeout_s = 300
        servers[0].start()  # makes the schema and the first admin; the seeder joins it
        servers[0].kill()
        settings = Settings(
            data_dir=Path(tmp) / "seeder",
            database_url=url,
            simulate=fleet,
            runtime="fake",
            billing_charge_period_s=args.charge_period_s,
        )
        platform = open_platform(settings, runtime=FakeRuntime())
        try:
            began = time.perf_counter()
            tokens = seed(platform, args.users, args.instances, args.running)
            print(
                f"seeded {args.instances} instances of {args.users} users in "
                f"{time.perf_counter() - began:.0f} s; load average {os.getloadavg()[0]:.2f}"
            )
            tallies = [run_phase(servers[:count], tokens, args, platform, url) for count in phases]
            passes = time_passes(platform)
        finally:
            platform.close()
            for server in servers:
                server.kill()
    for count, tally in zip(phases, tallies, strict=True):
        print(f"-- {count} server(s)")
        report(tally, args.duration, tallies[0] if tally is not tallies[0] else None)
    report_passes(passes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
