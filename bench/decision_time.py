"""Decision time per request at 1,213 nodes / 6,212 GPUs, and one placement pass
over 1,000 queued requests.

    .venv/bin/python bench/decision_time.py [--seeds 42,43] [--policies gpudock,fgd,firstfit]
        [--adapter-only]

Replays the default openb trace (the evaluation's method, rank ties) and times
each decision (observe + choose) twice: by the wall clock (perf_counter_ns) and
by the thread's CPU time (thread_time_ns), which a loaded machine does not
inflate by preemption. Prints p50/p99/max per policy and clock and the ratio to
first-fit's, measured in the same run (policies interleaved, so that load hits
all alike). Then fills the fleet to about 85 % with the house policy, queues
1,000 requests drawn from the trace and times `waitqueue.placement_pass` over
them.

Then the same sequence through the server's adapter (`scheduler.hosts.HostPlacer`,
house policy): each pod as the `PlacementRequest` the server makes, timed from
`place` to `placed` (the snapshot mirrored after the commit), beside the pure
core's decisions in the same run; and the adapter's `sync` (what a placement
pass adds before its first decision) with nothing changed and after a full
replay's worth of change. `--adapter-only` skips the pure-core table.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpudock.scheduler.demand import MIB_PER_GB
from gpudock.scheduler.hosts import HostBuild, HostPlacer
from gpudock.scheduler.placement import GpuSlot, HostCapacity, PlacementRequest
from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.replay import replay
from gpudock.scheduler.snapshot import NodeSpec, Snapshot
from gpudock.scheduler.trace import TracePod, arrival_sequence, parse_nodes, parse_pods
from gpudock.scheduler.waitqueue import Waiting, placement_pass

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "alibaba-gpu-2023"


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def queue_pass_ms(nodes: list, pods: list, seed: int) -> tuple[float, int]:
    snapshot = Snapshot(nodes)
    policy = make_policy("gpudock", snapshot, PolicyContext(seed))
    rng = random.Random(seed)
    while snapshot.used_milli < 0.85 * snapshot.capacity_milli:
        demand = rng.choice(pods).demand
        policy.observe(demand)
        choice = policy.choose(demand)
        if choice is not None:
            snapshot.allocate(choice)
    queue = [Waiting(str(i), rng.choice(pods).demand, float(i)) for i in range(1000)]
    start = time.perf_counter_ns()
    placed = placement_pass(queue, policy, snapshot, now=1000.0)
    return (time.perf_counter_ns() - start) / 1e6, len(placed)


def server_fleet(nodes: list[NodeSpec]) -> tuple[list[HostBuild], list[HostCapacity]]:
    """The trace's nodes as the server reads them: builds and all-free capacity."""
    builds, hosts = [], []
    for n in nodes:
        gpus = tuple(GpuSlot(f"{n.name}-g{i}", n.model, i) for i in range(n.gpus))
        cpus, memory = n.cpu_milli / 1000, n.memory_mib / MIB_PER_GB
        builds.append(HostBuild(n.name, cpus, memory, gpus))
        hosts.append(HostCapacity(n.name, cpus, memory, gpus, frozenset({n.model})))
    return builds, hosts


def request_of(pod: TracePod, models: tuple[str, ...]) -> PlacementRequest:
    d = pod.demand
    accepted = sorted(d.models) if d.models is not None else list(models)
    return PlacementRequest(
        gpu_model=accepted[0] if d.gpus else None,
        gpu_count=d.gpus,
        cpus=d.cpu_milli / 1000,
        memory_gb=d.memory_mib / MIB_PER_GB,
        share_milli=d.milli if d.is_share else None,
        other_models=frozenset(accepted[1:]) if d.gpus else frozenset(),
    )


