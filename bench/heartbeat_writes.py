"""What one agent heartbeat costs the server's database: the statements
`links.record_heartbeat` runs for an unchanged report, and its time against a
one-row update transaction (the least a heartbeat that records its time can
write), measured in the same run on real SQLite.

    nice .venv/bin/python -m bench.heartbeat_writes [--beats 300] [--gpus 1,8]

In process: a platform on the fake runtime over SQLite in a temp dir, one host
enrolled per GPU count as its agent's hello would (`enrollment.redeem`), then
`--beats` heartbeats with the same report, the statements counted by kind
through SQLAlchemy's `before_cursor_execute` event. `bench.agent_fleet` prints
this too.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event, update

from gpudock.db.models import AgentHostModel
from gpudock.link.wire import GpuReport, HostReport, JoinRequest
from gpudock.platform import Platform, open_platform
from gpudock.runtime.fake import FakeRuntime
from gpudock.services.agents import enrollment, hosts, links
from gpudock.settings import Settings


@dataclass(frozen=True)
class HeartbeatCost:
    gpus: int
    statements: dict[str, float]  # per heartbeat, by first word
    heartbeat_ms: float  # wall time, which waits on a loaded machine's cores and the disk
    heartbeat_cpu_ms: float  # this process's CPU time
    bare_update_ms: float
    bare_update_cpu_ms: float


def _report(gpus: int) -> HostReport:
    return HostReport(
        agent_version="bench",
        cpus=64,
        memory_gb=512,
        cuda_version="12.8",
        gpus=[
            GpuReport(uuid=f"GPU-bench-{gpus}-{i}", index=i, model="H200-140GB", memory_mb=143771)
            for i in range(gpus)
        ],
    )


def _enroll(platform: Platform, gpus: int) -> str:
    token = hosts.add_host(platform.ctx, f"bench-{gpus}").token
    join = JoinRequest(token_id=token.token_id, secret=token.secret)
    key = f"ssh-ed25519 AAAAbench{gpus}"
    return enrollment.redeem(platform.ctx, join, key, _report(gpus), "127.0.0.1").id


def _bare_update(platform: Platform, host_id: str) -> None:
    with platform.ctx.sessions.begin() as session:
        session.execute(
            update(AgentHostModel)
            .where(AgentHostModel.id == host_id)
            .values(last_heartbeat_at=platform.ctx.clock())
        )


def measure(workdir: Path, gpu_counts: list[int], beats: int) -> list[HeartbeatCost]:
    settings = Settings(
        data_dir=workdir / "d",
        simulate="1x1xA100-80GB",
        runtime="fake",
        image_pull="never",
        agent_link_port=0,
        agent_link_host="127.0.0.1",
    )
    platform = open_platform(settings, runtime=FakeRuntime())
    engine = platform.ctx.sessions.kw["bind"]
    counted: Counter[str] = Counter()

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        counted[statement.split(None, 1)[0].upper()] += 1

    results = []
    try:
        for gpus in gpu_counts:
            host_id, report = _enroll(platform, gpus), _report(gpus)
            event.listen(engine, "before_cursor_execute", count)
            counted.clear()
            began, cpu_began = time.perf_counter(), time.process_time()
            for _ in range(beats):
                assert links.record_heartbeat(platform.ctx, host_id, report)
            heartbeat_s = time.perf_counter() - began
            heartbeat_cpu_s = time.process_time() - cpu_began
            event.remove(engine, "before_cursor_execute", count)
            statements = {kind: n / beats for kind, n in sorted(counted.items())}
            began, cpu_began = time.perf_counter(), time.process_time()
            for _ in range(beats):
                _bare_update(platform, host_id)
            bare_s = time.perf_counter() - began
            bare_cpu_s = time.process_time() - cpu_began
            per_beat = [value * 1000 / beats for value in (heartbeat_s, heartbeat_cpu_s)]
            per_bare = [value * 1000 / beats for value in (bare_s, bare_cpu_s)]
            results.append(HeartbeatCost(gpus, statements, *per_beat, *per_bare))
    finally:
        platform.close()
    return results


def print_costs(costs: list[HeartbeatCost]) -> None:
    print("\n## one heartbeat in the server's database (SQLite, unchanged report)")
    for cost in costs:
        kinds = ", ".join(f"{n:g} {kind}" for kind, n in cost.statements.items())
        ratio = cost.heartbeat_cpu_ms / cost.bare_update_cpu_ms
        print(
            f"{cost.gpus} GPU(s): {kinds} per heartbeat; CPU {cost.heartbeat_cpu_ms:.2f} ms = "
            f"{ratio:.1f}x a one-row update transaction's ({cost.bare_update_cpu_ms:.2f} ms); "
            f"wall {cost.heartbeat_ms:.2f} ms against {cost.bare_update_ms:.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beats", type=int, default=300)
    parser.add_argument("--gpus", default="1,8", help="GPU counts, comma separated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpudock-heartbeat-") as name:
        costs = measure(Path(name), [int(n) for n in args.gpus.split(",")], args.beats)
    print_costs(costs)


if __name__ == "__main__":
    main()
