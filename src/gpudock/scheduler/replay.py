"""Replay of an openb trace by the evaluation method of the FGD paper.

Pods arrive one at a time and never leave; each is placed or fails for good.
After every arrival, A = arrived GPU demand and U = allocated GPU milli, both
as % of capacity; the value at checkpoint x is the mean U over events with
round(A) == x (or within +-1 if none), and "unallocated" is 100 - U. With
`ties="rank"` the baselines break ties by the evaluator's seeded node order;
with `ties="random"` uniformly at random. Decision times are taken only if
the caller passes a clock (the core itself reads none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpudock.scheduler.registry import PolicyContext, make_policy
from gpudock.scheduler.snapshot import NodeSpec, Snapshot
from gpudock.scheduler.trace import TracePod, arrival_sequence, typical_workload

DEFAULT_CHECKPOINTS = (50, 80, 90, 95, 100, 110, 120, 130)


@dataclass(frozen=True)
class ReplayResult:
    policy: str
    seed: int
    ties: str
    pods: int
    failed_pods: int
    failed_gpus: float
    allocated_pct: dict[int, float | None]  # at each checkpoint of arrived demand
    final_allocated_pct: float
    decision_ns: list[int] = field(default_factory=list, repr=False)

    def unallocated_pct(self, checkpoint: int) -> float | None:
        value = self.allocated_pct.get(checkpoint)
        return None if value is None else round(100.0 - value, 2)


def replay(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    policy_name: str,
    *,
    seed: int,
    ties: str = "rank",
    tune: float = 1.3,
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS,
    clock_ns: Callable[[], int] | None = None,
) -> ReplayResult:
    if ties not in ("rank", "random"):
        raise ValueError("ties is 'rank' or 'random'")
    snapshot = Snapshot(nodes)
    sequence, rank = arrival_sequence(pods, nodes, tune, seed)
    context = PolicyContext(seed, rank if ties == "rank" else None, typical_workload(pods))
    policy = make_policy(policy_name, snapshot, context)
    arrived = np.empty(len(sequence))
    allocated = np.empty(len(sequence))
    arrived_milli = failed = failed_milli = 0
    times: list[int] = []
    for i, pod in enumerate(sequence):
        demand = pod.demand
        arrived_milli += demand.total_milli
        start = clock_ns() if clock_ns else 0
        policy.observe(demand)
        choice = policy.choose(demand)
        if clock_ns:
            times.append(clock_ns() - start)
        if choice is None:
            failed += 1
            failed_milli += demand.total_milli
        else:
            snapshot.allocate(choice)
        arrived[i], allocated[i] = arrived_milli, snapshot.used_milli
    capacity = float(snapshot.capacity_milli)
    return ReplayResult(
        policy=policy_name,
        seed=seed,
        ties=ties,
        pods=len(sequence),
        failed_pods=failed,
        failed_gpus=failed_milli / 1000.0,
        allocated_pct=checkpoint_means(arrived, allocated, capacity, checkpoints),
        final_allocated_pct=round(snapshot.used_milli / capacity * 100.0, 2),
        decision_ns=times,
    )


def checkpoint_means(
    arrived: np.ndarray, allocated: np.ndarray, capacity: float, checkpoints: Sequence[int]
) -> dict[int, float | None]:
    """Mean allocation % over events whose rounded arrival % is the checkpoint."""
    arrived_pct = np.round(arrived / capacity * 100.0)
    allocated_pct = np.round(allocated / capacity * 100.0, 2)
    out: dict[int, float | None] = {}
    for x in checkpoints:
        sel = arrived_pct == x
        if not sel.any():
            sel = (arrived_pct >= x - 1) & (arrived_pct <= x + 1)
        out[x] = round(float(allocated_pct[sel].mean()), 2) if sel.any() else None
    return out
