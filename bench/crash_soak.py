"""Crash soak: lifecycle calls from several clients while the server is SIGKILLed.

A real `gpudock server` (subprocess, SQLite, simulated fleet, real Docker
Engine, size-limited data volumes, billing priced) serves `--clients` users,
each in its own thread doing create / stop / start / delete of its instances
and writing a marker file into the data volume of a running one. Meanwhile
the main thread SIGKILLs the server at random moments and starts it again.
After `--operations` lifecycle calls (answered ones; calls that find the
server down are retried) the server is killed once more, restarted, left to
settle, and the invariants are checked:

- nothing stuck in a transitional state, no GPU held by two instances, no
  orphan container, volume or tenant network, every running instance on its
  tenant's network (`tests.support.docker.assert_converged_on`);
- every marker written into a live instance's data volume is still there;
- no size-limited volume image without its volume, none unmounted;
- the ledger balances (cached balances = postings, Σ = 0) and metering
  intervals match statuses (running: one open compute interval; deleted: none open).

Each kill comes after a random 2..8 (`--kill-after-min/max`) more answered
calls, at a random moment within the next `--kill-within-s` (1 s), so that a
slow machine still gets work done between kills.

Usage: .venv/bin/python -m bench.crash_soak [--operations 200] [--clients 3]
       [--seed 1] [--kill-after-min 2] [--kill-after-max 8] [--kill-within-s 1] [--json]

Exit status: 0 when no invariant is violated, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
from sqlalchemy import select
from tests.support.docker import assert_converged_on, docker_client, remove_cluster_objects
from tests.support.server_process import ServerProcess, wait_settled

from gpudock.db.models import BillingIntervalModel, InstanceModel, InstanceStatus
from gpudock.runtime.base import LABEL_INSTANCE
from gpudock.services.billing.postings import verify_balances
from gpudock.services.instances import container_spec as containers

FLEET = "1x8xA100-80GB"
IMAGE = "gpudock/base:bookworm"
MARKER = "/root/data/.soak-marker"
MAX_LIVE_PER_CLIENT = 3
ENV = {
    "GPUDOCK_BILLING_CHARGE_PERIOD_S": "1",
    "GPUDOCK_BILLING_TICK_S": "0.5",
    "GPUDOCK_STOP_TIMEOUT_S": "1",
    "GPUDOCK_SSH_ENABLED": "false",
}


@dataclass
class SoakResult:
    operations: int = 0  # calls the server answered (each client's calls are sequential)
    answered: int = 0  # any HTTP answer below 500
    server_errors: int = 0  # 5xx answers
    unreachable: int = 0  # connection refused or cut: the server was down
    kills: int = 0
    markers_checked: int = 0
    instances_at_end: int = 0
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


class _Budget:
    """Lifecycle calls left to make, shared by the clients."""

    def __init__(self, operations: int, deadline: float) -> None:
        self._left, self._deadline, self._lock = operations, deadline, threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._left <= 0 or time.monotonic() > self._deadline:
                return False
            self._left -= 1
            return True

    def close(self) -> None:
        with self._lock:
            self._left = 0

    def give_back(self) -> None:
        """The call never reached a server: it does not count."""
        with self._lock:
            self._left += 1


@dataclass
class _Client:
    server: ServerProcess
    engine: docker.DockerClient
    token: str
    rng: random.Random
    result: SoakResult
    lock: threading.Lock
    ids: list[str] = field(default_factory=list)
    markers: dict[str, str] = field(default_factory=dict)
    lost_answer: bool = False  # a call was cut: it may have created an instance we lack

    def run(self, budget: _Budget) -> None:
        while budget.take():
            verb = self.rng.choice(["create", "create", "stop", "start", "delete", "mark", "mark"])
            try:
                if self.lost_answer:
                    self._resync()
                status = self._one(verb)
            except httpx.HTTPError:
                self.lost_answer = True
                self._count("unreachable")
                budget.give_back()
                time.sleep(0.2)  # back off while the server restarts
                continue
            self._count("server_errors" if status >= 500 else "answered")

    def _one(self, verb: str) -> int:
        with self.server.client(self.token) as user:
            if not self.ids or (verb == "create" and len(self.ids) < MAX_LIVE_PER_CLIENT):
                body: dict[str, Any] = {"gpu_count": self.rng.choice([0, 1]), "disk_gb": 1}
                if body["gpu_count"]:
                    body["gpu_model"] = "A100-80GB"
                response = user.post("/instances", json=body)
                if response.status_code == 201:
                    self.ids.append(response.json()["id"])
                return response.status_code
            target = self.rng.choice(self.ids)
            if verb == "delete":
                self.ids.remove(target)
                self.markers.pop(target, None)  # whatever happens next, no longer checked
                return user.delete(f"/instances/{target}").status_code
            if verb == "mark":
                return self._mark(user)
            action = "start" if verb == "create" else verb  # at the limit: start one instead
            return user.post(f"/instances/{target}/{action}").status_code

    def _resync(self) -> None:
        """Learn the instances this user really has (a create may have landed
        before its answer was cut); deleting ones no longer count."""
        with self.server.client(self.token) as user:
            listed = user.get("/instances")
            listed.raise_for_status()
        self.ids = [i["id"] for i in listed.json() if i["status"] not in ("deleting", "deleted")]
        self.lost_answer = False

    def _mark(self, user: httpx.Client) -> int:
        """Write a fresh marker into the data volume of one running instance."""
        response = user.get("/instances")
        running = [
            i["id"] for i in response.json() if i["status"] == "running" and i["id"] in self.ids
        ]
        if response.status_code != 200 or not running:
            return response.status_code
        instance_id = self.rng.choice(running)
        name = containers.container_name(self.server.cluster_id, instance_id)
        token = f"{instance_id}-{self.rng.getrandbits(48):x}"
        try:
            code, _ = self.engine.containers.get(name).exec_run(
                ["sh", "-c", f"echo {token} > {MARKER} && sync"]
            )
        except docker.errors.APIError:
            return response.status_code  # it was being stopped or replaced: no marker
        if code == 0:
            self.markers[instance_id] = token
        return response.status_code

    def _count(self, what: str) -> None:
        with self.lock:
            self.result.operations += what != "unreachable"
            setattr(self.result, what, getattr(self.result, what) + 1)


def run_soak(
    data_dir: Path,
    engine: docker.DockerClient,
    *,
    operations: int,
    clients: int,
    seed: int,
    kill_after: tuple[int, int] = (2, 8),
    kill_within_s: float = 1.0,
    max_seconds: float = 600.0,
    server: ServerProcess | None = None,
) -> SoakResult:
    """Run the soak against a server in `data_dir`; the caller cleans up after
    `server` (pass one in to do so even when this raises)."""
    started = time.monotonic()
    rng = random.Random(seed)
    server = server or ServerProcess(data_dir, FLEET)
    server.env.update(ENV)
    server.healthy_timeout_s = max(server.healthy_timeout_s, 180.0)  # slow when loaded
    server.start()
    tokens = _tenants(server, clients)
    result, lock = SoakResult(), threading.Lock()
    workers = [
        _Client(server, engine, token, random.Random(seed * 1000 + i), result, lock)
        for i, token in enumerate(tokens)
    ]
    budget = _Budget(operations, started + max_seconds)
    threads = [threading.Thread(target=w.run, args=(budget,)) for w in workers]
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads):
            # Let the clients get `kill_after` calls answered (however slow the
            # machine), then kill at a random moment within the next `kill_within_s`.
            target = result.answered + result.server_errors + rng.randint(*kill_after)
            while any(t.is_alive() for t in threads) and (
                result.answered + result.server_errors < target
            ):
                time.sleep(0.05)  # polling the count; bounded by the budget's deadline
            time.sleep(rng.uniform(0, kill_within_s))  # the random moment, not a synchronisation
            if any(t.is_alive() for t in threads):
                server.kill()
                server.start()
                result.kills += 1
        # One last kill once the clients are done, so that the checks see a server
        # that came back from a SIGKILL (its start-up sweep is part of the design).
        server.kill()
        server.start()
        result.kills += 1
    finally:
        budget.close()  # the clients stop after their current call, whatever happened here
        for thread in threads:
            thread.join(timeout=60)
    for token in tokens:
        wait_settled(server, token, timeout_s=180)
    markers = {k: v for w in workers for k, v in w.markers.items()}
    result.violations = check_invariants(server, engine, markers, result)
    result.seconds = round(time.monotonic() - started, 1)
    return result


def _tenants(server: ServerProcess, count: int) -> list[str]:
    with server.client() as admin:
        for price in (
            {"kind": "gpu", "gpu_model": "A100-80GB", "amount": "3.6"},
            {"kind": "no_gpu", "amount": "0.5"},
            {"kind": "disk", "amount": "0.01"},
        ):
            admin.put("/admin/prices", json=price).raise_for_status()
        tokens = []
        for i in range(count):
            name = f"soak{i}"
            tokens.append(admin.post("/users", json={"name": name}).json()["token"])
            topup = {"user": name, "amount": "100000"}
            admin.post("/admin/topups", json=topup).raise_for_status()
    return tokens


def check_invariants(
    server: ServerProcess,
    engine: docker.DockerClient,
    markers: dict[str, str],
    result: SoakResult,
) -> list[str]:
    violations: list[str] = []
    db_engine, sessions, cluster = server.database()
    try:
        try:
            assert_converged_on(sessions, cluster, engine)
        except AssertionError as exc:
            violations.append(f"converged: {exc}")
        with sessions() as session:
            instances = {i.id: i for i in session.scalars(select(InstanceModel))}
            wrong = verify_balances(session)
            intervals = list(
                session.scalars(
                    select(BillingIntervalModel).where(BillingIntervalModel.closed_at.is_(None))
                )
            )
        result.instances_at_end = len(instances)
        if wrong:
            violations.append(f"ledger does not balance: {wrong}")
        violations += _interval_violations(instances, intervals)
        for instance_id, token in markers.items():
            instance = instances.get(instance_id)
            if instance is None or instance.status == InstanceStatus.DELETED:
                continue
            result.markers_checked += 1
            if token not in _markers_in_volumes(engine, instance_id):
                violations.append(f"marker lost from the data volume of {instance_id}")
        violations += _loop_volume_violations(server.data_dir / "volumes", engine, cluster)
    finally:
        db_engine.dispose()
    return violations


def _interval_violations(
    instances: dict[str, InstanceModel], open_intervals: list[BillingIntervalModel]
) -> list[str]:
    found: list[str] = []
    open_compute: dict[str, int] = {}
    for interval in open_intervals:
        instance = instances[interval.instance_id]
        if instance.status == InstanceStatus.DELETED:
            found.append(f"deleted instance {instance.id} has an open {interval.kind} interval")
        if interval.kind == "compute":
            open_compute[instance.id] = open_compute.get(instance.id, 0) + 1
    for instance in instances.values():
        count = open_compute.get(instance.id, 0)
        expected = 1 if instance.status == InstanceStatus.RUNNING else 0
        if count != expected:
            found.append(f"{instance.id} is {instance.status} with {count} open compute intervals")
    return found


def _markers_in_volumes(engine: docker.DockerClient, instance_id: str) -> str:
    """The marker as found in each of the instance's volumes (by label)."""
    texts = []
    for volume in engine.volumes.list(filters={"label": f"{LABEL_INSTANCE}={instance_id}"}):
        try:
            output = engine.containers.run(
                IMAGE,
                ["cat", "/d/.soak-marker"],
                volumes={volume.name: {"bind": "/d", "mode": "ro"}},
                network_mode="none",
                remove=True,
            )
        except docker.errors.ContainerError:
            continue
        texts.append(bytes(output).decode().strip())
    return "\n".join(texts)


