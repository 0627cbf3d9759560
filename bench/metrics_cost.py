"""What monitoring costs: the sampler's server CPU per round at 100 running
instances, and the samples table's size after 30 days at 1,000 instances.

Sampling cost (server CPU = this process's CPU time, every thread):
- **fake**: 100 instances on the fake runtime and a simulated fleet, so the
  figure is gpudock's own work (queries, rates, the GPU model, the insert);
  the baseline is the same round with nothing running (its fixed cost);
- **real**: a few real containers on the Docker Engine, scaled to 100; the
  baseline, in the same run, is the engine reads alone (docker-py's inspect and
  one-shot stats per container, what any sampler must do) and one
  `docker stats --no-stream` of the same containers (its CPU is the CLI's).

Table size: a few instances' 30 days of raw samples every 10 s, written as the
sampler writes them, with the real downsampling pass every 5 simulated minutes;
rows and SQLite bytes (pages of the table and its indexes) are then scaled to
1,000 instances.

Run: `.venv/bin/python bench/metrics_cost.py` (`--json` for the figures as JSON).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpudock.db.models import InstanceModel, UserModel
from gpudock.platform import Platform, open_platform
from gpudock.runtime.base import Runtime
from gpudock.runtime.docker.engine import DockerRuntime
from gpudock.runtime.fake import FakeRuntime, FakeUsage
from gpudock.services.accounts import users
from gpudock.services.instances import actions
from gpudock.services.instances import container_spec as containers
from gpudock.services.instances.actions import InstanceRequest
from gpudock.services.metrics.downsampling import Retention, downsample, table_rows
from gpudock.services.metrics.sampling import SamplerState, sample_running
from gpudock.services.metrics.store import GpuFigure, Sample, record_samples
from gpudock.settings import Settings

T0 = datetime(2026, 11, 1, tzinfo=UTC)
INTERVAL_S = 10
DOWNSAMPLE_EVERY_S = 300  # reconcile.sampling.DOWNSAMPLE_INTERVAL_S
PER_USER = 10  # instances per user: stays under any per-user limit
GAP_S = 2.0  # rest between real rounds (see measure_rounds)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class RoundCost:
    instances: int
    rounds: int
    cpu_ms_per_round: float
    wall_ms_per_round: float


@contextmanager
def quiet_platform(
    data_dir: Path, runtime: Runtime, clock: Callable[[], datetime], simulate: str
) -> Iterator[Platform]:
    logging.getLogger("gpudock").setLevel(logging.WARNING)
    settings = Settings(
        data_dir=data_dir, simulate=simulate, runtime="fake", image_pull="never", ssh_enabled=False
    )
    platform = open_platform(settings, runtime=runtime, clock=clock)
    try:
        yield platform
    finally:
        platform.close()


def start_instances(platform: Platform, count: int, prefix: str) -> list[InstanceModel]:
    owners: list[UserModel] = []
    for n in range(0, count, PER_USER):
        owners.append(users.create_user(platform.ctx, f"{prefix}{n // PER_USER}").user)
    for n in range(count):
        request = InstanceRequest(gpu_model="A100-80GB", gpu_count=1, name=f"{prefix}{n}")
        actions.create_instance(platform.ctx, owners[n // PER_USER], request)
    platform.reconciler.drain(timeout_s=600)
    found = [
        actions.get_instance(platform.ctx, owners[n // PER_USER], f"{prefix}{n}")
        for n in range(count)
    ]
    assert all(i.status.value == "running" for i in found), [i.status for i in found]
    return found


def measure_rounds(
    round_: Callable[[], object], rounds: int, instances: int, gap_s: float = 0.0
) -> RoundCost:
    """CPU and wall per round; `gap_s` of rest before each round, not counted:
    the engine answers a one-shot stats call at once only a second or more
    after the last one, as it is between the server's rounds."""
    cpu = wall = 0.0
    for _ in range(rounds):
        time.sleep(gap_s)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        round_()
        cpu, wall = cpu + time.process_time() - cpu0, wall + time.perf_counter() - wall0
    return RoundCost(instances, rounds, 1000 * cpu / rounds, 1000 * wall / rounds)


