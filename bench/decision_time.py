"""Decision time per request at 1,213 nodes / 6,212 GPUs, and one placement pass
over 1,000 queued requests.

    .venv/bin/python bench/decision_time.py [--seeds 42,43] [--policies gpudock,fgd,firstfit]

Replays the default openb trace (the evaluation's method, rank ties) and times
each decision (observe + choose) twice: by the wall clock (perf_counter_ns) and
by the thread's CPU time (thread_time_ns), which a loaded machine does not
inflate by preemption. Prints p50/p99/max per policy and clock and the ratio to
first-fit's, measured in the same run (policies interleaved, so that load hits
all alike). Then fills the fleet to about 85 % with the house policy, queues
1,000 requests drawn from the trace and times `waitqueue.placement_pass` over
them.
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path

import numpy as np

from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.replay import replay
from gpudock.scheduler.snapshot import Snapshot
from gpudock.scheduler.trace import parse_nodes, parse_pods
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="42,43")
    ap.add_argument("--policies", default="firstfit,gpudock,fgd")
    ap.add_argument("--trace", default="default", help="a published trace, e.g. gpuspec10")
    a = ap.parse_args()
    nodes = parse_nodes(read(DATA / "openb_node_list_gpu_node.csv"))
    pods = parse_pods(read(DATA / f"openb_pod_list_{a.trace}.csv"))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
