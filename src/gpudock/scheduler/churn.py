"""Replay with churn: pods arrive, run for their trace duration and leave; a wait
queue holds what cannot be placed. Beyond the FGD paper, which never lets a
pod leave.

The trace's own arrivals ask for ~1 % of the cluster at any time, which tests
nothing, so the pods of the evaluation's seeded sequence arrive as a Poisson
stream whose rate makes the offered load (GPU demand x duration per second)
`load` x capacity, and each runs for its trace lifetime (deletion - creation)
from the moment it is placed. After every arrival or departure the queue gets
one placement pass (`waitqueue.placement_pass`). Reported, over the arrival
period: GPU-hours allocated as % of capacity x time, queue wait p50/p99 by
request size, requests still waiting at the end (their wait counts up to
then), and the longest wait.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudock.scheduler.demand import Demand
from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.snapshot import Assignment, NodeSpec, Snapshot
from gpudock.scheduler.trace import TracePod, arrival_sequence, typical_workload
from gpudock.scheduler.waitqueue import DEFAULT_OVERTAKE_LIMIT_S, Waiting, placement_pass

SIZES = ("share", "1", "2", "4", "8")


def size_label(demand: Demand) -> str:
    if demand.is_share:
        return "share"
    return str(demand.gpus) if demand.gpus in (1, 2, 4, 8) else "other"


@dataclass(frozen=True)
class ChurnReport:
    policy: str
    seed: int
    load: float
    gpu_hours_pct: float
    waited: int  # requests that had to wait at all
    still_waiting: int
    wait_s: dict[str, tuple[float, float]]  # size -> (p50, p99) seconds, over all requests
    longest_wait_s: float
    longest_wait_size: str

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "load": self.load,
            "gpu_hours_pct": self.gpu_hours_pct,
            "waited": self.waited,
            "still_waiting": self.still_waiting,
            "wait_s": {k: {"p50": v[0], "p99": v[1]} for k, v in self.wait_s.items()},
            "longest_wait_s": self.longest_wait_s,
            "longest_wait_size": self.longest_wait_size,
        }


def churn_replay(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    policy_name: str,
    *,
    seed: int,
    load: float = 1.0,
    overtake_limit_s: float = DEFAULT_OVERTAKE_LIMIT_S,
) -> ChurnReport:
    snapshot = Snapshot(nodes)
    sequence, _ = arrival_sequence(pods, nodes, 1.3, seed)
    sequence = [p for p in sequence if p.demand.gpus]  # CPU-only pods do not load GPUs
    durations = np.array([max(1, (p.deleted or 0) - (p.created or 0)) for p in sequence], float)
    gpu_seconds = np.array([p.demand.total_milli for p in sequence], float) * durations
    rate = load * snapshot.capacity_milli / float(gpu_seconds.mean())
    rng = np.random.default_rng([seed, 0xC4])
    arrivals = np.cumsum(rng.exponential(1.0 / rate, len(sequence)))
    policy = make_policy(policy_name, snapshot, PolicyContext(seed, None, typical_workload(pods)))
    sim = _Simulation(snapshot, policy, overtake_limit_s)
    for i, pod in enumerate(sequence):
        sim.advance_to(float(arrivals[i]))
        policy.observe(pod.demand)
        sim.arrive(Waiting(str(i), pod.demand, float(arrivals[i])), float(durations[i]))
    return sim.report(policy_name, seed, load, float(arrivals[-1]) if len(arrivals) else 0.0)


class _Simulation:
    def __init__(self, snapshot: Snapshot, policy: Any, overtake_limit_s: float) -> None:
        self.snapshot, self.policy, self.limit = snapshot, policy, overtake_limit_s
        self.queue: list[Waiting] = []
        self.duration: dict[str, float] = {}
        self.departures: list[tuple[float, int, Assignment]] = []
        self.waits: dict[str, float] = {}
        self.sizes: dict[str, str] = {}
        self.gpu_milli_seconds = 0.0
        self.now = 0.0
        self._tick = 0

    def advance_to(self, t: float) -> None:
        while self.departures and self.departures[0][0] <= t:
            when, _, assignment = heapq.heappop(self.departures)
            self._account(when)
            self.snapshot.release(assignment)
            self._pass()
        self._account(t)

    def arrive(self, w: Waiting, duration: float) -> None:
        self.duration[w.request_id] = duration
        self.sizes[w.request_id] = size_label(w.demand)
        self.queue.append(w)
        self._pass()

    def _account(self, t: float) -> None:
        self.gpu_milli_seconds += self.snapshot.used_milli * (t - self.now)
        self.now = t

    def _pass(self) -> None:
        if not self.queue:
            return
        placed = placement_pass(self.queue, self.policy, self.snapshot, self.now, self.limit)
        if not placed:
            return
        done = {w.request_id for w, _ in placed}
        self.queue = [w for w in self.queue if w.request_id not in done]
        for w, assignment in placed:
            self.waits[w.request_id] = self.now - w.since
            self._tick += 1
            end = self.now + self.duration[w.request_id]
            heapq.heappush(self.departures, (end, self._tick, assignment))

    def report(self, policy: str, seed: int, load: float, horizon: float) -> ChurnReport:
        waits = dict(self.waits)
        for w in self.queue:
            waits[w.request_id] = horizon - w.since
        by_size: dict[str, tuple[float, float]] = {}
        for size in SIZES:
            values = [v for k, v in waits.items() if self.sizes[k] == size]
            if values:
                p50, p99 = np.percentile(values, [50, 99])
                by_size[size] = (round(float(p50), 1), round(float(p99), 1))
        longest = max(waits, key=lambda k: waits[k]) if waits else None
        capacity_seconds = self.snapshot.capacity_milli * horizon
        return ChurnReport(
            policy=policy,
            seed=seed,
            load=load,
            gpu_hours_pct=round(100.0 * self.gpu_milli_seconds / capacity_seconds, 2)
            if capacity_seconds
            else 0.0,
            waited=sum(1 for v in waits.values() if v > 0),
            still_waiting=len(self.queue),
            wait_s=by_size,
            longest_wait_s=round(waits[longest], 1) if longest else 0.0,
            longest_wait_size=self.sizes[longest] if longest else "",
        )
