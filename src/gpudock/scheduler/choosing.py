"""What every policy shares: the policy protocol, tie rules and GPU choice on a node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from gpudock.scheduler.demand import MILLI_PER_GPU, Demand
from gpudock.scheduler.snapshot import Assignment, BoolArray, IntArray, Snapshot


class Policy(Protocol):
    """Chooses where a demand goes on the snapshot it was built over.

    `choose` returns None when the demand should wait: nothing fits, or, if
    `may_defer`, the policy holds it back for the fleet's sake. `allowed`, if
    given, is a mask of the nodes it may choose from (the server's host
    constraints: where the image runs, `--stay`, hosts a starving request
    holds). It does not change the snapshot: the caller allocates the
    assignment. `observe` is told of every arriving demand, placed or not, so a
    policy can learn the workload.
    """

    def choose(
        self, demand: Demand, *, may_defer: bool = True, allowed: BoolArray | None = None
    ) -> Assignment | None: ...

    def observe(self, demand: Demand) -> None: ...


class TieRule:
    """Picks one node among equally good ones.

    With `rank` (a permutation: lower wins) the choice is a fixed node order, as
    in FGD's simulator, whose node names carry a seeded prefix; without it the
    choice is uniformly random from a seeded generator, as in stock
    kube-scheduler.
    """

    def __init__(self, rank: IntArray | None, rng: np.random.Generator) -> None:
        self.rank = rank
        self.rng = rng

    def pick(self, nodes: IntArray) -> int:
        if len(nodes) == 1:
            return int(nodes[0])
        if self.rank is None:
            return int(nodes[self.rng.integers(len(nodes))])
        return int(nodes[np.argmin(self.rank[nodes])])


def candidates(snapshot: Snapshot, demand: Demand, allowed: BoolArray | None) -> IntArray:
    """Indices of the nodes that can take `demand` now, among `allowed` (None: all)."""
    feasible = snapshot.feasible(demand)
    return np.flatnonzero(feasible if allowed is None else feasible & allowed)


def seeded_order(snapshot: Snapshot, seed: int) -> IntArray:
    """A node rank from the seed and node names alone, whatever order nodes come in."""
    by_name = sorted(range(snapshot.size), key=lambda i: snapshot.specs[i].name)
    rank = np.empty(snapshot.size, np.int64)
    rank[by_name] = np.random.default_rng([seed, 0x6770]).permutation(snapshot.size)
    return rank


def best_fit_gpus(snapshot: Snapshot, node: int, demand: Demand) -> tuple[int, ...]:
    """A share takes the fitting GPU with least free milli (lowest index among
    equals); whole GPUs go to the node's preferred group (see `whole_gpu_group`)."""
    if demand.gpus == 0:
        return ()
    row = snapshot.gpu_free[node]
    if demand.is_share:
        fitting = np.flatnonzero(row >= demand.milli)
        return (int(fitting[np.argmin(row[fitting])]),)
    free = [int(g) for g in np.flatnonzero(row >= MILLI_PER_GPU)]
    return whole_gpu_group(snapshot, node, free, demand.gpus)


def whole_gpu_group(
    snapshot: Snapshot, node: int, free: Sequence[int], count: int
) -> tuple[int, ...]:
    """`count` of the `free` GPU indices: without topology the lowest indices;
    with it the group with most NVLink pairs, then on one NUMA node, then lowest
    index, grown greedily from every seed GPU (n <= 16 per host: microseconds)."""
    spec = snapshot.specs[node]
    if count == 1 or not (spec.nvlink or spec.numa):
        return tuple(free[:count])
    links = spec.nvlink or tuple(frozenset() for _ in range(spec.gpus))
    numa = spec.numa or tuple(None for _ in range(spec.gpus))

    def grown_from(seed: int) -> list[int]:
        group, rest = [seed], [g for g in free if g != seed]
        while len(group) < count:
            pick = max(rest, key=lambda g: (len(links[g] & set(group)), numa[g] == numa[seed], -g))
            group.append(pick)
            rest.remove(pick)
        return group

    def affinity(group: list[int]) -> tuple[int, int, int]:
        members = set(group)
        pairs = sum(len(links[g] & members) for g in group)
        return (pairs, int(len({numa[g] for g in group}) == 1), -min(group))

    best = max((grown_from(seed) for seed in free), key=affinity)
    return tuple(sorted(best))