def _loop_volume_violations(root: Path, engine: docker.DockerClient, cluster: str) -> list[str]:
    found = []
    names = {v.name for v in engine.volumes.list(filters={"label": f"gpudock.cluster={cluster}"})}
    for image in sorted(root.glob("*.img")) if root.is_dir() else []:
        name = image.name.removesuffix(".img")
        if name not in names:
            found.append(f"volume image {image} without its volume")
        elif not (root / name / "data").is_dir():
            found.append(f"volume {name} is not mounted")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill-after-min", type=int, default=2)
    parser.add_argument("--kill-after-max", type=int, default=8)
    parser.add_argument("--kill-within-s", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engine = docker_client()
    with tempfile.TemporaryDirectory(prefix="gpudock-soak-") as tmp:
        server = ServerProcess(Path(tmp) / "data", FLEET)
        try:
            result = run_soak(
                server.data_dir,
                engine,
                operations=args.operations,
                clients=args.clients,
                seed=args.seed,
                kill_after=(args.kill_after_min, args.kill_after_max),
                kill_within_s=args.kill_within_s,
                max_seconds=args.max_seconds,
                server=server,
            )
        finally:
            server.kill()
            if server.cluster_id:
                remove_cluster_objects(engine, server.cluster_id)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(
            f"operations {result.operations} (answered {result.answered}, 5xx "
            f"{result.server_errors}, server down {result.unreachable}), kills survived "
            f"{result.kills}, instances {result.instances_at_end}, markers checked "
            f"{result.markers_checked}, {result.seconds} s"
        )
        print(f"invariant violations: {len(result.violations)}")
        for violation in result.violations:
            print(f"  - {violation}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