def fake_sampling(count: int, rounds: int, data_dir: Path) -> dict[str, Any]:
    clock = Clock()
    runtime = FakeRuntime(clock=clock)
    hosts = (count + 7) // 8 + 1
    with quiet_platform(data_dir, runtime, clock, f"{hosts}x8xA100-80GB") as platform:
        state = SamplerState()
        idle = measure_rounds(lambda: sample_running(platform.ctx, state), rounds, 0)
        start_instances(platform, count, "f")
        rng = random.Random(1)

        def busy_round() -> None:
            clock.now += timedelta(seconds=INTERVAL_S)
            for cid in runtime_container_ids(runtime):
                use = runtime.usage.get(cid, FakeUsage())
                runtime.usage[cid] = replace(
                    use,
                    cpu_total_ns=use.cpu_total_ns + int(rng.uniform(0, 2) * INTERVAL_S * 1e9),
                    block_read_bytes=use.block_read_bytes + rng.randrange(10**7),
                    net_rx_bytes=use.net_rx_bytes + rng.randrange(10**6),
                )
            done = sample_running(platform.ctx, state)
            assert len(done) == count, len(done)

        busy_round()  # the first reading has no rates: not a steady round
        busy = measure_rounds(busy_round, rounds, count)
    return {"idle": asdict(idle), "sampling": asdict(busy)}


def runtime_container_ids(runtime: FakeRuntime) -> list[str]:
    return [c.state.id for c in runtime.containers.values() if c.state.running]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def real_sampling(count: int, rounds: int, data_dir: Path) -> dict[str, Any]:
    import docker  # only this part needs the engine

    runtime = DockerRuntime()
    engine = docker.from_env()
    with quiet_platform(data_dir, runtime, _utc_now, "1x8xA100-80GB") as platform:
        try:
            instances = start_instances(platform, count, "r")
            names = [containers.container_name(platform.ctx.cluster_id, i.id) for i in instances]
            state = SamplerState()
            first = measure_rounds(lambda: sample_running(platform.ctx, state), 1, count, GAP_S)
            sampler = measure_rounds(
                lambda: sample_running(platform.ctx, state), rounds, count, GAP_S
            )

            def engine_reads() -> None:
                for name in names:
                    engine.api.inspect_container(name)
                    engine.api.stats(name, stream=False, one_shot=True)

            reads = measure_rounds(engine_reads, rounds, count)
            cli_cpu0, wall0 = children_cpu_s(), time.perf_counter()
            for _ in range(rounds):
                subprocess.run(
                    ["docker", "stats", "--no-stream", *names], check=True, capture_output=True
                )
            cli = RoundCost(
                count,
                rounds,
                1000 * (children_cpu_s() - cli_cpu0) / rounds,
                1000 * (time.perf_counter() - wall0) / rounds,
            )
        finally:
            _delete_instances(platform)
            _remove_cluster(engine, platform.ctx.cluster_id)
    return {
        "first_round_with_disk_walk": asdict(first),
        "sampling": asdict(sampler),
        "engine_reads_alone": asdict(reads),
        "docker_stats_cli": asdict(cli),
    }


def _delete_instances(platform: Platform) -> None:
    """Through the service, which also unmounts a size-limited data volume."""
    for user in users.list_users(platform.ctx):
        for instance in actions.list_instances(platform.ctx, user):
            actions.delete_instance(platform.ctx, user, instance.id)
    platform.reconciler.drain(timeout_s=600)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _remove_cluster(engine: Any, cluster_id: str) -> None:
    label = f"gpudock.cluster={cluster_id}"
    for container in engine.containers.list(all=True, filters={"label": label}):
        container.remove(force=True, v=True)
    for volume in engine.volumes.list(filters={"label": label}):
        volume.remove(force=True)
    for network in engine.networks.list(filters={"label": label}):
        network.remove()


def fake_sample(instance_id: str, at: datetime, rng: random.Random) -> Sample:
    """A one-GPU instance's raw sample with every figure present: the widest row."""
    return Sample(
        instance_id=instance_id,
        at=at,
        cpu_percent=round(rng.uniform(0, 800), 2),
        memory_bytes=rng.randrange(2**30, 64 * 2**30),
        data_disk_bytes=rng.randrange(2**30, 50 * 2**30),
        system_disk_bytes=rng.randrange(2**28, 10 * 2**30),
        disk_read_bps=round(rng.uniform(0, 5e8), 2),
        disk_write_bps=round(rng.uniform(0, 5e8), 2),
        net_rx_bps=round(rng.uniform(0, 1e8), 2),
        net_tx_bps=round(rng.uniform(0, 1e8), 2),
        gpus=(GpuFigure(round(rng.uniform(0, 100), 1), round(rng.uniform(0, 81920), 1)),),
    )


