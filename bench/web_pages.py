"""Console page times with 1,000 instances in the database (issue 8: every page ≤ 200 ms).

Seeds a SQLite database through the services on the fake runtime (simulated
fleet of 40 GPUs): 1,000 instances owned by one user, the reconciler run once
so that the fleet fills and the rest wait as pending; GPUs priced, the user
topped up, and the running 40 stopped once (40 ledger lines) and replaced. Then it logs in through
the login form as that user and as the admin and times each console page
in-process through the ASGI app (`TestClient`: no network, so the time is the
server's, plus a fraction of a millisecond of client overhead).

Usage: .venv/bin/python -m bench.web_pages [--instances 1000] [--repeat 20] [--json]
Exit status: 0 when every page's p95 is within the budget, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from argon2 import PasswordHasher
from fastapi.testclient import TestClient
from tests.support.key_proof import add_with_proof, make_key

from gpudock.api.app import create_app
from gpudock.billing.money import parse_amount
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.accounts import logins as accounts
from gpudock.services.accounts import users
from gpudock.services.billing import balances as billing
from gpudock.services.instances import actions as instances
from gpudock.services.instances.actions import InstanceRequest
from gpudock.settings import Settings

FLEET = "4x8xA100-80GB,2x4xRTX4090-24GB"
BUDGET_MS = 200.0
PASSWORD = "bench password"  # noqa: S105 (a throwaway database)
IMAGE = "pytorch/pytorch:2.1.2-cuda11.8-cudnn8-runtime"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass(frozen=True)
class PageTime:
    page: str
    who: str
    status: int
    median_ms: float
    p95_ms: float
    max_ms: float
    cpu_median_ms: float  # this process's CPU time: what the page costs on an idle machine


def seed(platform: Platform, count: int) -> str:
    """`count` instances for user 'alice' through the services, priced GPUs, a top-up,
    and one round of stops (each a ledger line); returns one instance id."""
    accounts.configure_hashing(PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1))
    alice = users.create_user(platform.ctx, "alice").user
    accounts.set_password(platform.ctx, "alice", PASSWORD)
    accounts.set_password(platform.ctx, users.ADMIN_NAME, PASSWORD)
    admin = next(u for u in users.list_users(platform.ctx) if u.is_admin)
    for model, price in (("A100-80GB", "7.2"), ("RTX4090-24GB", "3.6")):
        billing.set_price(platform.ctx, admin, "gpu", model, parse_amount(price))
    billing.topup(platform.ctx, admin, "alice", parse_amount("100000"), None)
    add_with_proof(platform.ctx, alice, make_key(platform.ctx.settings.data_dir, "bench"), "laptop")
    first = ""
    for n in range(count):
        model = "A100-80GB" if n % 2 else "RTX4090-24GB"
        made = instances.create_instance(
            platform.ctx, alice, InstanceRequest(gpu_model=model, gpu_count=1, name=f"job-{n}")
        )
        first = first or made.id
    platform.reconciler.drain()
    running = [
        i for i in instances.list_instances(platform.ctx, alice) if i.status.value == "running"
    ]
    for instance in running:  # their charges close: one compute line each
        instances.stop_instance(platform.ctx, alice, instance.id)
    platform.reconciler.drain()
    return first


def log_in(platform: Platform, name: str) -> TestClient:
    client = TestClient(create_app(platform, run_reconciler=False), base_url="http://127.0.0.1")
    found = _CSRF.search(client.get("/login").text)
    assert found is not None
    data = {"username": name, "password": PASSWORD, "csrf_token": found.group(1)}
    response = client.post("/login", data=data, follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


def time_page(client: TestClient, who: str, path: str, repeat: int) -> PageTime:
    client.get(path)  # warm: template compilation, first query plans
    samples, cpu, status = [], [], 0
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        response = client.get(path)
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        status = response.status_code
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    median = statistics.median(samples)
    return PageTime(path, who, status, median, p95, samples[-1], statistics.median(cpu))


def measure(platform: Platform, instance_id: str, repeat: int) -> list[PageTime]:
    pages = {
        "alice": [
            "/",
            "/instances",
            "/instances/rows",
            "/instances/new",
            "/instances/new/availability?gpu_model=A100-80GB",
            f"/instances/{instance_id}",
            f"/instances/{instance_id}/live",
            f"/instances/new/image-hint?image={IMAGE}&gpu_model=A100-80GB",
            "/account",
            "/billing",
            "/billing?days=90",
            "/billing/ledger.csv",
            "/ssh-keys",
            "/images",
        ],
        "admin": [
            "/",
            "/instances",
            "/admin/hosts",
            "/admin/hosts/live",
            "/admin/users",
            "/admin/billing",
            "/admin/reliability",
        ],
    }
    results: list[PageTime] = []
    for who, paths in pages.items():
        client = log_in(platform, who)
        results.extend(time_page(client, who, path, repeat) for path in paths)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            data_dir=Path(data_dir), simulate=FLEET, runtime="fake", image_pull="never"
        )
        platform = open_platform(settings, runtime=FakeRuntime())
        try:
            started = time.perf_counter()
            instance_id = seed(platform, args.instances)
            seeded_s = time.perf_counter() - started
            results = measure(platform, instance_id, args.repeat)
        finally:
            platform.close()
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"seeded {args.instances} instances in {seeded_s:.1f} s; {args.repeat} GETs each")
        print(f"{'page':<50} {'who':<6} {'median':>8} {'p95':>8} {'max':>8} {'cpu':>8}")
        for r in results:
            print(
                f"{r.page:<50} {r.who:<6} {r.median_ms:>6.1f}ms {r.p95_ms:>6.1f}ms "
                f"{r.max_ms:>6.1f}ms {r.cpu_median_ms:>6.1f}ms"
            )
    over = [r for r in results if r.p95_ms > BUDGET_MS or r.status != 200]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