def adapter_times(nodes: list[NodeSpec], pods: list[TracePod], seed: int) -> dict[str, list[int]]:
    """Wall and CPU ns per decision through HostPlacer, and its sync times."""
    builds, hosts = server_fleet(nodes)
    placer = HostPlacer("gpudock", seed=seed)
    placer.sync(builds, hosts)
    sequence, _ = arrival_sequence(pods, nodes, 1.3, seed)
    models = tuple(sorted({n.model for n in nodes}))
    out: dict[str, list[int]] = {"wall": [], "cpu": [], "sync idle": [], "sync moved": []}
    for pod in sequence:
        request = request_of(pod, models)
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        placement = placer.place(request, arrival=True)
        if placement is not None:
            placer.placed(placement, request)
        out["cpu"].append(time.thread_time_ns() - cpu)
        out["wall"].append(time.perf_counter_ns() - wall)
    filled = placer.hosts
    out["sync reused"] = []
    for _ in range(5):
        start = time.perf_counter_ns()
        placer.sync(builds, [replace(h) for h in filled])  # read afresh, nothing changed
        out["sync idle"].append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        placer.sync(builds, placer.hosts)  # the rows of unchanged hosts reused
        out["sync reused"].append(time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        placer.sync(builds, hosts)  # every node changed (all free again), then back
        placer.sync(builds, filled)
        out["sync moved"].append((time.perf_counter_ns() - start) // 2)
    used = placer.snapshot.used_milli / placer.snapshot.capacity_milli
    print(f"# adapter replay, seed {seed}: fleet {used:.1%} allocated at the end")
    return out


def print_adapter(nodes: list[NodeSpec], pods: list[TracePod], seeds: list[int]) -> None:
    times: dict[str, list[int]] = {}
    core: dict[str, list[int]] = {"wall": [], "cpu": []}
    clocks = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
    for seed in seeds:
        for key, ns in adapter_times(nodes, pods, seed).items():
            times.setdefault(key, []).extend(ns)
        for clock, read_clock in clocks.items():
            r = replay(nodes, pods, "gpudock", seed=seed, clock_ns=read_clock)
            core[clock].extend(r.decision_ns)
    print("\n| house policy | samples | p50 µs | p99 µs | max µs |")
    print("|---|---:|---:|---:|---:|")
    rows = {
        **{f"core ({k})": v for k, v in core.items()},
        **{f"adapter ({k})": v for k, v in times.items()},
    }
    for label, ns in rows.items():
        p50, p99, top = np.percentile(ns, [50, 99, 100]) / 1000.0
        print(f"| {label} | {len(ns)} | {p50:.0f} | {p99:.0f} | {top:.0f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="42,43")
    ap.add_argument("--policies", default="firstfit,gpudock,fgd")
    ap.add_argument("--trace", default="default", help="a published trace, e.g. gpuspec10")
    ap.add_argument("--adapter-only", action="store_true", help="only the server adapter's times")
    a = ap.parse_args()
    nodes = parse_nodes(read(DATA / "openb_node_list_gpu_node.csv"))
    pods = parse_pods(read(DATA / f"openb_pod_list_{a.trace}.csv"))
    seeds = [int(s) for s in a.seeds.split(",")]
    if a.adapter_only:
        print_adapter(nodes, pods, seeds)
        return 0
    clocks = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
    times: dict[tuple[str, str], list[int]] = {}
    for seed in (int(s) for s in a.seeds.split(",")):
        for clock, read_clock in clocks.items():
            for policy in a.policies.split(","):  # interleaved, so load hits all alike
                r = replay(nodes, pods, policy, seed=seed, clock_ns=read_clock)
                times.setdefault((policy, clock), []).extend(r.decision_ns)
    print(f"# {len(nodes)} nodes, {sum(n.gpus for n in nodes)} GPUs; seeds {a.seeds}")
    print(
        "| policy | clock | decisions | p50 µs | p99 µs | max µs "
        "| p50 / first-fit | p99 / first-fit |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (policy, clock), ns in times.items():
        base = np.percentile(times[("firstfit", clock)], [50, 99]) / 1000.0
        p50, p99, top = np.percentile(ns, [50, 99, 100]) / 1000.0
        print(
            f"| {policy} | {clock} | {len(ns)} | {p50:.0f} | {p99:.0f} | {top:.0f} | "
            f"{p50 / base[0]:.2f} | {p99 / base[1]:.2f} |"
        )
    ms, placed = queue_pass_ms(nodes, pods, 42)
    print(
        f"\nplacement pass over 1,000 queued requests (fleet ~85 % allocated): "
        f"{ms:.1f} ms, {placed} placed"
    )
    print_adapter(nodes, pods, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