def table_size(days: int, count: int, scale_to: int, data_dir: Path) -> dict[str, Any]:
    clock = Clock()
    with quiet_platform(data_dir, FakeRuntime(clock=clock), clock, "1x8xA100-80GB") as platform:
        ids = [i.id for i in start_instances(platform, count, "d")]
        rng = random.Random(7)
        began, peak = time.perf_counter(), 0
        end = T0 + timedelta(days=days)
        at = T0
        while at < end:
            step_end = at + timedelta(seconds=DOWNSAMPLE_EVERY_S)
            batch = []
            while at < step_end:
                batch += [fake_sample(i, at, rng) for i in ids]
                at += timedelta(seconds=INTERVAL_S)
            with platform.ctx.sessions.begin() as session:
                record_samples(session, batch)
            downsample(platform.ctx, at, Retention())
            if at.minute == 0 and at.hour == 0:
                with platform.ctx.reader() as session:
                    peak = max(peak, table_rows(session))
        with platform.ctx.reader() as session:
            rows = table_rows(session)
        by_resolution, table_bytes = _sqlite_sizes(data_dir)
    factor = scale_to / count
    return {
        "days": days,
        "instances_simulated": count,
        "simulated_wall_s": round(time.perf_counter() - began, 1),
        "rows_per_instance": rows / count,
        "rows_by_resolution_per_instance": {k: v / count for k, v in by_resolution.items()},
        "bytes_per_instance": table_bytes / count,
        "scaled_to": scale_to,
        "rows_scaled": round(rows * factor),
        "bytes_scaled": round(table_bytes * factor),
        "peak_rows_at_midnights_per_instance": peak / count,
    }


def _sqlite_sizes(data_dir: Path) -> tuple[dict[str, int], int]:
    """Rows per resolution, and the bytes of the table's and its indexes' pages."""
    (database,) = data_dir.glob("*.db")
    with sqlite3.connect(database) as db:
        by_resolution = dict(
            db.execute("SELECT resolution_s, count(*) FROM instance_samples GROUP BY 1").fetchall()
        )
        (size,) = db.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name IN "
            "(SELECT name FROM sqlite_master WHERE tbl_name = 'instance_samples')"
        ).fetchone()
    return {str(k): int(v) for k, v in by_resolution.items()}, int(size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake", type=int, default=100, help="instances on the fake runtime")
    parser.add_argument("--real", type=int, default=5, help="real containers (0: skip)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--day-instances", type=int, default=2, help="instances simulated")
    parser.add_argument("--scale-to", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpudock-bench-metrics-") as tmp:
        root = Path(tmp)
        figures["fake"] = fake_sampling(args.fake, args.rounds, root / "fake")
        if args.real:
            figures["real"] = real_sampling(args.real, args.rounds, root / "real")
        figures["table"] = table_size(args.days, args.day_instances, args.scale_to, root / "days")
    print(json.dumps(figures, indent=2) if args.json else _report(figures, args.fake))
    return 0


def _report(figures: dict[str, Any], per: int) -> str:
    lines = []
    fake = figures["fake"]
    lines.append(
        f"fake runtime, {per} instances: {fake['sampling']['cpu_ms_per_round']:.1f} ms CPU / round "
        f"({fake['sampling']['wall_ms_per_round']:.1f} ms wall); idle round "
        f"{fake['idle']['cpu_ms_per_round']:.2f} ms CPU"
    )
    if "real" in figures:
        real = figures["real"]
        n = real["sampling"]["instances"]
        for key in (
            "sampling",
            "engine_reads_alone",
            "docker_stats_cli",
            "first_round_with_disk_walk",
        ):
            cost = real[key]
            lines.append(
                f"real, {n} containers, {key}: {cost['cpu_ms_per_round']:.1f} ms CPU, "
                f"{cost['wall_ms_per_round']:.0f} ms wall / round; per 100: "
                f"{cost['cpu_ms_per_round'] * 100 / n:.0f} ms CPU"
            )
    table = figures["table"]
    lines.append(
        f"table after {table['days']} days: {table['rows_per_instance']:.0f} rows and "
        f"{table['bytes_per_instance'] / 2**20:.2f} MiB per instance; at {table['scaled_to']}: "
        f"{table['rows_scaled']:,} rows, {table['bytes_scaled'] / 2**30:.2f} GiB "
        f"({table['rows_by_resolution_per_instance']}; simulated in {table['simulated_wall_s']} s)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
